package stock

import (
	"context"
	_ "embed"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// Stock buckets (docs/design.md): a session×prize with N > 1 buckets keeps N sets of the
// keys KeysFor returns, one per bucket, each on its own hash tag so a Redis Cluster spreads
// them over slots. Bucket 0's keys are the prize's own: a prize without buckets (N = 1) is
// keyed exactly as before.

var (
	//go:embed lua/take.lua
	takeSrc string
	//go:embed lua/give.lua
	giveSrc string

	//go:embed lua/ledger.lua
	ledgerSrc string

	takeScript   = redis.NewScript(takeSrc)
	giveScript   = redis.NewScript(giveSrc)
	ledgerScript = redis.NewScript(ledgerSrc)
)

// BucketKeysFor returns the keys of bucket b of the n stock buckets of a session×prize:
// KeysFor's for b = 0 (whatever n is), the same names under the hash tag
// {session:prize:b:x} for 1 ≤ b < n, x chosen so that the n buckets' slots are spread
// over the cluster (placement.go). The tag depends on n, the prize's N from its stock row,
// which never changes once the row exists.
func BucketKeysFor(sessionID, prizeID int64, b, n int) Keys {
	if b == 0 {
		return KeysFor(sessionID, prizeID)
	}
	return keysTagged(bucketTag(sessionID, prizeID, b, n))
}

// Transfers is the hash of the bucket transfers this bucket took part in: transfer id ->
// units taken (source) or given (destination). It makes take and give idempotent by id,
// and lives as long as the stock key.
func (k Keys) Transfers() string { return strings.TrimSuffix(k.Meta, "meta") + "xfer" }

// HomeBucket is the one bucket of n where user's grabs of a prize are admitted:
// FNV-1a (32 bit) of the user id's bytes, mod n; 0 when n ≤ 1. Every gateway must compute
// the same bucket for a user, whatever its version, or the per-user limit (counted in the
// bucket's slot) would be counted in two places: this function never changes (its values
// are pinned by a test).
func HomeBucket(user string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(user))
	return int(h.Sum32() % uint32(n))
}

// Take is step 2 of a bucket transfer: bucket b's left and total give up min(units, left),
// recorded under transferID, and its 'sent' count grows by as much. A repeat returns what
// the first call took. It returns seckill.ErrNotLoaded when the bucket's key is absent
// (nothing taken, nothing recorded) and ErrFenced when a newer reconciler wrote the bucket.
func (g *Gate) Take(ctx context.Context, sessionID, prizeID int64, b, buckets int, transferID int64, units int, fence int64) (int, error) {
	k := BucketKeysFor(sessionID, prizeID, b, buckets)
	return g.take(ctx, "take", sessionID, prizeID, b, transferID, []string{k.Meta, k.Fence, k.Transfers()}, fence, transferID, units)
}

func (g *Gate) take(ctx context.Context, what string, sessionID, prizeID int64, b int, transferID int64, keys []string, args ...any) (int, error) {
	n, err := takeScript.Run(ctx, g.rdb, keys, args...).Int64()
	switch {
	case err != nil:
		return 0, fmt.Errorf("%s transfer %d from session %d prize %d bucket %d: %w", what, transferID, sessionID, prizeID, b, err)
	case n == -1:
		return 0, seckill.ErrNotLoaded
	case n == -2:
		return 0, fmt.Errorf("%s transfer %d from session %d prize %d bucket %d: %w", what, transferID, sessionID, prizeID, b, ErrFenced)
	}
	return int(n), nil
}

// TakeCut is Take for a stock adjustment's cut (a transfer to outside the prize): the
// units taken count as sent and received at once, since nothing is in flight. A bucket not
// loaded takes nothing and returns seckill.ErrNotLoaded, but records minVersion (the row's
// version before the cut, plus one) as its revision until expireAt, so a preheat that read
// the row before the cut's MySQL step is refused instead of loading the old total.
func (g *Gate) TakeCut(ctx context.Context, sessionID, prizeID int64, b, buckets int, transferID int64, units int, minVersion int64, expireAt time.Time, fence int64) (int, error) {
	k := BucketKeysFor(sessionID, prizeID, b, buckets)
	return g.take(ctx, "cut", sessionID, prizeID, b, transferID, []string{k.Meta, k.Fence, k.Transfers(), k.revision()},
		fence, transferID, units, "cut", minVersion, expireAt.UnixMilli())
}

