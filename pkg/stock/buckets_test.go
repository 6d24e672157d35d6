package stock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
)

// A user's home bucket must be the same on every gateway of every version: these values
// are FNV-1a 32 of the user id mod n, and must never change (the per-user limit of a prize
// with buckets depends on it). "" and "a" hash to the published FNV-1a vectors 0x811c9dc5
// and 0xe40c292c.
func TestHomeBucketIsPinned(t *testing.T) {
	for _, c := range []struct {
		user              string
		n2, n3, n8, n1000 int
	}{
		{"", 1, 1, 5, 261},
		{"a", 0, 1, 4, 220},
		{"u1", 1, 0, 3, 235},
		{"alice", 1, 2, 7, 479},
		{"bob", 0, 2, 4, 244},
		{"user-42", 1, 0, 3, 499},
		{"0123456789", 0, 0, 2, 242},
		{"用户", 1, 1, 1, 193},
	} {
		for _, w := range []struct{ n, want int }{{1, 0}, {0, 0}, {2, c.n2}, {3, c.n3}, {8, c.n8}, {1000, c.n1000}} {
			if got := stock.HomeBucket(c.user, w.n); got != w.want {
				t.Errorf("HomeBucket(%q, %d) = %d, want %d", c.user, w.n, got, w.want)
			}
		}
	}
	if 0x811c9dc5%1000 != 261 || 0xe40c292c%1000 != 220 {
		t.Fatal("the pinned values do not follow the FNV-1a test vectors")
	}
}

