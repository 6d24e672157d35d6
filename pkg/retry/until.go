package retry

import (
	"context"
	"errors"
	"time"
)

// Until is the retry of a write that must happen before a batch's offsets may be committed
// (a produce to Kafka, an exception case in MySQL): it is not a decision table like Policy,
// since giving up would lose the write, so it runs attempt until attempt returns nil or ctx
// ends. Each attempt gets its own timeout, detached from ctx: an attempt cut short by
// shutdown would be ambiguous (a produce may land anyway), so it is allowed to finish and
// only the wait between attempts ends with ctx. failed, when not nil, is told each failed
// attempt's error (the caller logs it). On ctx's end the error wraps both ctx's error and
// the last attempt's.
func Until(ctx context.Context, attempt func(context.Context) error, failed func(error)) error {
	return persistent{timeout: 10 * time.Second, base: 100 * time.Millisecond, max: 5 * time.Second}.until(ctx, attempt, failed)
}

// persistent is Until's timing: attempt timeout, first pause and its cap (doubling).
type persistent struct {
	timeout, base, max time.Duration
}

func (p persistent) until(ctx context.Context, attempt func(context.Context) error, failed func(error)) error {
	pause := p.base
	for {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.timeout)
		err := attempt(actx)
		cancel()
		if err == nil {
			return nil
		}
		if failed != nil {
			failed(err)
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(pause):
		}
		pause = min(2*pause, p.max)
	}
}
