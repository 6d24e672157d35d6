package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// payCatalog is one session, open for an hour, with a one-minute payment timeout.
type payCatalog struct{ now time.Time }

func (c payCatalog) SessionsOverlapping(context.Context, time.Time, time.Time) ([]seckill.Session, error) {
	return []seckill.Session{{ID: 1, Start: c.now.Add(-time.Hour), End: c.now.Add(time.Hour)}}, nil
}

func (c payCatalog) Stocks(context.Context, ...int64) ([]seckill.Stock, error) {
	return []seckill.Stock{{SessionID: 1, PrizeID: 2}}, nil
}

func (c payCatalog) Session(context.Context, int64) (seckill.Session, error) {
	return seckill.Session{ID: 1, Start: c.now.Add(-time.Hour), End: c.now.Add(time.Hour)}, nil
}

func (c payCatalog) PaymentTimeouts(context.Context, ...int64) (map[int64]time.Duration, error) {
	return map[int64]time.Duration{1: time.Minute}, nil
}

// payOrders holds due orders in id order and records the timeouts applied.
type payOrders struct {
	due         []store.DueOrder
	unpublished int64
	applied     []string
}

func (o *payOrders) DueUnpaid(_ context.Context, _, _ int64, _ time.Time, after int64, limit int) ([]store.DueOrder, error) {
	var out []store.DueOrder
	for _, d := range o.due {
		if d.ID > after && len(out) < limit {
			out = append(out, d)
		}
	}
	return out, nil
}

func (o *payOrders) CountUnpublishedUnpaid(context.Context, int64, int64, time.Time) (int64, error) {
	return o.unpublished, nil
}

func (o *payOrders) ApplyFeedback(_ context.Context, _ *lease.Fence, _, _ int64, items []seckill.Feedback, _ time.Time) (store.FeedbackBatch, error) {
	for _, it := range items {
		if it.Reason != seckill.ReasonPaymentTimeout || it.DueBefore.IsZero() {
			return store.FeedbackBatch{}, fmt.Errorf("not a payment timeout: %+v", it)
		}
		o.applied = append(o.applied, it.RequestID)
	}
	return store.FeedbackBatch{Cancelled: len(items)}, nil
}

type noReturns struct{}

func (noReturns) PendingRedis(context.Context, int) ([]store.StockReturn, error)   { return nil, nil }
func (noReturns) PendingRedisPrizes(context.Context) ([]store.PendingPrize, error) { return nil, nil }
func (noReturns) PendingRedisOf(context.Context, int64, int64, int) ([]store.StockReturn, error) {
	return nil, nil
}
func (noReturns) MarkRedisDone(context.Context, []int64, time.Time) error { return nil }
func (noReturns) ReturnAll(context.Context, []stock.UnitReturn) (stock.ReturnReport, error) {
	return stock.ReturnReport{}, nil
}

// payLag is the feedback group's lag per partition; it counts its readings.
type payLag struct {
	lag   map[int]int64
	err   error
	reads int
}

func (l *payLag) Lag(context.Context, string, event.Topic) (map[int]int64, error) {
	l.reads++
	return l.lag, l.err
}

// Which due orders a run times out and which it defers: only those whose feedback
// partition has unread messages wait; paging goes past them; the budget counts
// cancellations; the lag is read only when something is due.
func TestPaymentTimeoutsDeferWhereFeedbackIsUnread(t *testing.T) {
	const partitions = 6
	var due []store.DueOrder
	for i := range 9 {
		due = append(due, store.DueOrder{ID: int64(10 + i), RequestID: fmt.Sprintf("1-2-key-%04d", i)})
	}
	partOf := func(d store.DueOrder) int { return event.PartitionOf([]byte(d.RequestID), partitions) }
	behind := partOf(due[0]) // the partition of the first order has unread reports
	var onBehind int64
	for _, d := range due {
		if partOf(d) == behind {
			onBehind++
		}
	}
	if onBehind == int64(len(due)) {
		t.Fatal("every order on one partition: the case tests nothing")
	}
	for _, tc := range []struct {
		name          string
		due           []store.DueOrder
		unpublished   int64
		lag           map[int]int64
		lagErr        error
		perRun        int
		wantCancelled int64
		wantFeedback  int64 // deferred, feedback behind
		wantRelay     int64 // deferred, relay behind
		wantReads     int
		wantCapped    int64
		wantErr       bool
	}{
		{name: "feedback read: every due order timed out", due: due, lag: map[int]int64{}, perRun: 100,
			wantCancelled: 9, wantReads: 1},
		{name: "one partition behind: its orders wait, the rest time out across pages", due: due,
			lag: map[int]int64{behind: 1}, perRun: 100, wantCancelled: 9 - onBehind, wantFeedback: onBehind, wantReads: 1},
		{name: "every partition behind: nothing times out", due: due,
			lag: map[int]int64{0: 1, 1: 1, 2: 1, 3: 1, 4: 1, 5: 1}, perRun: 100, wantFeedback: 9, wantReads: 1},
		{name: "the budget counts cancellations", due: due, lag: map[int]int64{}, perRun: 4,
			wantCancelled: 4, wantReads: 1, wantCapped: 1},
		{name: "nothing due, some unpublished: the lag is not read", unpublished: 3, lag: map[int]int64{1: 5}, perRun: 100,
			wantRelay: 3},
		{name: "lag unreadable: nothing times out", due: due, lagErr: errors.New("broker down"), perRun: 100,
			wantReads: 1, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Now()
			orders := &payOrders{due: tc.due, unpublished: tc.unpublished}
			lag := &payLag{lag: tc.lag, err: tc.lagErr}
			reg := prometheus.NewRegistry()
			j := paymentJob{catalog: payCatalog{now: now}, orders: orders, returns: noReturns{}, gate: noReturns{},
				grace: time.Hour, batch: 2, perRun: tc.perRun, sweep: 10, metrics: newPaymentMetrics(reg),
				log: slog.New(slog.DiscardHandler), now: func() time.Time { return now },
				feedback: grabLag{reader: lag, group: "feedback", topic: event.Topic{Name: "fb", Partitions: partitions}}}
			res, err := j.Run(context.Background(), lease.Fence{Name: "t", Number: 1})
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want error: %v", err, tc.wantErr)
			}
			s := res.Summary
			if s["cancelled"] != tc.wantCancelled || int64(len(orders.applied)) != tc.wantCancelled ||
				s["deferred_feedback_behind"] != tc.wantFeedback || s["deferred_relay_behind"] != tc.wantRelay ||
				s["capped"] != tc.wantCapped || lag.reads != tc.wantReads {
				t.Fatalf("summary %v, %d applied, %d lag readings", s, len(orders.applied), lag.reads)
			}
			for _, rid := range orders.applied {
				if event.PartitionOf([]byte(rid), partitions) == behind && tc.lag[behind] > 0 {
					t.Fatalf("%s timed out with its feedback partition unread", rid)
				}
			}
			if got := testutil.ToFloat64(j.metrics.deferred.WithLabelValues(deferFeedbackBehind)); int64(got) != tc.wantFeedback {
				t.Fatalf("deferred metric (feedback_behind) %v, want %d", got, tc.wantFeedback)
			}
			if got := testutil.ToFloat64(j.metrics.deferred.WithLabelValues(deferRelayBehind)); int64(got) != tc.wantRelay {
				t.Fatalf("deferred metric (relay_behind) %v, want %d", got, tc.wantRelay)
			}
		})
	}
}