// Give is step 4 of a bucket transfer: bucket b's left and total grow by units (what MySQL
// moved), its 'received' count by taken (what the source's 'sent' counted), recorded under
// transferID; version is the bucket row's version after the move, raised into the bucket's
// revision so an older row can no longer be preheated. It returns false with a nil error
// when the transfer was already given, seckill.ErrNotLoaded when the key is absent (only
// the revision is recorded) and ErrFenced for a stale fence. expireAt is the keys' expiry
// (session end plus grace), used when the bucket is not loaded.
func (g *Gate) Give(ctx context.Context, sessionID, prizeID int64, b, buckets int, transferID int64, units, taken int, version int64, expireAt time.Time, fence int64) (bool, error) {
	k := BucketKeysFor(sessionID, prizeID, b, buckets)
	n, err := giveScript.Run(ctx, g.rdb, []string{k.Meta, k.Fence, k.Transfers(), k.revision()},
		fence, transferID, units, taken, version, expireAt.UnixMilli()).Int64()
	switch {
	case err != nil:
		return false, fmt.Errorf("give transfer %d to session %d prize %d bucket %d: %w", transferID, sessionID, prizeID, b, err)
	case n == -1:
		return false, seckill.ErrNotLoaded
	case n == -2:
		return false, fmt.Errorf("give transfer %d to session %d prize %d bucket %d: %w", transferID, sessionID, prizeID, b, ErrFenced)
	}
	return n == 1, nil
}

// BucketState is one bucket's stock as Redis holds it.
type BucketState struct {
	Loaded   bool
	Left     int64
	Total    int64
	Sent     int64 // units this bucket gave up to transfers (take)
	Received int64 // units of transfers this bucket settled (give): sources' Sent
}

// InFlight is how many units the buckets' transfers took from a source and have not yet
// given to a destination: the sum of Sent minus the sum of Received. Read over all buckets
// of a prize, it is never below the units truly in flight whatever the order of the reads
// (a unit is counted in its source's Left until taken, in Sent from then on, and in the
// destination's Left from the moment Received counts it).
func InFlight(buckets []BucketState) int64 {
	var n int64
	for _, b := range buckets {
		n += b.Sent - b.Received
	}
	return n
}

// Buckets reads the n buckets of a session×prize in one pipelined round trip (one call per
// bucket: the buckets live on different slots, so the read is not one atomic snapshot).
func (g *Gate) Buckets(ctx context.Context, sessionID, prizeID int64, n int) ([]BucketState, error) {
	cmds, err := g.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for b := range n {
			ReadBucketState(ctx, p, sessionID, prizeID, b, n)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read %d buckets of session %d prize %d: %w", n, sessionID, prizeID, err)
	}
	out := make([]BucketState, n)
	for b, c := range cmds {
		out[b] = BucketStateOf(c.(*redis.SliceCmd))
	}
	return out, nil
}

// ReadBucketState queues the read of bucket b's state on a pipeline (the reconciler's
// rebalance loop reads more of each bucket in the same round trip); BucketStateOf decodes it.
func ReadBucketState(ctx context.Context, p redis.Pipeliner, sessionID, prizeID int64, b, buckets int) *redis.SliceCmd {
	return p.HMGet(ctx, BucketKeysFor(sessionID, prizeID, b, buckets).Meta, "left", "total", "sent", "received")
}

// BucketStateOf decodes a ReadBucketState reply: not loaded when the bucket has no keys.
func BucketStateOf(c *redis.SliceCmd) BucketState {
	vals := c.Val()
	if len(vals) != 4 || vals[0] == nil {
		return BucketState{}
	}
	num := func(v any) int64 {
		s, _ := v.(string)
		x, _ := strconv.ParseInt(s, 10, 64)
		return x
	}
	return BucketState{Loaded: true, Left: num(vals[0]), Total: num(vals[1]), Sent: num(vals[2]), Received: num(vals[3])}
}

// LoadBucket preheats bucket b of a session×prize from its row, as Load does for a prize:
// st carries the bucket row's left, total and version and the prize's per-user limit, ledger
// what the transfers journal says the bucket's keys record (Catalog.Ledger), written in the
// same script, so a transfer resumed after the load neither takes nor gives twice and the
// in-flight count holds.
func (g *Gate) LoadBucket(ctx context.Context, st seckill.Stock, b, buckets int, ledger seckill.BucketLedger, expireAt time.Time) (LoadResult, error) {
	k := BucketKeysFor(st.SessionID, st.PrizeID, b, buckets)
	args := make([]any, 0, 7+2*len(ledger.Transfers))
	args = append(args, st.Left, st.Total, st.PerUserLimit, expireAt.UnixMilli(), st.Version, ledger.Sent, ledger.Received)
	for id, n := range ledger.Transfers {
		args = append(args, id, n)
	}
	n, err := g.load.Run(ctx, g.rdb, []string{k.Meta, k.Reserved, k.revision(), k.Transfers()}, args...).Int64()
	if err != nil {
		return LoadResult{}, fmt.Errorf("preheat session %d prize %d bucket %d: %w", st.SessionID, st.PrizeID, b, err)
	}
	return LoadResult{PrizeID: st.PrizeID, Loaded: n == 1, Stale: n == -1}, nil
}

