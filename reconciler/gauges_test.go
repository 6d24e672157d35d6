package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

func TestDriftUncorrectedRunsCountConsecutiveRuns(t *testing.T) {
	m := newDriftMetrics(prometheus.NewRegistry())
	a, b := seckill.SessionPrize{Session: 1, Prize: 10}, seckill.SessionPrize{Session: 1, Prize: 11}
	scope := map[seckill.SessionPrize]bool{a: true, b: true}
	m.track(scope, map[seckill.SessionPrize]bool{a: true, b: true}) // both drifted, neither corrected
	m.track(scope, map[seckill.SessionPrize]bool{a: true})          // a again; b in flight: keeps its count
	if v := testutil.ToFloat64(m.uncorrected.WithLabelValues("1", "10")); v != 2 {
		t.Fatalf("a: %v uncorrected runs, want 2", v)
	}
	if v := testutil.ToFloat64(m.uncorrected.WithLabelValues("1", "11")); v != 1 {
		t.Fatalf("b: %v uncorrected runs, want 1 (not checked this run)", v)
	}
	m.track(scope, map[seckill.SessionPrize]bool{a: false}) // a corrected
	if n := testutil.CollectAndCount(m.uncorrected); n != 1 {
		t.Fatalf("%d series after a was corrected, want 1 (b)", n)
	}
	m.track(map[seckill.SessionPrize]bool{a: true}, nil) // b's session left the scope
	if n := testutil.CollectAndCount(m.uncorrected); n != 0 {
		t.Fatalf("%d series after b left the scope, want 0", n)
	}
}

type fakeStockCatalog struct {
	sessions []seckill.Session
	stocks   []seckill.Stock
}

func (f *fakeStockCatalog) SessionsOverlapping(context.Context, time.Time, time.Time) ([]seckill.Session, error) {
	return f.sessions, nil
}

func (f *fakeStockCatalog) Stocks(_ context.Context, ids ...int64) ([]seckill.Stock, error) {
	var out []seckill.Stock
	for _, st := range f.stocks {
		for _, id := range ids {
			if st.SessionID == id {
				out = append(out, st)
			}
		}
	}
	return out, nil
}

// No prize has stock buckets here (TestStockGaugesSumBuckets has).
func (f *fakeStockCatalog) BucketedStocks(context.Context, ...int64) ([]store.PrizeStock, error) {
	return nil, nil
}

type fakeSnapshots map[seckill.SessionPrize]stock.Snapshot

func (f fakeSnapshots) PrizeSnapshots(_ context.Context, stocks []seckill.Stock) ([]stock.Snapshot, error) {
	out := make([]stock.Snapshot, len(stocks))
	for i, st := range stocks {
		if st.BucketCount() > 1 {
			return nil, errors.New("no stock buckets here")
		}
		out[i] = f[st.SessionPrize()]
	}
	return out, nil
}

func TestStockGaugesSideBySideAndRemovedWhenSessionsLeave(t *testing.T) {
	cat := &fakeStockCatalog{
		sessions: []seckill.Session{{ID: 1}, {ID: 2}},
		stocks: []seckill.Stock{{SessionID: 1, PrizeID: 10, Total: 100, Left: 40},
			{SessionID: 2, PrizeID: 10, Total: 50, Left: 50}},
	}
	snaps := fakeSnapshots{{Session: 1, Prize: 10}: {Loaded: true, Left: 35, Pending: 5}} // session 2 not preheated
	g := &stockGauges{catalog: cat, gate: snaps, every: time.Second, metrics: newStockMetrics(prometheus.NewRegistry()),
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), now: time.Now}
	if err := g.sample(context.Background()); err != nil {
		t.Fatal(err)
	}
	m := g.metrics
	for _, c := range []struct {
		name string
		got  prometheus.Collector
		want float64
	}{
		{"mysql left", m.left.WithLabelValues("1", "10", "mysql"), 40},
		{"redis left", m.left.WithLabelValues("1", "10", "redis"), 35},
		{"sold", m.sold.WithLabelValues("1", "10"), 60},
		{"pending", m.pending.WithLabelValues("1", "10"), 5},
		{"total", m.total.WithLabelValues("2", "10"), 50},
	} {
		if v := testutil.ToFloat64(c.got); v != c.want {
			t.Errorf("%s = %v, want %v", c.name, v, c.want)
		}
	}
	if n := testutil.CollectAndCount(m.left); n != 3 {
		t.Fatalf("%d stock_left series, want 3 (no redis series for the unloaded prize)", n)
	}
	cat.sessions = cat.sessions[1:] // session 1 is out of the window
	if err := g.sample(context.Background()); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]prometheus.Collector{"left": m.left, "total": m.total, "sold": m.sold, "pending": m.pending} {
		if n := testutil.CollectAndCount(c); n != 1 {
			t.Errorf("%s: %d series after session 1 left, want 1", name, n)
		}
	}
}

type fakeLeaser struct{ fence int64 }

func (f fakeLeaser) Do(ctx context.Context, work func(context.Context, lease.Fence) error) (bool, error) {
	if f.fence == 0 {
		return false, nil
	}
	return true, work(ctx, lease.Fence{Name: "test", Number: f.fence})
}

func TestLastRunIsSetOnlyByRunsThatHeldTheLease(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	r := &runner{lease: fakeLeaser{}, metrics: newRunnerMetrics(prometheus.NewRegistry()), now: func() time.Time { return at }}
	if _, err := r.runOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v := testutil.ToFloat64(r.metrics.lastRun); v != 0 {
		t.Fatalf("last run = %v after a busy run, want 0", v)
	}
	r.lease = fakeLeaser{fence: 7}
	if _, err := r.runOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v, f := testutil.ToFloat64(r.metrics.lastRun), testutil.ToFloat64(r.metrics.fence); v != float64(at.Unix()) || f != 7 {
		t.Fatalf("last run = %v, fence = %v; want %v, 7", v, f, at.Unix())
	}
}
