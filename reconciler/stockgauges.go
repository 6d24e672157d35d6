package main

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// snapshotter is what the stock gauges need from the Redis gate: an O(1) read per stock
// bucket (HMGET and HLEN, pipelined), never a walk over the reservations, summed per prize.
type snapshotter interface {
	PrizeSnapshots(ctx context.Context, stocks []seckill.Stock) ([]stock.Snapshot, error)
}

// stockCatalog is what the stock gauges read of MySQL: the stock rows and, for the prizes
// with stock buckets, their sums (PrizeStock: a bucketed prize's row is only bucket 0's).
type stockCatalog interface {
	sessionLister
	BucketedStocks(ctx context.Context, sessionIDs ...int64) ([]store.PrizeStock, error)
}

// stockGauges exports, per session×prize, the stock as MySQL and as Redis see it side by
// side: the operator's "is Redis right?" without a query. It only reads, so it runs on
// every instance whether or not it holds the lease, like the consumer's sampler; every
// instance reports the same values (aggregate with max). Series exist for the sessions
// from preheat (lead before the start) until their keys expire (grace after the end), and
// are deleted after, so the number of series is bounded by the sessions in that window.
type stockGauges struct {
	catalog stockCatalog
	gate    snapshotter
	lead    time.Duration
	grace   time.Duration
	every   time.Duration
	metrics *stockMetrics
	log     *slog.Logger
	now     func() time.Time
}

// Run samples at once and then every g.every until ctx ends.
func (g *stockGauges) Run(ctx context.Context) error {
	sampleEvery(ctx, g.every, g.sample, func(err error) {
		g.log.Warn("stock gauges unreadable", "error", err.Error())
	})
	return nil
}

// sampleEvery runs sample at once and then every period until ctx ends; a failed sample is
// reported (unless ctx ended) and the next one tried on time. The read-only gauges every
// instance exports run this way, outside the lease.
func sampleEvery(ctx context.Context, period time.Duration, sample func(context.Context) error, failed func(error)) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		if err := sample(ctx); err != nil && ctx.Err() == nil {
			failed(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (g *stockGauges) sample(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, g.every)
	defer cancel()
	now := g.now()
	sessions, err := g.catalog.SessionsOverlapping(ctx, now.Add(-g.grace), now.Add(g.lead))
	if err != nil {
		g.metrics.clear() // unknown is absent, never the last value read
		return err
	}
	ids := make([]int64, len(sessions))
	for i, s := range sessions {
		ids[i] = s.ID
	}
	stocks, err := g.catalog.Stocks(ctx, ids...)
	if err != nil {
		g.metrics.clear()
		return err
	}
	// A prize with buckets: MySQL's figures are its buckets' sums, Redis's too (left only
	// while every bucket is loaded). MySQL's sums are read first, so that Redis is read over
	// the N they are over.
	bucketed, err := g.catalog.BucketedStocks(ctx, ids...)
	if err != nil {
		g.metrics.clear()
		return err
	}
	for _, p := range bucketed {
		k := seckill.SessionPrize{Session: p.SessionID, Prize: p.PrizeID}
		i := slices.IndexFunc(stocks, func(st seckill.Stock) bool { return st.SessionPrize() == k })
		if i < 0 {
			continue
		}
		stocks[i].Total, stocks[i].Left, stocks[i].Buckets = p.Total, p.Left, p.Buckets
	}
	snaps, err := g.gate.PrizeSnapshots(ctx, stocks)
	if err != nil {
		g.metrics.clear()
		return err
	}
	seen, loaded := map[seckill.SessionPrize]bool{}, map[seckill.SessionPrize]bool{}
	for i, st := range stocks {
		k := st.SessionPrize()
		seen[k] = true
		g.metrics.left.WithLabelValues(labels(k, "mysql")...).Set(float64(st.Left))
		g.metrics.total.WithLabelValues(labels(k)...).Set(float64(st.Total))
		g.metrics.sold.WithLabelValues(labels(k)...).Set(float64(st.Total - st.Left))
		g.metrics.pending.WithLabelValues(labels(k)...).Set(float64(snaps[i].Pending))
		if snaps[i].Loaded {
			loaded[k] = true
			g.metrics.left.WithLabelValues(labels(k, "redis")...).Set(float64(snaps[i].Left))
		}
	}
	g.metrics.keep(seen, loaded)
	return nil
}
