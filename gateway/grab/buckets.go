package grab

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
)

// Stock buckets on the grab path (docs/design.md): a prize with N > 1 buckets admits each
// user in their home bucket only, so the per-user limit is counted in one slot; a dry home
// bucket is sold_out only when every bucket is empty and no transfer is in flight, else the
// client hears 503 rebalancing and the bucket is flagged wanted. A prize without buckets
// (N = 1, and every prize when the router is nil) takes none of these paths.

// bucketGate is what the grab path needs from the gate for prizes with buckets.
type bucketGate interface {
	LookupBucket(ctx context.Context, requestID string, b, buckets int) (stock.Lookup, error)
	AwaitReplicaBucket(ctx context.Context, sessionID, prizeID int64, b, buckets int, requestID string, timeout time.Duration) error
	Buckets(ctx context.Context, sessionID, prizeID int64, n int) ([]stock.BucketState, error)
	MarkWanted(ctx context.Context, sessionID, prizeID int64, b, buckets int, ttl time.Duration) error
	AddDemand(ctx context.Context, counts []stock.BucketDemand) error
}

// bucketCounts says how many buckets a session×prize has (the schedule cache).
type bucketCounts interface {
	Buckets(sessionID, prizeID int64) int
}

type bucketID struct {
	seckill.SessionPrize
	bucket, n int // n: the prize's N, which names the bucket's keys
}

// othersRead is a cached read of every bucket of a prize whose home bucket ran dry.
type othersRead struct {
	until time.Time
	empty bool // every bucket loaded and at 0, nothing in flight: the prize is sold out
}

type bucketRouter struct {
	gate      bucketGate
	counts    bucketCounts
	othersTTL time.Duration // SECKILL_BUCKET_OTHERS_CACHE: reads of the others, demand flushes
	wantedTTL time.Duration // SECKILL_BUCKET_WANTED_TTL
	log       *slog.Logger

	mu     sync.Mutex
	others map[seckill.SessionPrize]othersRead
	wanted map[bucketID]time.Time // when this gateway may set the bucket's flag again
	demand map[bucketID]int64     // counted since the last flush
}

func newBucketRouter(g bucketGate, counts bucketCounts, othersTTL, wantedTTL time.Duration, log *slog.Logger) *bucketRouter {
	return &bucketRouter{gate: g, counts: counts, othersTTL: othersTTL, wantedTTL: wantedTTL, log: log,
		others: map[seckill.SessionPrize]othersRead{}, wanted: map[bucketID]time.Time{}, demand: map[bucketID]int64{}}
}

// home returns the bucket user's grabs of a session×prize are admitted in, and the prize's
// number of buckets: 0 and 1 for a prize without buckets (or a nil router).
func (r *bucketRouter) home(user string, sessionID, prizeID int64) (b, n int) {
	if r == nil {
		return 0, 1
	}
	n = max(r.counts.Buckets(sessionID, prizeID), 1)
	return stock.HomeBucket(user, n), n
}

// count adds one grab that asked g's bucket for a unit (admitted or sold_out) to the demand
// the rebalance loop reads.
func (r *bucketRouter) count(g seckill.Grab) {
	id := bucketID{g.SessionPrize(), g.Bucket, g.Buckets}
	r.mu.Lock()
	r.demand[id]++
	r.mu.Unlock()
}

// soldOut decides the answer to a grab whose home bucket (of g.Buckets) was dry: true when the prize
// is sold out everywhere (every bucket loaded and empty, no transfer in flight), false when
// units remain or may remain (the caller answers 503 rebalancing), in which case the bucket
// is flagged wanted. The read of the others is cached per prize for othersTTL. An error
// reading them is not a sold-out: it is returned with false.
func (r *bucketRouter) soldOut(ctx context.Context, g seckill.Grab, now time.Time) (bool, error) {
	sp := g.SessionPrize()
	r.mu.Lock()
	c, ok := r.others[sp]
	r.mu.Unlock()
	if !ok || !now.Before(c.until) {
		states, err := r.gate.Buckets(ctx, g.SessionID, g.PrizeID, g.Buckets)
		if err != nil {
			return false, err
		}
		c = othersRead{until: now.Add(r.othersTTL), empty: emptyEverywhere(states)}
		r.mu.Lock()
		r.others[sp] = c
		r.mu.Unlock()
	}
	if c.empty {
		return true, nil
	}
	id := bucketID{sp, g.Bucket, g.Buckets}
	r.mu.Lock()
	next, flagged := r.wanted[id]
	mark := !flagged || !now.Before(next)
	if mark {
		r.wanted[id] = now.Add(r.othersTTL)
	}
	r.mu.Unlock()
	if mark {
		if err := r.gate.MarkWanted(ctx, g.SessionID, g.PrizeID, g.Bucket, g.Buckets, r.wantedTTL); err != nil {
			return false, err
		}
	}
	return false, nil
}

// emptyEverywhere: every bucket is loaded with left 0 and no unit is between buckets. A
// bucket that is not loaded may hold units in MySQL (its keys are being rebuilt), so it
// never counts as empty.
func emptyEverywhere(states []stock.BucketState) bool {
	for _, s := range states {
		if !s.Loaded || s.Left > 0 {
			return false
		}
	}
	return stock.InFlight(states) <= 0
}

// Run flushes the demand counts every othersTTL until ctx ends, and forgets cached reads
// and wanted marks that expired (so the maps hold only the prizes being grabbed).
func (r *bucketRouter) Run(ctx context.Context) error {
	t := time.NewTicker(r.othersTTL)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			r.flush(ctx, now)
		}
	}
}

func (r *bucketRouter) flush(ctx context.Context, now time.Time) {
	r.mu.Lock()
	counts := make([]stock.BucketDemand, 0, len(r.demand))
	for id, n := range r.demand {
		counts = append(counts, stock.BucketDemand{SessionID: id.Session, PrizeID: id.Prize, Bucket: id.bucket, Buckets: id.n, Grabs: n})
	}
	clear(r.demand)
	for sp, c := range r.others {
		if !now.Before(c.until) {
			delete(r.others, sp)
		}
	}
	for id, next := range r.wanted {
		if !now.Before(next) {
			delete(r.wanted, id)
		}
	}
	r.mu.Unlock()
	fctx, cancel := context.WithTimeout(ctx, max(r.othersTTL, time.Second))
	defer cancel()
	// Demand is a hint to the rebalance loop: a failed flush is dropped, not retried.
	if err := r.gate.AddDemand(fctx, counts); err != nil && ctx.Err() == nil {
		r.log.Warn("bucket demand not flushed", "buckets", len(counts), "error", err.Error())
	}
}
