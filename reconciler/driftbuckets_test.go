package main

import (
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
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
	"github.com/seckill-pipeline/seckill/pkg/writepath"
)

// Drift per stock bucket, on a single Redis and on the cluster: each bucket is compared with
// its own row (bucket 1 lost an admission's undo: Redis low; bucket 2 lost an admission:
// Redis high) and corrected on its own keys; the two buckets of a transfer stopped after its
// take are skipped (their Redis and MySQL differ by the unit in flight), and compared once
// the transfer ends. A bucket whose received differs from the journal (a give lost in a
// failover would leave units "in flight" for ever) is set back to the journal's. Gauges per
// bucket, their sum per prize.
func TestDriftPerBucket(t *testing.T) {
	onBothRedis(t, driftPerBucket)
}

func driftPerBucket(t *testing.T, rdb redis.UniversalClient) {
	s := newBucketSale(t, rdb)
	ctx := stacktest.Context(t, 30*time.Second)
	f := s.acquire(t)
	crash := s.crashAfter(stepTaken)
	if _, err := crash.transfer(ctx, f, s.sid, s.pid, 3, 0, 1); !errors.Is(err, errCrash) {
		t.Fatalf("transfer: %v, want the simulated crash", err)
	}
	meta := func(b int) string { return stock.BucketKeysFor(s.sid, s.pid, b, saleBuckets).Meta }
	for b, fields := range map[int][]any{1: {"left", 1}, 2: {"left", 3, "received", 5}} {
		if err := s.rdb.HSet(ctx, meta(b), fields...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	m := newDriftMetrics(reg)
	job := driftJob{catalog: s.cat, gate: s.gate, returns: store.NewReturns(s.db), orders: store.NewOrders(s.db),
		lag: grabLag{reader: caughtUp{}, group: "g", topic: event.Topic{Name: "t", Partitions: 4}}, grace: time.Hour,
		cases: store.NewExceptions(s.db), caseRuns: 3, metrics: m, log: slog.New(slog.NewTextHandler(io.Discard, nil)), now: time.Now}

	res, err := job.Run(ctx, f)
	want := map[string]int64{"checked": 2, "redis_low": 1, "redis_high": 1, "corrected": 2, "skipped_transfer": 2, "ledger_mismatch": 1, "ledger_corrected": 1}
	for k, v := range want {
		if res.Summary[k] != v {
			t.Errorf("drift %s = %d, want %d (%+v)", k, res.Summary[k], v, res.Summary)
		}
	}
	if err != nil {
		t.Fatalf("drift: %v", err)
	}
	st := s.state(t)
	if !slices.Equal(st.redis, []int{2, 3, 2, 1}) || !slices.Equal(st.mysql, []int{3, 3, 2, 2}) {
		t.Fatalf("after drift: Redis %v, MySQL %v; want [2 3 2 1], [3 3 2 2]", st.redis, st.mysql)
	}
	for b := range 4 {
		if r, w := st.redis[b], st.mysql[b]; r > w {
			t.Errorf("bucket %d: Redis %d > MySQL %d", b, r, w)
		}
	}
	if got := testutil.ToFloat64(m.bucketDrift.WithLabelValues(labels(s.key(), "1")...)); got != -2 {
		t.Errorf("bucket 1's drift gauge %v, want -2", got)
	}
	if got := testutil.ToFloat64(m.bucketDrift.WithLabelValues(labels(s.key(), "2")...)); got != 1 {
		t.Errorf("bucket 2's drift gauge %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.drift.WithLabelValues(labels(s.key())...)); got != -1 {
		t.Errorf("the prize's drift gauge %v, want -1 (its buckets' sum)", got)
	}
	if n := testutil.CollectAndCount(m.bucketDrift); n != 2 {
		t.Errorf("%d bucket drift series, want 2 (the skipped buckets have none)", n)
	}

	// Once the transfer ends, all four buckets are compared, and agree.
	next := s.acquire(t)
	if n, err := s.executor(nil).resume(ctx, next); err != nil || n != 1 {
		t.Fatalf("resume: %d %v", n, err)
	}
	res, err = job.Run(ctx, next)
	if err != nil || res.Summary["checked"] != 4 || res.Summary["corrected"] != 0 || res.Summary["skipped_transfer"] != 0 || res.Summary["ledger_mismatch"] != 0 {
		t.Fatalf("drift after the transfer: %+v %v", res.Summary, err)
	}
	s.state(t).sums(t, "after the transfer", 10, 1)
}

func (s *bucketSale) key() seckill.SessionPrize {
	return seckill.SessionPrize{Session: s.sid, Prize: s.pid}
}

// The stock gauges of a prize with buckets are its buckets' sums, MySQL's (PrizeStock) and
// Redis's (left and pending over every bucket), not bucket 0's row and keys.
func TestStockGaugesSumBuckets(t *testing.T) {
	s := newBucketSale(t, stacktest.Redis(t))
	m := newStockMetrics(prometheus.NewRegistry())
	g := &stockGauges{catalog: s.cat, gate: s.gate, lead: time.Minute, grace: time.Minute, every: 10 * time.Second, metrics: m,
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), now: time.Now}
	// A transfer in flight: 2 units taken from bucket 3, not yet given.
	f := s.acquire(t)
	crash := s.crashAfter(stepMoved)
	if _, err := crash.transfer(stacktest.Context(t, 10*time.Second), f, s.sid, s.pid, 3, 1, 2); !errors.Is(err, errCrash) {
		t.Fatalf("transfer: %v", err)
	}
	if err := g.sample(stacktest.Context(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	k := s.key()
	for name, c := range map[string]struct {
		got  float64
		want float64
	}{
		"total":      {testutil.ToFloat64(m.total.WithLabelValues(labels(k)...)), 10},
		"mysql left": {testutil.ToFloat64(m.left.WithLabelValues(labels(k, "mysql")...)), 10},
		"sold":       {testutil.ToFloat64(m.sold.WithLabelValues(labels(k)...)), 0},
		"redis left": {testutil.ToFloat64(m.left.WithLabelValues(labels(k, "redis")...)), 7}, // 2 + 3 + 2 + 0
		"pending":    {testutil.ToFloat64(m.pending.WithLabelValues(labels(k)...)), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", name, c.got, c.want)
		}
	}
}

// A prize's final report counts every stock bucket (PrizeStock), not bucket 0's row.
func TestSessionReportSumsBuckets(t *testing.T) {
	s := newBucketSale(t, stacktest.Redis(t))
	j := lifecycleJob{catalog: s.cat, orders: store.NewOrders(s.db), returns: store.NewReturns(s.db)}
	r, err := j.report(stacktest.Context(t, 10*time.Second), seckill.Stock{SessionID: s.sid, PrizeID: s.pid})
	if err != nil || r.Total != 10 || r.Left != 10 {
		t.Fatalf("report %+v %v, want total 10, left 10 (bucket 0 alone holds 3)", r, err)
	}
}

// A return for resale of an order bucket 2 sold goes back to bucket 2's keys; the drift's
// lost-returns check looks for it in bucket 2's returned hash (not bucket 0's, where it never
// is), and clears its done stamp only once Redis lost it there, so the sweep makes it again.
func TestDriftFindsALostReturnInItsBucket(t *testing.T) {
	s := newBucketSale(t, stacktest.Redis(t))
	ctx := stacktest.Context(t, 30*time.Second)
	rid := s.soldIn(t, "u2", 2)
	orders, returns := store.NewOrders(s.db), store.NewReturns(s.db)
	res, err := orders.ApplyFeedback(ctx, nil, s.sid, s.pid, []seckill.Feedback{{RequestID: rid, Kind: seckill.FeedbackCancelled,
		Reason: seckill.ReasonBuyerCancelled, At: time.Now()}}, time.Now())
	if err != nil || len(res.Returns) != 1 || res.Returns[0].Bucket != 2 || !res.Returns[0].Resale {
		t.Fatalf("cancel: %+v %v", res, err)
	}
	rep, err := writepath.ReturnUnits(ctx, s.gate, res.Returns)
	if err != nil || rep.Returned != 1 {
		t.Fatalf("the return's Redis step: %+v %v", rep, err)
	}
	if err := returns.MarkRedisDone(ctx, rep.Done, time.Now()); err != nil {
		t.Fatal(err)
	}
	f := s.acquire(t)
	job := driftJob{catalog: s.cat, gate: s.gate, returns: returns, orders: orders,
		lag: grabLag{reader: caughtUp{}, group: "g", topic: event.Topic{Name: "t", Partitions: 4}}, grace: time.Hour,
		cases: store.NewExceptions(s.db), caseRuns: 3, metrics: newDriftMetrics(prometheus.NewRegistry()),
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), now: time.Now}
	if sum, err := job.Run(ctx, f); err != nil || sum.Summary["returns_lost"] != 0 || sum.Summary["corrected"] != 0 {
		t.Fatalf("drift with the return in bucket 2: %+v %v, want nothing lost nor corrected", sum.Summary, err)
	}
	s.state(t).sums(t, "after the return", 10, 1)

	// Redis loses the return's record (and its unit) in bucket 2.
	if err := s.rdb.HDel(ctx, stock.BucketKeysFor(s.sid, s.pid, 2, saleBuckets).Returned, rid).Err(); err != nil {
		t.Fatal(err)
	}
	if sum, err := job.Run(ctx, f); sum.Summary["returns_lost"] != 1 {
		t.Fatalf("drift after the loss: %+v %v, want the return found lost", sum.Summary, err)
	}
	if pending, err := returns.PendingRedisOf(ctx, s.sid, s.pid, 10); err != nil || len(pending) != 1 || pending[0].Bucket != 2 {
		t.Fatalf("returns to make again: %+v %v, want the one of bucket 2", pending, err)
	}
}
