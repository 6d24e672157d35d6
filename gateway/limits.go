package main

import (
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// keyedLimiter is a token bucket per key (user or IP bucket) with bounded memory: at most
// maxKeys buckets, and when a new key needs room the least recently used one goes. A key
// that was evicted starts with a full bucket again, which only errs on the side of the
// client; a client in active use is never the one evicted, so nobody can reset another
// client's bucket by flooding the table with fresh keys (which dropping the whole table
// when full allowed). A hit costs a map lookup and relinking two list nodes under the lock
// (BenchmarkKeyedLimiter).
type keyedLimiter struct {
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

func newKeyedLimiter(perSecond float64, burst, maxKeys int, now func() time.Time) *keyedLimiter {
	if perSecond <= 0 {
		return nil
	}
	l := &keyedLimiter{limit: rate.Limit(perSecond), burst: burst, maxKeys: max(maxKeys, 1), now: now,
		keys: make(map[string]*bucket, min(maxKeys, 1<<16))}
	l.lru.prev, l.lru.next = &l.lru, &l.lru
	return l
}

// unlink takes b out of the recency list; front puts it at the most recently used end.
func (l *keyedLimiter) unlink(b *bucket) { b.prev.next, b.next.prev = b.next, b.prev }

func (l *keyedLimiter) front(b *bucket) {
	b.prev, b.next = &l.lru, l.lru.next
	l.lru.next.prev = b
	l.lru.next = b
}

// Allow takes a token for key; when none is left it returns false and how long until one is.
// A nil limiter allows everything.
func (l *keyedLimiter) Allow(key string) (bool, time.Duration) {
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
func (l *keyedLimiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}

// soldOutFlags remembers, per session×prize, that Redis said "sold out", so the crowd after
// the last unit is answered from memory. A flag expires after recheck: the next grab asks
// Redis again, so stock raised later (admin, reconciler) is seen within that interval.
// Keys include the session, so a new session never inherits a flag.
type soldOutFlags struct {
	recheck time.Duration
	mu      sync.Mutex
	until   map[seckill.SessionPrize]time.Time
}

func newSoldOutFlags(recheck time.Duration) *soldOutFlags {
	return &soldOutFlags{recheck: recheck, until: map[seckill.SessionPrize]time.Time{}}
}

func (f *soldOutFlags) Flagged(sessionID, prizeID int64, now time.Time) bool {
	k := seckill.SessionPrize{Session: sessionID, Prize: prizeID}
	f.mu.Lock()
	defer f.mu.Unlock()
	u, ok := f.until[k]
	if ok && !now.Before(u) {
		delete(f.until, k)
		return false
	}
	return ok
}

func (f *soldOutFlags) Set(sessionID, prizeID int64, now time.Time) {
	f.mu.Lock()
	f.until[seckill.SessionPrize{Session: sessionID, Prize: prizeID}] = now.Add(f.recheck)
	f.mu.Unlock()
}

// Clear drops every flag (after an admin change to stock or sessions).
func (f *soldOutFlags) Clear() {
	f.mu.Lock()
	clear(f.until)
	f.mu.Unlock()
}
