package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// adjusted asserts the stock after an adjustment of the sale (one grab pending in bucket
// 0) that every transfer finished: MySQL's lefts and Redis's per bucket, the prize's total,
// nothing in flight.
func (st saleState) adjusted(t *testing.T, when string, total int, mysql, redis []int) {
	t.Helper()
	if st.mysqlTotal != total || !slices.Equal(st.mysql, mysql) || !slices.Equal(st.redis, redis) || st.inFlight != 0 {
		t.Fatalf("%s: MySQL total %d, lefts %v, Redis %v, in flight %d; want %d, %v, %v, 0", when, st.mysqlTotal, st.mysql, st.redis, st.inFlight,
			total, mysql, redis)
	}
}

// partial asserts what holds at every instant of an adjustment: each bucket's Redis left
// is at most its row's, and nothing counts as in flight between buckets (a gateway would
// answer 503 rebalancing instead of sold_out while it did).
func (st saleState) partial(t *testing.T, when string) {
	t.Helper()
	for b := range st.mysql {
		if st.redis[b] > st.mysql[b] {
			t.Errorf("%s: bucket %d: Redis left %d > MySQL left %d", when, b, st.redis[b], st.mysql[b])
		}
	}
	if st.inFlight != 0 {
		t.Errorf("%s: %d units in flight", when, st.inFlight)
	}
}

// A stock adjustment of a prize with buckets, planned as the admin API plans it, run by a
// reconciler that dies after each step in turn (or before the first: the plan alone); the
// next lease holder resumes the journal. At the crash each bucket's Redis stock is at most
// its row's; after the resumption both sides hold exactly the adjusted stock, and resuming
// again changes nothing. The raise (10 -> 14) puts one unit in each bucket; the cut (10 ->
// 6) takes two from buckets 0 and 1, where Redis's bucket 0 has only 2 left (1 pending).
func TestAdjustmentResumesAfterEveryStep(t *testing.T) { onBothRedis(t, adjustmentResumes) }

func adjustmentResumes(t *testing.T, rdb redis.UniversalClient) {
	for _, c := range []struct {
		name         string
		total        int
		steps        []transferStep
		mysql, redis []int
	}{
		{"raise", 14, []transferStep{0, stepMoved, stepGiven}, []int{4, 4, 3, 3}, []int{3, 4, 3, 3}},
		{"cut", 6, []transferStep{0, stepTaken, stepMoved}, []int{1, 1, 2, 2}, []int{0, 1, 2, 2}},
	} {
		for _, crash := range c.steps {
			t.Run(fmt.Sprintf("%s crash after step %d", c.name, crash), func(t *testing.T) {
				s := newBucketSale(t, rdb)
				ctx := stacktest.Context(t, 30*time.Second)
				adj, err := s.cat.PlanBucketAdjustment(ctx, s.sid, s.pid, c.total, "ann", "", "test")
				if err != nil {
					t.Fatal(err)
				}
				if crash != 0 {
					var seen []transferStep
					dying := s.executor(func(_ store.Transfer, step transferStep) error {
						seen = append(seen, step)
						if step == crash {
							return errCrash
						}
						return nil
					})
					if _, err := dying.resume(ctx, s.acquire(t)); !errors.Is(err, errCrash) {
						t.Fatalf("resume: %v, want the simulated crash", err)
					}
					// Every transfer stops there: resume goes on past a failed one.
					if n := len(slices.DeleteFunc(slices.Clone(seen), func(s transferStep) bool { return s != crash })); n != len(adj.Transfers) {
						t.Fatalf("steps %v: %d stops after step %d, want %d", seen, n, crash, len(adj.Transfers))
					}
				}
				s.state(t).partial(t, "at the crash")

				second := s.acquire(t)
				n, err := s.executor(nil).resume(ctx, second)
				if err != nil || n != len(adj.Transfers) {
					t.Fatalf("resume: %d transfers of %d, %v", n, len(adj.Transfers), err)
				}
				s.state(t).adjusted(t, "after resuming", c.total, c.mysql, c.redis)
				all, err := s.cat.Transfers(ctx, s.sid, s.pid)
				if err != nil {
					t.Fatal(err)
				}
				for _, tr := range all {
					if tr.State != store.TransferDone {
						t.Fatalf("journal: %+v", all)
					}
				}
				if n, err := s.executor(nil).resume(ctx, second); err != nil || n != 0 {
					t.Fatalf("resuming again: %d %v", n, err)
				}
				s.state(t).adjusted(t, "after resuming again", c.total, c.mysql, c.redis)
				// Drift finds the buckets and their sent and received where the journal says.
				job := driftJob{catalog: s.cat, gate: s.gate, returns: store.NewReturns(s.db), orders: store.NewOrders(s.db),
					lag: grabLag{reader: caughtUp{}, group: "g", topic: event.Topic{Name: "t", Partitions: 4}}, grace: time.Hour,
					cases: store.NewExceptions(s.db), caseRuns: 3, metrics: newDriftMetrics(prometheus.NewRegistry()),
					log: slog.New(slog.NewTextHandler(io.Discard, nil)), now: time.Now}
				if res, err := job.Run(ctx, second); err != nil || res.Summary["checked"] != saleBuckets || res.Summary["corrected"] != 0 || res.Summary["ledger_mismatch"] != 0 {
					t.Fatalf("drift after the adjustment: %+v %v, want every bucket checked and nothing to correct", res.Summary, err)
				}
				// A preheat or rebuild from the rows and the journal's ledger agrees.
				for b := range saleBuckets {
					s.lose(t, b)
					s.load(t, b)
				}
				want := slices.Clone(c.mysql)
				s.state(t).adjusted(t, "reloaded from the rows", c.total, c.mysql, want)
			})
		}
	}
}

