package grab

import (
	"sync"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// soldOutFlags remembers, per session×prize, that Redis said "sold out", so the crowd after
// the last unit is answered from memory. A flag expires after recheck: the next grab asks
// Redis again, so stock raised later (admin, reconciler) is seen within that interval.
// Keys include the session, so a new session never inherits a flag. A nil *soldOutFlags
// flags nothing (an API built without them).
type soldOutFlags struct {
	recheck time.Duration
	mu      sync.Mutex
	until   map[seckill.SessionPrize]time.Time
}

func newSoldOutFlags(recheck time.Duration) *soldOutFlags {
	return &soldOutFlags{recheck: recheck, until: map[seckill.SessionPrize]time.Time{}}
}

func (f *soldOutFlags) Flagged(sessionID, prizeID int64, now time.Time) bool {
	if f == nil {
		return false
	}
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
	if f == nil {
		return
	}
	f.mu.Lock()
	f.until[seckill.SessionPrize{Session: sessionID, Prize: prizeID}] = now.Add(f.recheck)
	f.mu.Unlock()
}

// Clear drops every flag (after an admin change to stock or sessions).
func (f *soldOutFlags) Clear() {
	if f == nil {
		return
	}
	f.mu.Lock()
	clear(f.until)
	f.mu.Unlock()
}
