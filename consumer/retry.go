package main

import (
	"errors"
	"math/rand/v2"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/store"
)

// action is what to do after a failed persistence attempt.
type action int

const (
	retryNow   action = iota // contention: try again at once, in a new transaction
	retryLater               // contention persists: back off (jittered, bounded), then retry
	compensate               // retries exhausted: publish to the compensation topic, then commit
	deadLetter               // retrying cannot help (no such stock row): dead-letter the events
	waitForDB                // MySQL unreachable: wait and retry for as long as it takes, never commit
)

func (a action) String() string {
	return [...]string{"retry_now", "retry_later", "compensate", "dead_letter", "wait_for_db"}[a]
}

// retryPolicy is the consumer's whole retry behaviour in one place: a few immediate
// retries, then jittered exponential backoff, then compensation. Unreachable MySQL is not
// contention: it is waited out (offsets stay uncommitted), never compensated.
type retryPolicy struct {
	Immediate int           // retries at once after the first failure
	Backoff   int           // retries after a backoff delay, after the immediate ones
	Base      time.Duration // first backoff delay
	Max       time.Duration // cap of any delay
	jitter    func(time.Duration) time.Duration
}

func defaultPolicy() retryPolicy {
	return retryPolicy{Immediate: 3, Backoff: 5, Base: 10 * time.Millisecond, Max: time.Second, jitter: fullJitter}
}

// fullJitter spreads a delay over [d/2, d], so workers that conflicted together do not
// retry together.
func fullJitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// decide returns the action and delay after the failed-th consecutive failure (1-based).
func (p retryPolicy) decide(failed int, err error) (action, time.Duration) {
	switch {
	case errors.Is(err, store.ErrNoStockRow):
		return deadLetter, 0
	case store.IsUnavailable(err):
		return waitForDB, p.delay(failed)
	case failed <= p.Immediate:
		return retryNow, 0
	case failed <= p.Immediate+p.Backoff:
		return retryLater, p.delay(failed - p.Immediate)
	}
	return compensate, 0
}

// delay is Base·2^(n-1), capped at Max, jittered.
func (p retryPolicy) delay(n int) time.Duration {
	d := p.Base
	for i := 1; i < n && d < p.Max; i++ {
		d *= 2
	}
	d = min(d, p.Max)
	if p.jitter != nil {
		d = p.jitter(d)
	}
	return d
}