// The Redis Cluster agrees: one bucket's keys (the transfers hash included) share a slot,
// and the buckets of one prize land on different slots.
func TestClusterBucketKeysSlots(t *testing.T) {
	cc := stacktest.ClusterRedis(t)
	ctx := stacktest.Context(t, 10*time.Second)
	sid := testSession(t)
	slots := map[int64]int{}
	for b := range 4 {
		k := stock.BucketKeysFor(sid, 3, b, testN)
		want, err := cc.ClusterKeySlot(ctx, k.Meta).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{k.Users, k.Reserved, k.Outcomes, k.Fence, k.Returned, k.Transfers()} {
			if got, err := cc.ClusterKeySlot(ctx, key).Result(); err != nil || got != want {
				t.Errorf("CLUSTER KEYSLOT %s = %d (%v), want %d", key, got, err, want)
			}
		}
		slots[want] = b
	}
	if len(slots) != 4 {
		t.Fatalf("4 buckets on %d slots", len(slots))
	}
	// Placement on the profile's evenly split cluster: as many buckets as primaries are one
	// per primary, for many prizes (the pure property is TestBucketSlotsFallInDistinctRanges).
	shards, err := cc.ClusterShards(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	primaryOf := func(slot int64) int { // a shard is one primary and its replicas
		for i, sh := range shards {
			for _, r := range sh.Slots {
				if r.Start <= slot && slot <= r.End {
					return i
				}
			}
		}
		return -1
	}
	m := len(shards)
	for p := int64(1); p <= 20; p++ {
		on := map[int]int{}
		for b := range m {
			slot, err := cc.ClusterKeySlot(ctx, stock.BucketKeysFor(sid, p, b, m).Meta).Result()
			if err != nil {
				t.Fatal(err)
			}
			if slot != int64(stock.KeySlot(strings.TrimSuffix(strings.TrimPrefix(stock.BucketKeysFor(sid, p, b, m).Meta, "sk:{"), "}:meta"))) {
				t.Fatalf("CLUSTER KEYSLOT %d differs from stock.KeySlot", slot)
			}
			on[primaryOf(slot)]++
		}
		if len(on) != m {
			t.Fatalf("prize %d: %d buckets on primaries %v, want one on each of %d", p, m, on, m)
		}
	}
}

func loadBucket(t *testing.T, g *stock.Gate, rdb redis.UniversalClient, ctx context.Context, sid, pid int64, b, left int) {
	t.Helper()
	k := stock.BucketKeysFor(sid, pid, b, testN)
	t.Cleanup(func() {
		rdb.Del(context.Background(), k.Meta, k.Users, k.Reserved, k.Outcomes, k.Fence, k.Returned, k.Transfers(),
			strings.TrimSuffix(k.Meta, "meta")+"rev")
	})
	if b == 0 {
		res, err := g.Load(ctx, []seckill.Stock{{SessionID: sid, PrizeID: pid, Total: left, Left: left, PerUserLimit: 1}}, time.Now().Add(time.Hour))
		if err != nil || !res[0].Loaded {
			t.Fatalf("load bucket 0: %v %v", res, err)
		}
		return
	}
	// Phase 1 has no preheat of buckets ≥ 1 yet: the test writes the meta as load.lua does.
	exp := time.Now().Add(time.Hour).UnixMilli()
	if err := rdb.HSet(ctx, k.Meta, "left", left, "total", left, "limit", 1, "exp", exp, "ver", 0).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.PExpireAt(ctx, k.Meta, time.UnixMilli(exp))
}

// take and give: idempotent by transfer id, fenced like every reconciler write, and the
// in-flight count (sum of sent minus sum of received) covers the units between them.
func TestTakeAndGive(t *testing.T) { onEachRedis(t, takeAndGive) }

func takeAndGive(t *testing.T, rdb redis.UniversalClient) {
	g, rdb, ctx := newGateOn(t, rdb)
	sid := testSession(t)
	loadBucket(t, g, rdb, ctx, sid, 1, 0, 5)
	loadBucket(t, g, rdb, ctx, sid, 1, 1, 2)
	exp := time.Now().Add(time.Hour)

	taken, err := g.Take(ctx, sid, 1, 0, testN, 41, 8, 3)
	if err != nil || taken != 5 {
		t.Fatalf("take 8 of 5: %d %v, want 5", taken, err)
	}
	if again, err := g.Take(ctx, sid, 1, 0, testN, 41, 8, 3); err != nil || again != 5 {
		t.Fatalf("repeated take: %d %v, want the recorded 5", again, err)
	}
	bs, err := g.Buckets(ctx, sid, 1, testN)
	if err != nil {
		t.Fatal(err)
	}
	if bs[0].Left != 0 || bs[0].Total != 0 || bs[0].Sent != 5 || stock.InFlight(bs) != 5 {
		t.Fatalf("after take: %+v, in flight %d", bs, stock.InFlight(bs))
	}
	if _, err := g.Take(ctx, sid, 1, 0, testN, 42, 1, 2); !errors.Is(err, stock.ErrFenced) {
		t.Fatalf("take with fence 2 after 3: %v, want ErrFenced", err)
	}
	// A new holder (fence 4) repeating the take records its fence too: the old holder is
	// locked out of the bucket from then on.
	if again, err := g.Take(ctx, sid, 1, 0, testN, 41, 8, 4); err != nil || again != 5 {
		t.Fatalf("take repeated by a newer holder: %d %v", again, err)
	}
	if _, err := g.Take(ctx, sid, 1, 0, testN, 46, 1, 3); !errors.Is(err, stock.ErrFenced) {
		t.Fatalf("take with fence 3 after 4 repeated a take: %v, want ErrFenced", err)
	}
	// A dry bucket gives up nothing, and says so (no "-0" for HINCRBY to refuse).
	if none, err := g.Take(ctx, sid, 1, 0, testN, 47, 2, 4); err != nil || none != 0 {
		t.Fatalf("take from a dry bucket: %d %v, want 0", none, err)
	}
	if given, err := g.Give(ctx, sid, 1, 1, testN, 41, 5, 5, 1, exp, 4); err != nil || !given {
		t.Fatalf("give: %v %v", given, err)
	}
	if given, err := g.Give(ctx, sid, 1, 1, testN, 41, 5, 5, 1, exp, 4); err != nil || given {
		t.Fatalf("repeated give: %v %v, want already given", given, err)
	}
	if _, err := g.Give(ctx, sid, 1, 1, testN, 41, 5, 5, 1, exp, 3); !errors.Is(err, stock.ErrFenced) {
		t.Fatalf("give repeated with fence 3 after 4: %v, want ErrFenced", err)
	}
	if bs, err = g.Buckets(ctx, sid, 1, testN); err != nil {
		t.Fatal(err)
	}
	if bs[1].Left != 7 || bs[1].Total != 7 || bs[1].Received != 5 || stock.InFlight(bs) != 0 {
		t.Fatalf("after give: %+v, in flight %d", bs, stock.InFlight(bs))
	}

	// A preheat must not put taken units back: bucket 0 has left = total = 0 and nothing
	// admitted, and a newer row would otherwise overwrite it (load.lua's rule for keys whose
	// adjustment was lost).
	res, err := g.Load(ctx, []seckill.Stock{{SessionID: sid, PrizeID: 1, Total: 5, Left: 5, PerUserLimit: 1, Version: 7}}, exp)
	if err != nil || res[0].Loaded {
		t.Fatalf("preheat over a bucket that sent units: %+v %v, want kept", res, err)
	}

	// Buckets not loaded: take records nothing, give only the revision.
	k2, k3 := stock.BucketKeysFor(sid, 1, 2, testN), stock.BucketKeysFor(sid, 1, 3, testN)
	rev3 := strings.TrimSuffix(k3.Meta, "meta") + "rev"
	t.Cleanup(func() { rdb.Del(context.Background(), k2.Fence); rdb.Del(context.Background(), k3.Fence, rev3) })
	if _, err := g.Take(ctx, sid, 1, 2, testN, 44, 1, 4); !errors.Is(err, seckill.ErrNotLoaded) {
		t.Fatalf("take from an unloaded bucket: %v", err)
	}
	if n, err := rdb.Exists(ctx, k2.Meta, k2.Transfers()).Result(); err != nil || n != 0 {
		t.Fatalf("take from an unloaded bucket wrote %d keys", n)
	}
	if _, err := g.Give(ctx, sid, 1, 3, testN, 45, 1, 1, 9, exp, 4); !errors.Is(err, seckill.ErrNotLoaded) {
		t.Fatalf("give to an unloaded bucket: %v", err)
	}
	if v, _ := rdb.Get(ctx, rev3).Result(); v != "9" {
		t.Fatalf("revision %q after a give to an unloaded bucket, want 9", v)
	}
	if n, err := rdb.Exists(ctx, k3.Meta, k3.Transfers()).Result(); err != nil || n != 0 {
		t.Fatalf("give to an unloaded bucket wrote %d keys", n)
	}
}

// A cancelled order's unit goes back to the keys of the bucket that sold it: ReturnAll runs
// one script per bucket, each unit once per request id; the other buckets are untouched.
func TestReturnToTheOrdersBucket(t *testing.T) { onEachRedis(t, returnToBucket) }

func returnToBucket(t *testing.T, rdb redis.UniversalClient) {
	g, rdb, ctx := newGateOn(t, rdb)
	sid := testSession(t)
	loadBucket(t, g, rdb, ctx, sid, 1, 0, 5)
	loadBucket(t, g, rdb, ctx, sid, 1, 2, 2)
	items := []stock.UnitReturn{
		{SessionID: sid, PrizeID: 1, RequestID: seckill.RequestID(sid, 1, "r-b2"), UserID: "u2", OrderID: 7, Reason: "buyer_cancelled", Resale: true, Bucket: 2, Buckets: testN},
		{SessionID: sid, PrizeID: 1, RequestID: seckill.RequestID(sid, 1, "r-b0"), UserID: "u0", OrderID: 8, Reason: "buyer_cancelled", Resale: true},
	}
	rep, err := g.ReturnAll(ctx, items)
	if err != nil || rep.Returned != 2 || len(rep.Done) != 2 {
		t.Fatalf("return: %+v %v", rep, err)
	}
	if again, err := g.ReturnAll(ctx, items); err != nil || again.Returned != 0 || again.Already != 2 {
		t.Fatalf("return again: %+v %v, want both already done", again, err)
	}
	bs, err := g.Buckets(ctx, sid, 1, testN)
	if err != nil {
		t.Fatal(err)
	}
	if bs[0].Left != 6 || bs[1].Loaded || bs[2].Left != 3 {
		t.Fatalf("buckets after the returns: %+v, want 6 in bucket 0, 3 in bucket 2", bs)
	}
	if n, err := rdb.HExists(ctx, stock.BucketKeysFor(sid, 1, 2, testN).Returned, items[0].RequestID).Result(); err != nil || !n {
		t.Fatalf("bucket 2's returned hash lacks its unit's request id: %v %v", n, err)
	}
}

// The drift's ledger correction: compare-and-set on what was read, fenced, and the journal's
// transfer ids recorded so a give made again for one of them changes nothing.
func TestCorrectBucketLedger(t *testing.T) { onEachRedis(t, correctBucketLedger) }

func correctBucketLedger(t *testing.T, rdb redis.UniversalClient) {
	g, rdb, ctx := newGateOn(t, rdb)
	sid := testSession(t)
	loadBucket(t, g, rdb, ctx, sid, 1, 1, 4)
	k := stock.BucketKeysFor(sid, 1, 1, testN)
	if err := rdb.HSet(ctx, k.Meta, "received", 5).Err(); err != nil {
		t.Fatal(err)
	}
	journal := seckill.BucketLedger{Received: 2, Transfers: map[int64]int{61: 2}}
	if err := g.CorrectBucketLedger(ctx, sid, 1, 1, testN, stock.BucketState{Received: 3}, journal, 5); !errors.Is(err, stock.ErrMoved) {
		t.Fatalf("correct from a stale read: %v, want ErrMoved", err)
	}
	if err := g.CorrectBucketLedger(ctx, sid, 1, 1, testN, stock.BucketState{Received: 5}, journal, 5); err != nil {
		t.Fatalf("correct: %v", err)
	}
	bs, err := g.Buckets(ctx, sid, 1, testN)
	if err != nil || bs[1].Received != 2 || bs[1].Sent != 0 || bs[1].Left != 4 {
		t.Fatalf("after the correction: %+v %v, want received 2, left 4", bs, err)
	}
	if given, err := g.Give(ctx, sid, 1, 1, testN, 61, 2, 2, 1, time.Now().Add(time.Hour), 5); err != nil || given {
		t.Fatalf("give of a recorded transfer: %v %v, want nothing given", given, err)
	}
	if err := g.CorrectBucketLedger(ctx, sid, 1, 1, testN, bs[1], journal, 4); !errors.Is(err, stock.ErrFenced) {
		t.Fatalf("correct with fence 4 after 5: %v, want ErrFenced", err)
	}
	if err := g.CorrectBucketLedger(ctx, sid, 1, 3, testN, stock.BucketState{}, journal, 5); !errors.Is(err, seckill.ErrNotLoaded) {
		t.Fatalf("correct a bucket without keys: %v, want ErrNotLoaded", err)
	}
}

// PrizeSnapshots reads every bucket of every prize in one round trip and sums each prize's
// as SumSnapshots does over BucketSnapshots; a prize without buckets reads as Snapshots
// reads it, and a prize with a bucket not loaded reads as not loaded, its pending counted.
func TestPrizeSnapshots(t *testing.T) { onEachRedis(t, prizeSnapshots) }

func prizeSnapshots(t *testing.T, rdb redis.UniversalClient) {
	g, rdb, ctx := newGateOn(t, rdb)
	sid := testSession(t)
	for b, left := range []int{5, 4, 3, 2} {
		loadBucket(t, g, rdb, ctx, sid, 1, b, left)
	}
	gr := grab(sid, 1, "u1", "key-in-bucket-2")
	gr.Bucket, gr.Buckets = 2, testN
	if v, err := g.Reserve(ctx, gr); err != nil || v.Code != stock.Admitted {
		t.Fatalf("reserve in bucket 2: %+v %v", v, err)
	}
	load(t, g, rdb, ctx, sid, 2, 7, 1)
	loadBucket(t, g, rdb, ctx, sid, 3, 0, 6) // buckets 1 to 3 not loaded
	gr = grab(sid, 3, "u3", "key-in-bucket-0")
	gr.Buckets = testN
	if v, err := g.Reserve(ctx, gr); err != nil || v.Code != stock.Admitted {
		t.Fatalf("reserve in bucket 0: %+v %v", v, err)
	}
	stocks := []seckill.Stock{
		{SessionID: sid, PrizeID: 1, Buckets: testN},
		{SessionID: sid, PrizeID: 2}, // Buckets 0: one bucket, as a row not read from MySQL
		{SessionID: sid, PrizeID: 3, Buckets: testN},
		{SessionID: sid, PrizeID: 4, Buckets: 1}, // never loaded
	}

	trips := &stacktest.RoundTrips{}
	rdb.AddHook(trips)
	got, err := g.PrizeSnapshots(ctx, stocks)
	if err != nil {
		t.Fatal(err)
	}
	if n := trips.N(); n != 1 {
		t.Errorf("%d round trips, want 1", n)
	}
	if len(got) != len(stocks) {
		t.Fatalf("%d snapshots for %d prizes", len(got), len(stocks))
	}
	for i, s := range got {
		if s.SessionID != sid || s.PrizeID != stocks[i].PrizeID {
			t.Errorf("snapshot %d is of session %d prize %d, want prize %d", i, s.SessionID, s.PrizeID, stocks[i].PrizeID)
		}
	}
	if s := got[0]; !s.Loaded || s.Left != 13 || s.Total != 14 || s.Limit != 1 || s.Pending != 1 || s.TTLMillis <= 0 {
		t.Errorf("prize with every bucket loaded: %+v, want left 13 of 14, 1 pending", s)
	}
	if s := got[1]; !s.Loaded || s.Left != 7 || s.Total != 7 || s.Pending != 0 {
		t.Errorf("prize without buckets: %+v, want left 7 of 7", s)
	}
	if s := got[2]; s.Loaded || s.Left != -1 || s.Total != 0 || s.Pending != 1 || s.TTLMillis != 0 {
		t.Errorf("prize with buckets not loaded: %+v, want not loaded with 1 pending", s)
	}
	if s := got[3]; s.Loaded || s.Left != -1 {
		t.Errorf("prize never loaded: %+v, want not loaded", s)
	}

	// The same as the reads it replaces, the time to live aside (read a moment apart).
	plain, err := g.Snapshots(ctx, []seckill.SessionPrize{stocks[1].SessionPrize(), stocks[3].SessionPrize()})
	if err != nil {
		t.Fatal(err)
	}
	want := []stock.Snapshot{0: {}, 1: plain[0], 2: {}, 3: plain[1]}
	for _, i := range []int{0, 2} {
		bs, err := g.BucketSnapshots(ctx, stocks[i].SessionPrize(), testN)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = stock.SumSnapshots(bs)
	}
	for i := range got {
		got[i].TTLMillis, want[i].TTLMillis = 0, 0
		if got[i] != want[i] {
			t.Errorf("prize %d: %+v, want %+v as Snapshots or SumSnapshots(BucketSnapshots) read it", stocks[i].PrizeID, got[i], want[i])
		}
	}
	if got, err := g.PrizeSnapshots(ctx, nil); err != nil || len(got) != 0 {
		t.Errorf("no prize: %v %v, want none", got, err)
	}
}