// RebuildBucket recreates bucket b of a session×prize after Redis lost it, as Rebuild does
// for a prize (the same script, the same refusals), from the bucket's row (st), the per-user
// counts, outcomes and returns of its orders, and its ledger of the transfers journal
// (Catalog.Ledger), all written in one step.
func (g *Gate) RebuildBucket(ctx context.Context, st seckill.Stock, b, buckets int, users map[string]int, outcomes []Settlement, returned []string,
	ledger seckill.BucketLedger, expireAt time.Time, fence int64) (bool, error) {
	return g.rebuild(ctx, BucketKeysFor(st.SessionID, st.PrizeID, b, buckets), st, users, outcomes, returned, &ledger, expireAt, fence)
}

// Demand is the key where gateways add up the grabs bucket b's admission answered admitted
// or sold_out, which the reconciler's rebalance loop reads and resets (GETDEL) each round:
// a plain integer in the bucket's slot (docs/design.md, "Demand, wanted").
func (k Keys) Demand() string { return strings.TrimSuffix(k.Meta, "meta") + "dem" }

// Wanted is the key a gateway sets, with a short TTL, when it found bucket b (a user's home)
// dry while the prize had units elsewhere: the rebalance loop gives wanted buckets more.
func (k Keys) Wanted() string { return strings.TrimSuffix(k.Meta, "meta") + "want" }

// demandTTL keeps a demand key from outliving a sale: a flush renews it, the loop deletes it.
const demandTTL = time.Minute

// BucketDemand is the demand a gateway counted for one bucket since its last flush.
type BucketDemand struct {
	SessionID, PrizeID int64
	Bucket             int
	Buckets            int // the prize's N, which names the bucket's keys (BucketKeysFor)
	Grabs              int64
}

// AddDemand adds each bucket's count to its demand key, in one pipelined round trip.
func (g *Gate) AddDemand(ctx context.Context, counts []BucketDemand) error {
	if len(counts) == 0 {
		return nil
	}
	_, err := g.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range counts {
			k := BucketKeysFor(c.SessionID, c.PrizeID, c.Bucket, c.Buckets).Demand()
			p.IncrBy(ctx, k, c.Grabs)
			p.PExpire(ctx, k, demandTTL)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("add demand of %d buckets: %w", len(counts), err)
	}
	return nil
}

// MarkWanted sets bucket b's wanted flag for ttl.
func (g *Gate) MarkWanted(ctx context.Context, sessionID, prizeID int64, b, buckets int, ttl time.Duration) error {
	if err := g.rdb.Set(ctx, BucketKeysFor(sessionID, prizeID, b, buckets).Wanted(), "1", ttl).Err(); err != nil {
		return fmt.Errorf("mark session %d prize %d bucket %d wanted: %w", sessionID, prizeID, b, err)
	}
	return nil
}

// CorrectBucketLedger sets bucket b's sent and received to the journal's (ledger, from
// Catalog.Ledger) and records its transfer ids, only if they are still what from (a Buckets
// read) holds and fence is not older than the newest that wrote the bucket. ErrMoved: a
// take or give ran since the read; seckill.ErrNotLoaded: the bucket has no keys.
func (g *Gate) CorrectBucketLedger(ctx context.Context, sessionID, prizeID int64, b, buckets int, from BucketState, ledger seckill.BucketLedger, fence int64) error {
	k := BucketKeysFor(sessionID, prizeID, b, buckets)
	args := make([]any, 0, 5+2*len(ledger.Transfers))
	args = append(args, fence, from.Sent, from.Received, ledger.Sent, ledger.Received)
	for id, n := range ledger.Transfers {
		args = append(args, id, n)
	}
	n, err := ledgerScript.Run(ctx, g.rdb, []string{k.Meta, k.Fence, k.Transfers()}, args...).Int64()
	switch {
	case err != nil:
		return fmt.Errorf("correct the ledger of session %d prize %d bucket %d: %w", sessionID, prizeID, b, err)
	case n == 0:
		return ErrMoved
	case n == -1:
		return seckill.ErrNotLoaded
	case n == -2:
		return fmt.Errorf("correct the ledger of session %d prize %d bucket %d: %w", sessionID, prizeID, b, ErrFenced)
	}
	return nil
}