// A cut from a bucket that is not loaded in Redis before its session opens (not yet
// preheated) is never cancelled, unlike a transfer between buckets: the row alone gives the
// units up, and the take step leaves a revision that turns away a preheat of the row read
// before the cut. (While the session is open it waits: TestCutOfALostBucketWaitsWhileOpen.)
func TestCutOfAnUnloadedBucket(t *testing.T) {
	s := newBucketSale(t, stacktest.Redis(t))
	s.now = func() time.Time { return time.Now().Add(-2 * time.Hour) } // before the session's start
	ctx := stacktest.Context(t, 30*time.Second)
	before, _ := s.row(t, 1) // bucket 1's row before the cut: 3 units
	s.lose(t, 1)
	adj, err := s.cat.PlanBucketAdjustment(ctx, s.sid, s.pid, 8, "ann", "", "test") // 1 from bucket 0, 1 from bucket 1
	if err != nil || len(adj.Transfers) != 2 {
		t.Fatalf("plan: %+v %v", adj, err)
	}
	// Both transfers stop after their take: bucket 0's took a unit in Redis, bucket 1's
	// found no key.
	if _, err := s.crashAfter(stepTaken).resume(ctx, s.acquire(t)); !errors.Is(err, errCrash) {
		t.Fatalf("resume: %v, want the simulated crash", err)
	}
	// Bucket 1's take found no key: a preheat of the row read before the cut is refused.
	_, led := s.row(t, 1)
	r, err := s.gate.LoadBucket(ctx, before, 1, saleBuckets, led, time.Now().Add(2*time.Hour))
	if err != nil || r.Loaded || !r.Stale {
		t.Fatalf("preheat of the row before the cut: %+v %v, want refused as stale", r, err)
	}
	if n, err := s.executor(nil).resume(ctx, s.acquire(t)); err != nil || n != 2 {
		t.Fatalf("resume: %d %v", n, err)
	}
	all, err := s.cat.Transfers(ctx, s.sid, s.pid)
	if err != nil || len(all) != 2 || all[1].State != store.TransferDone || all[1].Units != 1 {
		t.Fatalf("journal: %+v %v", all, err)
	}
	s.load(t, 1) // the row after the cut, with its ledger
	s.state(t).adjusted(t, "after the cut", 8, []int{2, 2, 2, 2}, []int{1, 2, 2, 2})
}

// A cut of a bucket whose keys were lost while its session is open must not take the
// units from its row alone: the row still counts units Redis admitted before the loss
// whose grabs the consumer has not persisted yet, and a cut of them would turn those 202s
// into sold_out in MySQL. The cut waits (planned, nothing taken) until the bucket is
// rebuilt from its row once the consumer caught up, then takes in Redis as for a live
// bucket; the other buckets' cuts go on.
func TestCutOfALostBucketWaitsWhileOpen(t *testing.T) {
	s := newBucketSale(t, stacktest.Redis(t))
	ctx := stacktest.Context(t, 30*time.Second)
	s.admitIn(t, 1, "u2", "k2")
	s.lose(t, 1)                                                                    // its event is still on its way: bucket 1's row holds 3, one of them admitted
	adj, err := s.cat.PlanBucketAdjustment(ctx, s.sid, s.pid, 0, "ann", "", "test") // every unit MySQL has not sold
	if err != nil || len(adj.Transfers) != saleBuckets {
		t.Fatalf("plan: %+v %v", adj, err)
	}
	if _, err := s.executor(nil).resume(ctx, s.acquire(t)); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if left := s.state(t).mysql[1]; left != 3 {
		t.Fatalf("bucket 1's row: left %d after the cut, want 3: the cut took units of a lost bucket, the admitted grab's among them", left)
	}
	// The consumer persists the grab (bucket 1's row: left 2), then the rebuild loads the row.
	if err := s.db.WithContext(ctx).Exec(`UPDATE stock_buckets SET left_stock = left_stock - 1, version = version + 1
		WHERE session_id = ? AND prize_id = ? AND bucket = 1`, s.sid, s.pid).Error; err != nil {
		t.Fatal(err)
	}
	s.load(t, 1)
	if _, err := s.executor(nil).resume(ctx, s.acquire(t)); err != nil {
		t.Fatalf("resume after the rebuild: %v", err)
	}
	all, err := s.cat.Transfers(ctx, s.sid, s.pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range all {
		if tr.State != store.TransferDone {
			t.Fatalf("journal: %+v", all)
		}
	}
	// Bucket 0 keeps its pending grab's unit; bucket 1 keeps its sold one.
	s.state(t).adjusted(t, "after the cut", 2, []int{1, 0, 0, 0}, []int{0, 0, 0, 0})
}
