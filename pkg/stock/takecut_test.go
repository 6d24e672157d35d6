package stock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
)

// A stock adjustment's cut (docs/design.md): TakeCut takes at most what is left and counts
// it as sent and received (nothing in flight), a repeat answers the recorded units, a stale
// fence is refused, a preheat never overwrites the cut bucket; on a bucket not loaded it
// takes nothing but records a revision that refuses a preheat of the row before the cut.
func TestTakeCut(t *testing.T) { onEachRedis(t, takeCut) }

func takeCut(t *testing.T, rdb redis.UniversalClient) {
	g, rdb, ctx := newGateOn(t, rdb)
	sid := testSession(t)
	loadBucket(t, g, rdb, ctx, sid, 1, 1, 3)
	exp := time.Now().Add(time.Hour)

	if n, err := g.TakeCut(ctx, sid, 1, 1, testN, 51, 5, 1, exp, 3); err != nil || n != 3 {
		t.Fatalf("cut 5 of 3: %d %v, want 3", n, err)
	}
	if n, err := g.TakeCut(ctx, sid, 1, 1, testN, 51, 5, 1, exp, 3); err != nil || n != 3 {
		t.Fatalf("repeated cut: %d %v, want the recorded 3", n, err)
	}
	if _, err := g.TakeCut(ctx, sid, 1, 1, testN, 52, 1, 1, exp, 2); !errors.Is(err, stock.ErrFenced) {
		t.Fatalf("cut with fence 2 after 3: %v, want ErrFenced", err)
	}
	bs, err := g.Buckets(ctx, sid, 1, testN)
	if err != nil {
		t.Fatal(err)
	}
	if b := bs[1]; b.Left != 0 || b.Total != 0 || b.Sent != 3 || b.Received != 3 || stock.InFlight(bs) != 0 {
		t.Fatalf("after the cut: %+v, in flight %d", b, stock.InFlight(bs))
	}
	row := seckill.Stock{SessionID: sid, PrizeID: 1, Total: 3, Left: 3, PerUserLimit: 1, Version: 5}
	if r, err := g.LoadBucket(ctx, row, 1, testN, seckill.BucketLedger{}, exp); err != nil || r.Loaded {
		t.Fatalf("preheat over the cut bucket: %+v %v, want kept", r, err)
	}

	// Bucket 2 is not loaded: nothing taken, the row's next version becomes its revision.
	loadBucket(t, g, rdb, ctx, sid, 1, 2, 1) // registers the cleanup of bucket 2's keys
	if err := rdb.Del(ctx, stock.BucketKeysFor(sid, 1, 2, testN).Meta).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := g.TakeCut(ctx, sid, 1, 2, testN, 53, 2, 8, exp, 3); !errors.Is(err, seckill.ErrNotLoaded) {
		t.Fatalf("cut of a bucket not loaded: %v, want ErrNotLoaded", err)
	}
	row.Version = 7 // the row before the cut
	if r, err := g.LoadBucket(ctx, row, 2, testN, seckill.BucketLedger{}, exp); err != nil || !r.Stale {
		t.Fatalf("preheat of the row before the cut: %+v %v, want stale", r, err)
	}
	row.Version, row.Total, row.Left = 8, 1, 1 // after it
	if r, err := g.LoadBucket(ctx, row, 2, testN, seckill.BucketLedger{Sent: 2, Received: 2, Transfers: map[int64]int{53: 2}}, exp); err != nil || !r.Loaded {
		t.Fatalf("preheat of the row after the cut: %+v %v, want loaded", r, err)
	}
	if n, err := g.TakeCut(ctx, sid, 1, 2, testN, 53, 2, 8, exp, 3); err != nil || n != 2 {
		t.Fatalf("the cut repeated after the load: %d %v, want the journal's 2", n, err)
	}
	if bs, err = g.Buckets(ctx, sid, 1, testN); err != nil || bs[2].Left != 1 || stock.InFlight(bs) != 0 {
		t.Fatalf("bucket 2 after the load: %+v %v", bs, err)
	}
}
