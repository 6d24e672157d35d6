// Package retry is the pipeline's one policy for failed persistence attempts, shared by the
// consumer and the reconciler's compensation replay: a few immediate retries, then jittered
// exponential backoff, then give up to compensation. Unreachable MySQL is not contention: it
// is waited out (offsets stay where they are), never compensated.
package retry

import (
	"errors"
	"math/rand/v2"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/store"
)

// Action is what to do after a failed persistence attempt.
type Action int

// The actions, from "try again now" to "this can never succeed".
const (
	Now        Action = iota // contention: try again at once, in a new transaction
	Later                    // contention persists: back off (jittered, bounded), then retry
	Compensate               // retries exhausted: hand the events on (compensation topic / next run)
	DeadLetter               // retrying cannot help (no such stock row or bucket): dead-letter the events
	WaitForDB                // MySQL unreachable: wait and retry for as long as it takes
)

func (a Action) String() string {
	return [...]string{"retry_now", "retry_later", "compensate", "dead_letter", "wait_for_db"}[a]
}

// Policy is the whole retry behaviour in one value.
type Policy struct {
	Immediate int           // retries at once after the first failure
	Backoff   int           // retries after a backoff delay, after the immediate ones
	Base      time.Duration // first backoff delay
	Max       time.Duration // cap of any delay
	Jitter    func(time.Duration) time.Duration
}

// Default is the production policy: 3 immediate retries, 5 with backoff from 10 ms to 1 s.
func Default() Policy {
	return Policy{Immediate: 3, Backoff: 5, Base: 10 * time.Millisecond, Max: time.Second, Jitter: FullJitter}
}

// FullJitter spreads a delay over [d/2, d], so workers that conflicted together do not
// retry together.
func FullJitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// Decide returns the action and delay after the failed-th consecutive failure (1-based).
// A duplicate-key error is contention like a conflict: another writer committed the same
// request id (or user slot) between this transaction's read and its insert, and a fresh
// transaction sees that row and skips or re-slots it, so a retry resolves it.
func (p Policy) Decide(failed int, err error) (Action, time.Duration) {
	switch {
	case errors.Is(err, store.ErrNoStockRow), errors.Is(err, store.ErrNoBucket), errors.Is(err, store.ErrMixedBuckets):
		return DeadLetter, 0
	case store.IsUnavailable(err):
		return WaitForDB, p.Delay(failed)
	case failed <= p.Immediate:
		return Now, 0
	case failed <= p.Immediate+p.Backoff:
		return Later, p.Delay(failed - p.Immediate)
	}
	return Compensate, 0
}

// Delay is Base·2^(n-1), capped at Max, jittered.
func (p Policy) Delay(n int) time.Duration {
	d := p.Base
	for i := 1; i < n && d < p.Max; i++ {
		d *= 2
	}
	d = min(d, p.Max)
	if p.Jitter != nil {
		d = p.Jitter(d)
	}
	return d
}
