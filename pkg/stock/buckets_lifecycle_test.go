package stock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
)

// A bucket's keys are kept while a reservation is pending there, its transfers hash with
// them, and removed afterwards with its transfers, demand and wanted keys; the prize's
// other buckets are left alone.
func TestBucketKeepAndRemove(t *testing.T) {
	onEachRedis(t, bucketKeepAndRemove)
}

func bucketKeepAndRemove(t *testing.T, rdb redis.UniversalClient) {
	g, rdb, ctx := newGateOn(t, rdb)
	sid := testSession(t)
	k, k0 := stock.BucketKeysFor(sid, 1, 2, testN), stock.BucketKeysFor(sid, 1, 0, testN)
	all := []string{k.Meta, k.Users, k.Reserved, k.Outcomes, k.Fence, k.Returned, k.Transfers(), k.Demand(), k.Wanted()}
	t.Cleanup(func() {
		for _, key := range append(all, k0.Meta, k0.Reserved) {
			rdb.Del(context.Background(), key)
		}
	})
	soon := time.Now().Add(10 * time.Second)
	st := seckill.Stock{SessionID: sid, PrizeID: 1, Total: 3, Left: 3, PerUserLimit: 1}
	for _, b := range []int{0, 2} {
		ledger := seckill.BucketLedger{}
		if b == 2 {
			ledger = seckill.BucketLedger{Received: 1, Transfers: map[int64]int{9: 1}}
		}
		if _, err := g.LoadBucket(ctx, st, b, testN, ledger, soon); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.AddDemand(ctx, []stock.BucketDemand{{SessionID: sid, PrizeID: 1, Bucket: 2, Buckets: testN, Grabs: 4}}); err != nil {
		t.Fatal(err)
	}
	if err := g.MarkWanted(ctx, sid, 1, 2, testN, time.Minute); err != nil {
		t.Fatal(err)
	}
	gr := seckill.Grab{RequestID: seckill.RequestID(sid, 1, "bucket-key-01"), UserID: "u", SessionID: sid, PrizeID: 1, Bucket: 2, Buckets: testN, AdmittedAt: time.Now()}
	if v, err := g.Reserve(ctx, gr); err != nil || v.Code != stock.Admitted {
		t.Fatalf("reserve: %v %v", v, err)
	}
	if err := g.RemoveBucket(ctx, sid, 1, 2, testN, 1); !errors.Is(err, stock.ErrPending) {
		t.Fatalf("remove with a reservation pending: %v", err)
	}
	later := time.Now().Add(time.Hour)
	if kept, err := g.KeepBucket(ctx, sid, 1, 2, testN, later, 1); err != nil || !kept {
		t.Fatalf("keep: %v %v", kept, err)
	}
	if ttl := rdb.PTTL(ctx, k.Transfers()).Val(); ttl < 30*time.Minute {
		t.Fatalf("transfers hash ttl %s after keep, want about an hour", ttl)
	}
	// The reservation settles (the consumer's bucket-aware settle clears it there).
	rdb.HDel(ctx, k.Reserved, gr.RequestID)
	if err := g.RemoveBucket(ctx, sid, 1, 2, testN, 1); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{k.Meta, k.Users, k.Outcomes, k.Returned, k.Transfers(), k.Demand(), k.Wanted()} {
		if n := rdb.Exists(ctx, key).Val(); n != 0 {
			t.Errorf("%s left after remove", key)
		}
	}
	if n := rdb.Exists(ctx, k0.Meta).Val(); n != 1 {
		t.Error("bucket 0 removed with bucket 2")
	}
}
