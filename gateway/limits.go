package main

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// keyedLimiter is a token bucket per key (user or IP) with bounded memory: buckets live in
// two generations; the older one is dropped every rotate interval, or as soon as the
// current one holds maxKeys. A key idle for a whole generation starts with a full bucket
// again, which only ever errs on the side of the client.
type keyedLimiter struct {
	limit   rate.Limit
	burst   int
	maxKeys int
	rotate  time.Duration
	now     func() time.Time

	mu         sync.Mutex
	cur, prev  map[string]*rate.Limiter
	lastRotate time.Time
}

func newKeyedLimiter(perSecond float64, burst, maxKeys int, now func() time.Time) *keyedLimiter {
	if perSecond <= 0 {
		return nil
	}
	return &keyedLimiter{limit: rate.Limit(perSecond), burst: burst, maxKeys: maxKeys, rotate: time.Minute,
		now: now, cur: map[string]*rate.Limiter{}, prev: map[string]*rate.Limiter{}, lastRotate: now()}
}

// Allow takes a token for key; when none is left it returns false and how long until one is.
// A nil limiter allows everything.
func (l *keyedLimiter) Allow(key string) (bool, time.Duration) {
	if l == nil {
		return true, 0
	}
	now := l.now()
	l.mu.Lock()
	if now.Sub(l.lastRotate) >= l.rotate || len(l.cur) >= l.maxKeys {
		l.prev, l.cur, l.lastRotate = l.cur, make(map[string]*rate.Limiter, len(l.cur)), now
	}
	lim, ok := l.cur[key]
	if !ok {
		if lim, ok = l.prev[key]; !ok {
			lim = rate.NewLimiter(l.limit, l.burst)
		}
		l.cur[key] = lim
	}
	l.mu.Unlock()
	r := lim.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// soldOutFlags remembers, per session×prize, that Redis said "sold out", so the crowd after
// the last unit is answered from memory. A flag expires after recheck: the next grab asks
// Redis again, so stock raised later (admin, reconciler) is seen within that interval.
// Keys include the session, so a new session never inherits a flag.
type soldOutFlags struct {
	recheck time.Duration
	mu      sync.Mutex
	until   map[[2]int64]time.Time
}

func newSoldOutFlags(recheck time.Duration) *soldOutFlags {
	return &soldOutFlags{recheck: recheck, until: map[[2]int64]time.Time{}}
}

func (f *soldOutFlags) Flagged(sessionID, prizeID int64, now time.Time) bool {
	k := [2]int64{sessionID, prizeID}
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
	f.until[[2]int64{sessionID, prizeID}] = now.Add(f.recheck)
	f.mu.Unlock()
}

// Clear drops every flag (after an admin change to stock or sessions).
func (f *soldOutFlags) Clear() {
	f.mu.Lock()
	clear(f.until)
	f.mu.Unlock()
}
