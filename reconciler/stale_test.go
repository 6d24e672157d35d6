package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
)

// The stale job's thresholds, in synctest bubbles: reservations are admitted at the bubble's
// time.Now and age by sleeping on it, so "older than SECKILL_STALE_AFTER" takes no wall time
// and the thresholds can be probed at their exact instant.

// A reservation is stale from SECKILL_STALE_AFTER after its admission on (inclusive); while
// its partition is busy it is left to the consumer until SECKILL_REPUBLISH_BOUND (inclusive);
// it is handed to a person from SECKILL_STALE_CASE_AFTER on (inclusive). Younger ones, in the
// same bucket, are left alone.
func TestStaleThresholds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const stale, bound, caseAfter = 300 * time.Millisecond, 1500 * time.Millisecond, 5 * time.Second
		j := staleJob{stale: stale, bound: bound, caseAfter: caseAfter}
		admitted := time.Now() // the gate keeps admission times in milliseconds: the bubble starts on a whole second
		first := stock.Reservation{RequestID: "1-2-first", UserID: "u1", AdmittedAt: admitted}
		time.Sleep(100 * time.Millisecond)
		second := stock.Reservation{RequestID: "1-2-second", UserID: "u2", AdmittedAt: time.Now()}
		reserved := []stock.Reservation{first, second}
		ids := func(rs []stock.Reservation) []string {
			var out []string
			for _, r := range rs {
				out = append(out, r.RequestID)
			}
			return out
		}
		for _, step := range []struct {
			name         string
			at           time.Duration // since the first admission
			idle         []string      // old, the partition idle
			busy         []string      // old, the partition busy
			busyInFlight int64
		}{
			{"1 ns before stale", stale - time.Nanosecond, nil, nil, 0},
			{"at stale: the first is stale, the second younger", stale, []string{"1-2-first"}, nil, 1},
			{"both stale", stale + 100*time.Millisecond, []string{"1-2-first", "1-2-second"}, nil, 2},
			{"1 ns before the bound", bound - time.Nanosecond, []string{"1-2-first", "1-2-second"}, nil, 2},
			{"at the bound: the first is taken while busy", bound, []string{"1-2-first", "1-2-second"}, []string{"1-2-first"}, 1},
			{"both past the bound", bound + 100*time.Millisecond, []string{"1-2-first", "1-2-second"}, []string{"1-2-first", "1-2-second"}, 0},
		} {
			time.Sleep(time.Until(admitted.Add(step.at)))
			now := time.Now()
			if old, inFlight := j.oldOf(reserved, now, false); !slices.Equal(ids(old), step.idle) || inFlight != 0 {
				t.Fatalf("%s, partition idle: old %v, %d in flight; want %v, 0", step.name, ids(old), inFlight, step.idle)
			}
			if old, inFlight := j.oldOf(reserved, now, true); !slices.Equal(ids(old), step.busy) || inFlight != step.busyInFlight {
				t.Fatalf("%s, partition busy: old %v, %d in flight; want %v, %d", step.name, ids(old), inFlight, step.busy, step.busyInFlight)
			}
		}

		for _, step := range []struct {
			name string
			at   time.Duration
			want []string
		}{
			{"1 ns before the case threshold", caseAfter - time.Nanosecond, nil},
			{"at the case threshold", caseAfter, []string{"1-2-first"}},
			{"both past it", caseAfter + 100*time.Millisecond, []string{"1-2-first", "1-2-second"}},
		} {
			time.Sleep(time.Until(admitted.Add(step.at)))
			var got []string
			for _, c := range j.staleCases(1, 2, reserved, time.Now()) {
				got = append(got, c.RequestID)
			}
			if !slices.Equal(got, step.want) {
				t.Fatalf("%s: cases for %v, want %v", step.name, got, step.want)
			}
		}
	})
}

// staleGate is one bucket of reservations in Redis, settled as the gate's script would.
type staleGate struct {
	mu       sync.Mutex
	reserved []stock.Reservation
	settled  []string
}

func (g *staleGate) ReservationsBucket(context.Context, int64, int64, int, int) ([]stock.Reservation, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.reserved), nil
}

func (g *staleGate) Settle(_ context.Context, batches []stock.SettleBatch) (int64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var n int64
	for _, b := range batches {
		for _, it := range b.Items {
			g.settled = append(g.settled, it.RequestID)
			g.reserved = slices.DeleteFunc(g.reserved, func(r stock.Reservation) bool { return r.RequestID == it.RequestID })
			n++
		}
	}
	return n, nil
}

func (g *staleGate) PrizeSnapshots(context.Context, []seckill.Stock) ([]stock.Snapshot, error) {
	return nil, nil
}

// openSession is one session×prize open around the bubble's start, without stock buckets.
type openSession struct{ start time.Time }

func (c openSession) SessionsOverlapping(context.Context, time.Time, time.Time) ([]seckill.Session, error) {
	return []seckill.Session{{ID: 1, Start: c.start.Add(-time.Hour), End: c.start.Add(time.Hour)}}, nil
}

func (c openSession) Stocks(_ context.Context, ids ...int64) ([]seckill.Stock, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	return []seckill.Stock{{SessionID: 1, PrizeID: 2}}, nil
}

// everyOrderExists is MySQL holding an order for every request id: the consumer stored them
// and lost Redis before settling (the stale job's settle path, which needs no fence check).
type everyOrderExists struct{}

func (everyOrderExists) Existing(_ context.Context, rids []string) (map[string]seckill.Order, error) {
	out := map[string]seckill.Order{}
	for i, rid := range rids {
		out[rid] = seckill.Order{ID: int64(i + 1), RequestID: rid, SessionID: 1, PrizeID: 2, Status: seckill.OrderSucceeded}
	}
	return out, nil
}

// A run of the stale job on its own clock: a reservation younger than SECKILL_STALE_AFTER is
// left to the consumer, and the run at the instant it is that old settles it.
func TestStaleJobSettlesAReservationOnceItIsStale(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const stale = 300 * time.Millisecond
		start := time.Now()
		gate := &staleGate{}
		for i := range 2 {
			gate.reserved = append(gate.reserved, stock.Reservation{RequestID: fmt.Sprintf("1-2-key-%d", i), UserID: fmt.Sprintf("u%d", i),
				AdmittedAt: start.Add(time.Duration(i) * 100 * time.Millisecond)})
		}
		reg := prometheus.NewRegistry()
		republished, settled := newStaleMetrics(reg)
		j := staleJob{catalog: openSession{start: start}, gate: gate, orders: everyOrderExists{},
			lag:   grabLag{reader: &payLag{lag: map[int]int64{}}, group: "consumers", topic: event.Topic{Name: "grab", Partitions: 4}},
			stale: stale, bound: time.Minute, grace: time.Hour, caseAfter: 5 * time.Minute,
			republished: republished, settled: settled, log: slog.New(slog.DiscardHandler), now: time.Now}
		for _, step := range []struct {
			at          time.Duration
			wantSettled []string
		}{
			{stale - time.Millisecond, nil},
			{stale, []string{"1-2-key-0"}},
			{stale + 100*time.Millisecond - time.Millisecond, []string{"1-2-key-0"}},
			{stale + 100*time.Millisecond, []string{"1-2-key-0", "1-2-key-1"}},
		} {
			time.Sleep(time.Until(start.Add(step.at)))
			if _, err := j.Run(context.Background(), lease.Fence{Name: "t", Number: 1}); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(gate.settled, step.wantSettled) {
				t.Fatalf("at %v: settled %v, want %v", step.at, gate.settled, step.wantSettled)
			}
		}
	})
}
