package stock

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// What the operators read of a prize with stock buckets (docs/design.md): the prize as one
// snapshot summed over its buckets, and each bucket with its transfer counts and the
// gateways' signals. Reads only; nothing here writes a key.

// SumSnapshots is a prize's snapshot summed over its buckets' (BucketSnapshots). It is
// loaded only when every bucket is, and then left, total and the time to live (the
// shortest) are the buckets'; otherwise it reads as a prize without keys does (left -1,
// total, limit and time to live 0): a bucket being rebuilt may hold units MySQL has, so a
// sum over the others would read as fewer units than there are. Pending and settled are
// summed over every bucket, loaded or not. Units taken by a transfer and not yet given are
// in no bucket's left or total. One bucket's snapshot is returned as it is, so a prize
// without buckets reads exactly as Snapshots reads it.
func SumSnapshots(buckets []Snapshot) Snapshot {
	if len(buckets) == 1 {
		return buckets[0]
	}
	sum := Snapshot{Loaded: len(buckets) > 0}
	for i, b := range buckets {
		if i == 0 {
			sum.SessionID, sum.PrizeID = b.SessionID, b.PrizeID
			sum.TTLMillis = b.TTLMillis
		}
		sum.Pending += b.Pending
		sum.Settled += b.Settled
		sum.Loaded = sum.Loaded && b.Loaded
		sum.Left += b.Left
		sum.Total += b.Total
		sum.Limit = max(sum.Limit, b.Limit) // the prize's per-user limit, the same in every bucket
		sum.TTLMillis = min(sum.TTLMillis, b.TTLMillis)
	}
	if !sum.Loaded {
		sum.Left, sum.Total, sum.Limit, sum.TTLMillis = -1, 0, 0, 0
	}
	return sum
}

// BucketDetail is one stock bucket as the operator console's prize page shows it.
type BucketDetail struct {
	Snapshot
	Sent     int64 `json:"sent"`     // units its transfers took from it (take)
	Received int64 `json:"received"` // units of the transfers it settled as destination (give)
	// Demand is what the gateways counted since the rebalance loop last read and reset it
	// (every SECKILL_BUCKET_REBALANCE_INTERVAL): a glimpse, not a total.
	Demand int64 `json:"demand"`
	Wanted bool  `json:"wanted"` // a gateway found it dry while units remained elsewhere (short TTL)
}

// BucketDetails reads the n buckets of a session×prize for an operator: BucketSnapshots, then
// each bucket's sent and received counts, demand counter and wanted flag in one more
// pipelined round trip. The demand counter is read with GET, never reset: the rebalance loop
// owns it. Not one atomic read: the buckets live on different slots.
func (g *Gate) BucketDetails(ctx context.Context, id seckill.SessionPrize, n int) ([]BucketDetail, error) {
	snaps, err := g.BucketSnapshots(ctx, id, n)
	if err != nil {
		return nil, err
	}
	states := make([]*redis.SliceCmd, n)
	demand := make([]*redis.StringCmd, n)
	wanted := make([]*redis.IntCmd, n)
	_, err = g.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for b := range n {
			k := BucketKeysFor(id.Session, id.Prize, b, n)
			states[b] = ReadBucketState(ctx, p, id.Session, id.Prize, b, n)
			demand[b] = p.Get(ctx, k.Demand())
			wanted[b] = p.Exists(ctx, k.Wanted())
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read %d buckets of session %d prize %d: %w", n, id.Session, id.Prize, err)
	}
	out := make([]BucketDetail, n)
	for b := range n {
		d, err := demand[b].Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("demand of bucket %d of session %d prize %d: %w", b, id.Session, id.Prize, err)
		}
		st := BucketStateOf(states[b])
		out[b] = BucketDetail{Snapshot: snaps[b], Sent: st.Sent, Received: st.Received, Demand: d, Wanted: wanted[b].Val() > 0}
	}
	return out, nil
}
