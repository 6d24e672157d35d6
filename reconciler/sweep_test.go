package main

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// fakeReturns is the stock_returns table in memory.
type fakeReturns struct {
	rows     []store.StockReturn
	done     map[int64]bool
	doneAtOf map[int64]time.Time // the stamp each return was given (when the map is set)
}

func (f *fakeReturns) pending() []store.StockReturn {
	var out []store.StockReturn
	for _, r := range f.rows {
		if !f.done[r.OrderID] {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].OrderID < out[j].OrderID })
	return out
}

func (f *fakeReturns) PendingRedis(_ context.Context, limit int) ([]store.StockReturn, error) {
	p := f.pending()
	return p[:min(limit, len(p))], nil
}

func (f *fakeReturns) PendingRedisPrizes(context.Context) ([]store.PendingPrize, error) {
	var out []store.PendingPrize
	idx := map[seckill.SessionPrize]int{}
	for _, r := range f.pending() {
		k := seckill.SessionPrize{Session: r.SessionID, Prize: r.PrizeID}
		if i, ok := idx[k]; ok {
			out[i].Pending++
			continue
		}
		idx[k] = len(out)
		out = append(out, store.PendingPrize{SessionID: r.SessionID, PrizeID: r.PrizeID, Pending: 1})
	}
	return out, nil
}

func (f *fakeReturns) PendingRedisOf(_ context.Context, sessionID, prizeID int64, limit int) ([]store.StockReturn, error) {
	var out []store.StockReturn
	for _, r := range f.pending() {
		if r.SessionID == sessionID && r.PrizeID == prizeID && len(out) < limit {
			out = append(out, r)
		}
	}
	return out, nil
}

func (f *fakeReturns) MarkRedisDone(_ context.Context, orderIDs []int64, at time.Time) error {
	for _, id := range orderIDs {
		f.done[id] = true
		if f.doneAtOf != nil {
			f.doneAtOf[id] = at
		}
	}
	return nil
}

// brokenPrizeGate gives units back, except for one prize: its keys are missing, or its
// script fails.
type brokenPrizeGate struct {
	broken  int64
	missing bool
}

func (g brokenPrizeGate) ReturnAll(_ context.Context, items []stock.UnitReturn) (stock.ReturnReport, error) {
	var rep stock.ReturnReport
	var err error
	for _, it := range items {
		switch {
		case it.PrizeID != g.broken:
			rep.Done = append(rep.Done, it.OrderID)
			rep.Returned++
		case g.missing:
			rep.Waiting = append(rep.Waiting, it)
		default:
			err = errors.New("ERR script failed")
		}
	}
	return rep, err
}

// sweepCatalog has no sessions due for a timeout; every session ends in an hour.
type sweepCatalog struct{}

func (sweepCatalog) SessionsOverlapping(context.Context, time.Time, time.Time) ([]seckill.Session, error) {
	return nil, nil
}
func (sweepCatalog) Stocks(context.Context, ...int64) ([]seckill.Stock, error) { return nil, nil }
func (sweepCatalog) Session(_ context.Context, id int64) (seckill.Session, error) {
	return seckill.Session{ID: id, Start: time.Now().Add(-time.Hour), End: time.Now().Add(time.Hour)}, nil
}
func (sweepCatalog) PaymentTimeouts(context.Context, ...int64) (map[int64]time.Duration, error) {
	return map[int64]time.Duration{}, nil
}

// A prize whose returns keep failing (keys missing, a script error) must not hold every
// other prize's returns behind its own oldest rows: the sweep pages per prize.
func TestReturnSweepDoesNotStarveBehindAFailingPrize(t *testing.T) {
	_, db := stacktest.Migrated(t)
	ctx := stacktest.Context(t, time.Minute)
	l := lease.New(db, "t-sweep-"+stacktest.ID(t), time.Minute)
	for _, tc := range []struct {
		name    string
		missing bool
	}{{"keys missing", true}, {"script failing", false}} {
		t.Run(tc.name, func(t *testing.T) {
			// Prize 1's three returns are the oldest; prize 2's one comes after them.
			rets := &fakeReturns{done: map[int64]bool{}}
			for id := int64(1); id <= 4; id++ {
				prize := int64(1)
				if id == 4 {
					prize = 2
				}
				rets.rows = append(rets.rows, store.StockReturn{OrderID: id, RequestID: "r" + string(rune('0'+id)), UserID: "u",
					SessionID: 9, PrizeID: prize, Reason: seckill.ReasonBuyerCancelled, Resale: true})
			}
			j := paymentJob{catalog: sweepCatalog{}, returns: rets, gate: brokenPrizeGate{broken: 1, missing: tc.missing},
				grace: time.Hour, batch: 10, perRun: 10, sweep: 2, metrics: newPaymentMetrics(prometheus.NewRegistry()),
				log: slog.New(slog.DiscardHandler), now: time.Now}
			var res result
			if _, err := l.Do(ctx, func(ctx context.Context, f lease.Fence) error {
				res, _ = j.Run(ctx, f)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if !rets.done[4] || res.Summary["units_returned"] != 1 {
				t.Fatalf("prize 2's return not swept behind prize 1's failing ones: done %v, summary %+v", rets.done, res.Summary)
			}
			if rets.done[1] || rets.done[2] || rets.done[3] {
				t.Fatalf("a failing return was stamped done: %v", rets.done)
			}
		})
	}
}

// slowGate gives every unit back, and its script takes an hour of the run's clock.
type slowGate struct{ clock *time.Time }

func (g slowGate) ReturnAll(_ context.Context, items []stock.UnitReturn) (stock.ReturnReport, error) {
	*g.clock = g.clock.Add(time.Hour)
	var rep stock.ReturnReport
	for _, it := range items {
		rep.Done = append(rep.Done, it.OrderID)
		rep.Returned++
	}
	return rep, nil
}

// A return's redis_done_at says the unit was back in Redis no later than it: the sweep
// stamps it after its Redis step, not with the time its run started (readers of a sold_out
// answer, the chaos rows' history check and the bucket rows' rule, rely on it).
func TestReturnStampedAfterItsRedisStep(t *testing.T) {
	_, db := stacktest.Migrated(t)
	ctx := stacktest.Context(t, time.Minute)
	l := lease.New(db, "t-stamp-"+stacktest.ID(t), time.Minute)
	start := time.Now()
	clock := start
	rets := &fakeReturns{done: map[int64]bool{}, doneAtOf: map[int64]time.Time{},
		rows: []store.StockReturn{{OrderID: 1, RequestID: "r1", UserID: "u", SessionID: 9, PrizeID: 1,
			Reason: seckill.ReasonBuyerCancelled, Resale: true}}}
	j := paymentJob{catalog: sweepCatalog{}, returns: rets, gate: slowGate{clock: &clock},
		grace: time.Hour, batch: 10, perRun: 10, sweep: 2, metrics: newPaymentMetrics(prometheus.NewRegistry()),
		log: slog.New(slog.DiscardHandler), now: func() time.Time { return clock }}
	if _, err := l.Do(ctx, func(ctx context.Context, f lease.Fence) error {
		_, err := j.Run(ctx, f)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if at, ok := rets.doneAtOf[1]; !ok || at.Before(start.Add(time.Hour)) {
		t.Fatalf("return stamped %v (run started %v, its Redis step ended %v)", at, start, start.Add(time.Hour))
	}
}
