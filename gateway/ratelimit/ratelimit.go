// Package ratelimit is the gateway's token buckets per key (a user, a client address) in
// bounded memory: the grab path's per-user and per-IP limits, the public /readyz's per-client
// limit and the console's sign-in limit.
package ratelimit

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/seckill-pipeline/seckill/gateway/jsonapi"
)

// Keyed is a token bucket per key (user or IP bucket) with bounded memory: at most
// maxKeys buckets, and when a new key needs room the least recently used one goes. A key
// that was evicted starts with a full bucket again, which only errs on the side of the
// client; a client in active use is never the one evicted, so nobody can reset another
// client's bucket by flooding the table with fresh keys (which dropping the whole table
// when full allowed). A hit costs a map lookup and relinking two list nodes under the lock
// (BenchmarkKeyedLimiter).
type Keyed struct {
	limit   rate.Limit
	burst   int
	maxKeys int
	now     func() time.Time

	mu   sync.Mutex
	keys map[string]*bucket
	lru  bucket // sentinel of a circular list: lru.next is the most recently used, lru.prev the least
}

// bucket is one key's limiter and its place in the recency list.
type bucket struct {
	key        string
	lim        *rate.Limiter
	prev, next *bucket
}

// NewKeyed allows perSecond requests per key with bursts of burst, holding at most maxKeys keys;
// nil (everything allowed) when perSecond is not positive.
func NewKeyed(perSecond float64, burst, maxKeys int, now func() time.Time) *Keyed {
	if perSecond <= 0 {
		return nil
	}
	l := &Keyed{limit: rate.Limit(perSecond), burst: burst, maxKeys: max(maxKeys, 1), now: now,
		keys: make(map[string]*bucket, min(maxKeys, 1<<16))}
	l.lru.prev, l.lru.next = &l.lru, &l.lru
	return l
}

// unlink takes b out of the recency list; front puts it at the most recently used end.
func (l *Keyed) unlink(b *bucket) { b.prev.next, b.next.prev = b.next, b.prev }

func (l *Keyed) front(b *bucket) {
	b.prev, b.next = &l.lru, l.lru.next
	l.lru.next.prev = b
	l.lru.next = b
}

// Allow takes a token for key; when none is left it returns false and how long until one is.
// A nil limiter allows everything.
func (l *Keyed) Allow(key string) (bool, time.Duration) {
	if l == nil {
		return true, 0
	}
	now := l.now()
	l.mu.Lock()
	b, ok := l.keys[key]
	switch {
	case ok:
		if l.lru.next != b {
			l.unlink(b)
			l.front(b)
		}
	case len(l.keys) >= l.maxKeys:
		// Reuse the least recently used node for the new key: no allocation but the limiter.
		b = l.lru.prev
		l.unlink(b)
		delete(l.keys, b.key)
		b.key, b.lim = key, rate.NewLimiter(l.limit, l.burst)
		l.keys[key] = b
		l.front(b)
	default:
		b = &bucket{key: key, lim: rate.NewLimiter(l.limit, l.burst)}
		l.keys[key] = b
		l.front(b)
	}
	lim := b.lim
	l.mu.Unlock()
	r := lim.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// Len is how many keys the limiter holds (at most maxKeys).
func (l *Keyed) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}

// TooMany answers a request a limit refused: 429 with Retry-After, the whole seconds until
// the bucket has a token again (rounded up).
func TooMany(w http.ResponseWriter, wait time.Duration) {
	secs := int(wait/time.Second) + 1
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	jsonapi.WriteError(w, http.StatusTooManyRequests, "rate_limited", "too many requests; retry after "+strconv.Itoa(secs)+"s")
}
