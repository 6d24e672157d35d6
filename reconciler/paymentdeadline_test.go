package main

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// The payment timeout's deadline, in a synctest bubble: the job's clock is the bubble's
// time.Now, so a run can be made at the deadline's exact nanosecond. The decision is split
// between Go and MySQL: the job computes the cut-off from its clock (paymentCutoff), and
// store.Orders.DueUnpaid keeps the orders published before it (event_published_at < ?, as
// decideFeedback's DueBefore does in the cancelling transaction, pkg/store's
// TestDecideFeedback). The fake below keeps that condition; what is tested is the Go side.

// deadlineCatalog is one session×prize, started at start, with one payment timeout.
type deadlineCatalog struct {
	start   time.Time
	timeout time.Duration
	stocks  *[]int64 // the sessions Stocks was asked for
}

func (c deadlineCatalog) session() seckill.Session {
	return seckill.Session{ID: 1, Start: c.start, End: c.start.Add(24 * time.Hour)}
}

func (c deadlineCatalog) SessionsOverlapping(context.Context, time.Time, time.Time) ([]seckill.Session, error) {
	return []seckill.Session{c.session()}, nil
}

func (c deadlineCatalog) Session(context.Context, int64) (seckill.Session, error) {
	return c.session(), nil
}

func (c deadlineCatalog) PaymentTimeouts(context.Context, ...int64) (map[int64]time.Duration, error) {
	return map[int64]time.Duration{1: c.timeout}, nil
}

func (c deadlineCatalog) Stocks(_ context.Context, ids ...int64) ([]seckill.Stock, error) {
	*c.stocks = append(*c.stocks, ids...)
	var out []seckill.Stock
	for range ids {
		out = append(out, seckill.Stock{SessionID: 1, PrizeID: 2})
	}
	return out, nil
}

// deadlineOrders is one succeeded unpaid order whose order.created was published at
// published. DueUnpaid keeps MySQL's condition, event_published_at < cutoff.
type deadlineOrders struct {
	published time.Time
	cutoffs   []time.Time
	applied   []seckill.Feedback
}

func (o *deadlineOrders) DueUnpaid(_ context.Context, _, _ int64, cutoff time.Time, after int64, _ int) ([]store.DueOrder, error) {
	o.cutoffs = append(o.cutoffs, cutoff)
	if after == 0 && len(o.applied) == 0 && o.published.Before(cutoff) {
		return []store.DueOrder{{ID: 1, RequestID: "1-2-key-0001"}}, nil
	}
	return nil, nil
}

func (o *deadlineOrders) CountUnpublishedUnpaid(context.Context, int64, int64, time.Time) (int64, error) {
	return 0, nil
}

func (o *deadlineOrders) ApplyFeedback(_ context.Context, _ *lease.Fence, _, _ int64, items []seckill.Feedback, _ time.Time) (store.FeedbackBatch, error) {
	o.applied = append(o.applied, items...)
	return store.FeedbackBatch{Cancelled: len(items)}, nil
}

func deadlineJob(c deadlineCatalog, o *deadlineOrders) paymentJob {
	return paymentJob{catalog: c, orders: o, returns: noReturns{}, gate: noReturns{}, grace: time.Hour,
		batch: 10, perRun: 100, sweep: 10, metrics: newPaymentMetrics(prometheus.NewRegistry()),
		log: slog.New(slog.DiscardHandler), now: time.Now,
		feedback: grabLag{reader: &payLag{lag: map[int]int64{}}, group: "feedback", topic: event.Topic{Name: "fb", Partitions: 1}}}
}

