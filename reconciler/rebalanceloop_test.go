package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// signal sets what the gateways would have written for bucket b: its demand counter and,
// when wanted, its wanted flag; both are deleted when the test ends.
func (s *bucketSale) signal(t *testing.T, b int, demand int64, wanted bool) {
	t.Helper()
	ctx := stacktest.Context(t, 5*time.Second)
	k := stock.BucketKeysFor(s.sid, s.pid, b, saleBuckets)
	if err := s.rdb.Set(ctx, k.Demand(), demand, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if wanted {
		if err := s.rdb.Set(ctx, k.Wanted(), 1, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		s.rdb.Del(context.Background(), k.Demand())
		s.rdb.Del(context.Background(), k.Wanted())
	})
}

func (s *bucketSale) rebalancer(exec transferExecutor) rebalancer {
	return rebalancer{catalog: s.cat, reader: redisBuckets{rdb: s.rdb}, exec: exec, metrics: exec.metrics}
}

// A round of the rebalance loop, on a single Redis and on the cluster (the buckets on their
// own slots): it finishes the journal's unfinished transfer before planning, skips a prize
// whose transfer it could not finish, acts on nothing under a stale fence, and moves units
// to the bucket a gateway found dry (in proportion to demand plus one, plus one for the
// flag) from the others; the demand counters are read and reset. Every bucket's Redis stock
// stays at most its row's and no unit is gained or lost throughout.
func TestRebalanceRound(t *testing.T) {
	onBothRedis(t, rebalanceRound)
}

func rebalanceRound(t *testing.T, rdb redis.UniversalClient) {
	s := newBucketSale(t, rdb)
	ctx := stacktest.Context(t, 30*time.Second)
	f := s.acquire(t)
	reg := prometheus.NewRegistry()
	exec := s.executor(nil)
	exec.metrics = newRebalanceMetrics(reg)

	// Bucket 3 runs dry (its 2 units to bucket 1); a transfer of 1 from bucket 1 to 2 dies
	// after its take.
	if _, err := exec.transfer(ctx, f, s.sid, s.pid, 3, 1, 2); err != nil {
		t.Fatal(err)
	}
	dying := func(step transferStep) transferExecutor {
		x := s.crashAfter(step)
		x.metrics = exec.metrics
		return x
	}
	if _, err := dying(stepTaken).transfer(ctx, f, s.sid, s.pid, 1, 2, 1); !errors.Is(err, errCrash) {
		t.Fatalf("transfer: %v, want the simulated crash", err)
	}
	st := s.state(t)
	st.check(t, "before the rounds")
	if !slices.Equal(st.redis, []int{2, 4, 2, 0}) || st.inFlight != 1 {
		t.Fatalf("before the rounds: Redis %v, in flight %d", st.redis, st.inFlight)
	}
	s.signal(t, 3, 4, true)

	rb := s.rebalancer(exec)
	var list bucketedPrizes // the loop's list, read fresh
	prizes, err := list.open(ctx, s.cat, time.Now())
	if err != nil || len(prizes) != 1 || prizes[0] != (store.PrizeStock{SessionID: s.sid, PrizeID: s.pid, Buckets: 4, Total: 10, Left: 10}) {
		t.Fatalf("open bucketed prizes %+v %v", prizes, err)
	}

	// The resumed transfer dies again: the prize is skipped, nothing more is planned.
	failing := s.rebalancer(dying(stepMoved))
	got, err := failing.round(ctx, f, prizes)
	if !errors.Is(err, errCrash) || got.Skipped != 1 || got.Transfers != 0 {
		t.Fatalf("round whose resume fails: %+v %v, want the prize skipped", got, err)
	}
	if all, _ := s.cat.Transfers(ctx, s.sid, s.pid); len(all) != 2 {
		t.Fatalf("a round that could not resume planned more: %+v", all)
	}
	s.state(t).check(t, "after the failed round")

	// A holder paused past a takeover plans nothing: its journal writes are refused (its
	// give may still land where the new holder has not written yet, which is the give the
	// new holder would make: idempotent by transfer id).
	fresh := s.acquire(t)
	if got, err := rb.round(ctx, f, prizes); !staleFence(err) || got.Transfers != 0 {
		t.Fatalf("round under a stale fence: %+v %v, want a stale fence", got, err)
	}
	if all, _ := s.cat.Transfers(ctx, s.sid, s.pid); len(all) != 2 {
		t.Fatalf("a stale round planned: %+v", all)
	}
	s.state(t).check(t, "after the stale round")

	// The new holder finishes the transfer (bucket 2 gets its unit), then bucket 3, the only
	// one asked of, gets its share of the 9 units Redis holds: (4 + 1 + 1) / 9 of them, 6,
	// taken from the surplus of the others (1 has 3 above its share of 1, 2 has 2, 0 has 1).
	got, err = rb.round(ctx, fresh, prizes)
	if err != nil || got != (roundStats{Resumed: 1, Prizes: 1, Transfers: 3, Units: 6, Wanted: 1}) {
		t.Fatalf("round: %+v %v", got, err)
	}
	end := s.state(t)
	end.check(t, "after the round")
	if !slices.Equal(end.redis, []int{1, 1, 1, 6}) || !slices.Equal(end.mysql, []int{2, 1, 1, 6}) || end.inFlight != 0 {
		t.Fatalf("after the round: Redis %v, MySQL %v, in flight %d; want [1 1 1 6], [2 1 1 6], 0", end.redis, end.mysql, end.inFlight)
	}
	if n, err := s.rdb.Exists(ctx, stock.BucketKeysFor(s.sid, s.pid, 3, saleBuckets).Demand()).Result(); err != nil || n != 0 {
		t.Fatalf("bucket 3's demand counter left after the round: %d %v", n, err)
	}
	m := exec.metrics
	if done, units, wanted := testutil.ToFloat64(m.transfers.WithLabelValues(store.TransferDone)), testutil.ToFloat64(m.units),
		testutil.ToFloat64(m.wanted); done != 5 || units != 9 || wanted != 1 {
		t.Fatalf("metrics: %v transfers done, %v units moved, %v wanted; want 5, 9, 1", done, units, wanted)
	}

	// The demand was read once: the next round finds bucket 3 above the low-water mark and
	// moves nothing.
	if got, err := rb.round(ctx, fresh, prizes); err != nil || got.Transfers != 0 {
		t.Fatalf("second round: %+v %v, want no transfer", got, err)
	}
	if again := s.state(t); !slices.Equal(again.redis, end.redis) || !slices.Equal(again.mysql, end.mysql) {
		t.Fatalf("second round changed the stock: %+v", again)
	}
}

// The loop takes the lease only when an open session has a bucketed prize, counts a round
// another instance's lease kept it from, and shares the lease with the runner of its own
// process through serialLeaser.
func TestRebalanceLoopTakesTheLease(t *testing.T) {
	s := newBucketSale(t, stacktest.Redis(t))
	ctx := stacktest.Context(t, 30*time.Second)
	reg := prometheus.NewRegistry()
	exec := s.executor(nil)
	exec.metrics = newRebalanceMetrics(reg)
	loop := rebalanceLoop{rebalancer: s.rebalancer(exec), lease: newSerialLeaser(s.lease), every: time.Second,
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), now: time.Now}
	s.signal(t, 2, 3, false)

	if _, acquired := loop.tick(ctx); !acquired || testutil.ToFloat64(exec.metrics.rounds.WithLabelValues("ok")) != 1 {
		t.Fatalf("tick with an open bucketed prize: acquired %v, ok rounds %v", acquired, testutil.ToFloat64(exec.metrics.rounds.WithLabelValues("ok")))
	}

	// Another instance holds the lease: the round is busy and acts on nothing.
	other := lease.New(s.db, s.name, time.Minute)
	h, ok, err := other.TryAcquire(ctx)
	if err != nil || !ok {
		t.Fatalf("another instance takes the lease: %v %v", ok, err)
	}
	if _, acquired := loop.tick(ctx); acquired || testutil.ToFloat64(exec.metrics.rounds.WithLabelValues("busy")) != 1 {
		t.Fatalf("tick while another holds the lease: acquired %v", acquired)
	}
	if err := other.Release(ctx, h); err != nil {
		t.Fatal(err)
	}

	// Closed, the session has nothing to rebalance: no round, no lease.
	if _, err := s.cat.CloseSession(ctx, s.sid, "test", "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	before := testutil.ToFloat64(exec.metrics.rounds.WithLabelValues("ok"))
	if _, acquired := loop.tick(ctx); acquired || testutil.ToFloat64(exec.metrics.rounds.WithLabelValues("ok")) != before {
		t.Fatalf("tick without an open bucketed prize took the lease")
	}
}

// onBothRedis runs a test on the single Redis and on the cluster, where a prize's buckets
// live on slots of their own.
func onBothRedis(t *testing.T, test func(t *testing.T, rdb redis.UniversalClient)) {
	for _, r := range []struct {
		name string
		rdb  func(testing.TB) redis.UniversalClient
	}{
		{"stack", stacktest.Redis},
		{"cluster", func(tb testing.TB) redis.UniversalClient { return stacktest.ClusterRedis(tb) }},
	} {
		t.Run(r.name, func(t *testing.T) { test(t, r.rdb(t)) })
	}
}

// crashAfter is an executor that stops, as a crash would, once step is durable.
func (s *bucketSale) crashAfter(step transferStep) transferExecutor {
	return s.executor(func(_ store.Transfer, at transferStep) error {
		if at == step {
			return errCrash
		}
		return nil
	})
}

// countingLister is the rebalance loop's MySQL list of bucketed prizes in memory, counting
// the statements a real catalog would run.
type countingLister struct {
	sessions []seckill.Session
	stocks   []store.PrizeStock // only bucketed ones, as BucketedStocks answers
	listed   int                // SessionsOverlapping calls
	summed   int                // BucketedStocks calls
}

func (f *countingLister) SessionsOverlapping(_ context.Context, from, to time.Time) ([]seckill.Session, error) {
	f.listed++
	var out []seckill.Session
	for _, s := range f.sessions {
		if s.Start.Before(to) && s.End.After(from) {
			out = append(out, s)
		}
	}
	return out, nil
}

func (f *countingLister) BucketedStocks(_ context.Context, ids ...int64) ([]store.PrizeStock, error) {
	f.summed++
	var out []store.PrizeStock
	for _, p := range f.stocks {
		if slices.Contains(ids, p.SessionID) {
			out = append(out, p)
		}
	}
	return out, nil
}

// The rebalance loop's list of bucketed prizes is read from MySQL once per refresh period,
// not every round: idle, or with only prizes without buckets open, 40 rounds of 250 ms make
// 2 reads (before, 40 and 80 statements). A session known at a refresh is rebalanced from
// the round it opens until the round it ends, without another read; one created after a
// refresh, already open, is picked up by the first round a period after that refresh.
func TestBucketedPrizesListIsKept(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	const round, period = 250 * time.Millisecond, 5 * time.Second
	run := func(c *bucketedPrizes, l *countingLister, from time.Time, rounds int) (firstSeen map[int64]time.Time, lastSeen map[int64]time.Time) {
		t.Helper()
		firstSeen, lastSeen = map[int64]time.Time{}, map[int64]time.Time{}
		for i := range rounds {
			now := from.Add(time.Duration(i) * round)
			prizes, err := c.open(ctx, l, now)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range prizes {
				if _, ok := firstSeen[p.SessionID]; !ok {
					firstSeen[p.SessionID] = now
				}
				lastSeen[p.SessionID] = now
			}
		}
		return firstSeen, lastSeen
	}

	// Idle: nothing open.
	idle := &countingLister{}
	run(&bucketedPrizes{every: period}, idle, t0, 40)
	if idle.listed != 2 || idle.summed != 0 {
		t.Errorf("idle for 10 s: %d session lists and %d stock sums, want 2 and 0", idle.listed, idle.summed)
	}
	uncached := &countingLister{}
	run(&bucketedPrizes{}, uncached, t0, 40)
	if uncached.listed != 40 {
		t.Errorf("without a period: %d session lists in 40 rounds, want 40 (the loop as it was)", uncached.listed)
	}

	// A session open throughout whose prizes have no buckets.
	plain := &countingLister{sessions: []seckill.Session{{ID: 1, Start: t0.Add(-time.Minute), End: t0.Add(time.Hour)}}}
	if seen, _ := run(&bucketedPrizes{every: period}, plain, t0, 40); len(seen) != 0 || plain.listed != 2 || plain.summed != 2 {
		t.Errorf("an unbucketed open session for 10 s: %d lists, %d sums, seen %v; want 2, 2, none", plain.listed, plain.summed, seen)
	}

	// Session 2 (bucketed), known at the first refresh, opens at 1.1 s and ends at 3.1 s;
	// session 3 (bucketed) is created at 1 s, already open: the refresh at 5 s finds it.
	l := &countingLister{
		sessions: []seckill.Session{{ID: 2, Start: t0.Add(1100 * time.Millisecond), End: t0.Add(3100 * time.Millisecond)}},
		stocks:   []store.PrizeStock{{SessionID: 2, PrizeID: 1, Buckets: 4, Total: 10}, {SessionID: 3, PrizeID: 1, Buckets: 2, Total: 10}},
	}
	c := &bucketedPrizes{every: period}
	first, last := run(c, l, t0, 4) // rounds at 0 .. 0.75 s
	l.sessions = append(l.sessions, seckill.Session{ID: 3, Start: t0.Add(-time.Minute), End: t0.Add(time.Hour)})
	f2, l2 := run(c, l, t0.Add(time.Second), 36) // rounds at 1 s .. 9.75 s
	for k, v := range f2 {
		if _, ok := first[k]; !ok {
			first[k] = v
		}
	}
	for k, v := range l2 {
		last[k] = v
	}
	if got, want := first[2], t0.Add(1250*time.Millisecond); !got.Equal(want) {
		t.Errorf("session 2 first rebalanced at %v, want the first round after it opened (%v)", got.Sub(t0), want.Sub(t0))
	}
	if got, want := last[2], t0.Add(3*time.Second); !got.Equal(want) {
		t.Errorf("session 2 last rebalanced at %v, want the last round before it ended (%v)", got.Sub(t0), want.Sub(t0))
	}
	if got, bound := first[3], t0.Add(period); got.IsZero() || got.After(bound) {
		t.Errorf("session 3, open since 1 s, first rebalanced at %v, want by the next refresh (%v)", got.Sub(t0), bound.Sub(t0))
	}
	if l.listed != 2 {
		t.Errorf("%d session lists in 10 s, want 2", l.listed)
	}
}
