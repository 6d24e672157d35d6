// Package lockout throttles failed authentications per client: after Max failures within a
// Window a client is refused without its credential being checked, until that window ends.
// A token guesser then learns nothing more, and its refusals cost one map lookup each.
package lockout

import (
	"sync"
	"time"
)

// Lockout counts failures per key (a client address) in fixed windows that start at a key's
// first failure. Its memory is bounded: at most maxKeys keys; a new key that finds it full
// first drops the keys whose windows ended, then, if none did, the key whose window started
// first. Whoever can fill the table from fresh addresses may so free an older lockout early,
// but could as well have guessed from those addresses: the bound costs no protection a
// per-address limit gives.
type Lockout struct {
	max     int
	window  time.Duration
	maxKeys int
	now     func() time.Time

	mu   sync.Mutex
	keys map[string]*entry
}

type entry struct {
	start    time.Time // the window's first failure
	failures int
}

// New returns a Lockout that refuses a key after max failures within window, remembering at
// most maxKeys keys. A max below 1 returns nil, which never refuses.
func New(max int, window time.Duration, maxKeys int, now func() time.Time) *Lockout {
	if max < 1 {
		return nil
	}
	return &Lockout{max: max, window: window, maxKeys: maxKeys, now: now, keys: map[string]*entry{}}
}

// Blocked reports whether key has used up its failures in the current window, and how long
// until the window ends.
func (l *Lockout) Blocked(key string) (bool, time.Duration) {
	if l == nil {
		return false, 0
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.keys[key]
	if !ok {
		return false, 0
	}
	end := e.start.Add(l.window)
	if !now.Before(end) {
		delete(l.keys, key)
		return false, 0
	}
	return e.failures >= l.max, end.Sub(now)
}

// Fail records a failure of key and reports whether it was the one that used the window up.
func (l *Lockout) Fail(key string) (lockedNow bool) {
	if l == nil {
		return false
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.keys[key]
	if ok && !now.Before(e.start.Add(l.window)) {
		e.start, e.failures = now, 0
	}
	if !ok {
		l.makeRoom(now)
		e = &entry{start: now}
		l.keys[key] = e
	}
	e.failures++
	return e.failures == l.max
}

// makeRoom drops ended windows, then the oldest, when the table is full. The scan is linear,
// but runs only for a failure from a new key while the table is full.
func (l *Lockout) makeRoom(now time.Time) {
	if len(l.keys) < l.maxKeys {
		return
	}
	var oldest string
	var oldestStart time.Time
	for k, e := range l.keys {
		if !now.Before(e.start.Add(l.window)) {
			delete(l.keys, k)
			continue
		}
		if oldest == "" || e.start.Before(oldestStart) {
			oldest, oldestStart = k, e.start
		}
	}
	if len(l.keys) >= l.maxKeys {
		delete(l.keys, oldest)
	}
}

// Len is how many keys the Lockout holds.
func (l *Lockout) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}