// An order published at P with a timeout T has its deadline at P+T. A run 1 ns before the
// deadline, at it, and 1 ns after does not time it out: the deadline's instant is the
// buyer's (an order paid exactly at its deadline is not cancelled by a run at that instant),
// and the cut-off is cut to MySQL's microseconds, downwards. A run 1 µs after does, with the
// cut-off as the cancellation's DueBefore.
func TestPaymentTimeoutAtTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 15 * time.Minute
		published := time.Now() // the bubble's clock starts on a whole second, as MySQL's DATETIME(6) can hold it
		orders := &deadlineOrders{published: published}
		var stocks []int64
		j := deadlineJob(deadlineCatalog{start: published.Add(-time.Hour), timeout: timeout, stocks: &stocks}, orders)
		deadline := published.Add(timeout)
		for _, step := range []struct {
			name       string
			at         time.Time
			wantCutoff time.Time
			wantDue    bool
		}{
			{"1 ns before the deadline", deadline.Add(-time.Nanosecond), published.Add(-time.Microsecond), false},
			{"at the deadline", deadline, published, false},
			{"1 ns after the deadline", deadline.Add(time.Nanosecond), published, false},
			{"1 µs after the deadline", deadline.Add(time.Microsecond), published.Add(time.Microsecond), true},
		} {
			time.Sleep(time.Until(step.at))
			if now := time.Now(); !now.Equal(step.at) {
				t.Fatalf("%s: the bubble's clock reads %v, want %v", step.name, now, step.at)
			}
			before := len(orders.applied)
			res, err := j.Run(context.Background(), lease.Fence{Name: "t", Number: 1})
			if err != nil {
				t.Fatalf("%s: %v", step.name, err)
			}
			if got := orders.cutoffs[len(orders.cutoffs)-1]; !got.Equal(step.wantCutoff) {
				t.Fatalf("%s: cut-off %v, want %v", step.name, got, step.wantCutoff)
			}
			timedOut := len(orders.applied) > before
			if timedOut != step.wantDue || res.Summary["cancelled"] != map[bool]int64{true: 1}[step.wantDue] {
				t.Fatalf("%s: timed out %v (summary %v), want %v", step.name, timedOut, res.Summary, step.wantDue)
			}
			if timedOut {
				f := orders.applied[len(orders.applied)-1]
				if !f.DueBefore.Equal(step.wantCutoff) || !f.At.Equal(step.at) || f.Reason != seckill.ReasonPaymentTimeout {
					t.Fatalf("%s: cancellation %+v, want DueBefore %v, At %v", step.name, f, step.wantCutoff, step.at)
				}
			}
		}
	})
}

// A session's orders are looked for only once it has been open for one timeout (none can be
// due before): from start+T on, inclusive, never earlier; never without a timeout.
func TestPaymentTimeoutLooksAtASessionOnceOpenForOneTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 2 * time.Minute
		start := time.Now()
		s := seckill.Session{ID: 1, Start: start, End: start.Add(time.Hour)}
		for _, step := range []struct {
			name    string
			at      time.Time
			timeout time.Duration
			want    bool
		}{
			{"1 ns before start+T", start.Add(timeout - time.Nanosecond), timeout, false},
			{"at start+T", start.Add(timeout), timeout, true},
			{"later", start.Add(timeout + time.Second), timeout, true},
			{"no payment timeout", start.Add(timeout + time.Second), 0, false},
		} {
			time.Sleep(time.Until(step.at))
			if got := sessionMayHaveDue(s, step.timeout, time.Now()); got != step.want {
				t.Fatalf("%s: %v, want %v", step.name, got, step.want)
			}
		}

		// The same through a run: Stocks is asked for the session only from start+T on.
		var stocks []int64
		orders := &deadlineOrders{published: start}
		c := deadlineCatalog{start: time.Now().Add(-timeout).Add(time.Nanosecond), timeout: timeout, stocks: &stocks}
		if _, err := deadlineJob(c, orders).Run(context.Background(), lease.Fence{Name: "t", Number: 1}); err != nil {
			t.Fatal(err)
		}
		if len(stocks) != 0 || len(orders.cutoffs) != 0 {
			t.Fatalf("a session open for 1 ns less than its timeout was looked at: stocks of %v, %d cut-offs", stocks, len(orders.cutoffs))
		}
		time.Sleep(time.Nanosecond)
		if _, err := deadlineJob(c, orders).Run(context.Background(), lease.Fence{Name: "t", Number: 1}); err != nil {
			t.Fatal(err)
		}
		if len(stocks) != 1 || len(orders.cutoffs) != 1 {
			t.Fatalf("a session open for its timeout: stocks of %v, %d cut-offs; want it looked at", stocks, len(orders.cutoffs))
		}
	})
}
