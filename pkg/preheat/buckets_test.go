package preheat_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/preheat"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// A bucketed prize is preheated bucket by bucket from its rows (Split of its stock), next to a
// prize without buckets loaded as before; a second preheat keeps every key.
func TestPreheatLoadsEveryBucket(t *testing.T) {
	e := newEnv(t)
	start := time.Now().UTC().Add(time.Hour).Truncate(time.Second)
	act, err := e.cat.CreateActivity(e.ctx, seckill.Activity{Name: "bucket preheat", WindowStart: start,
		WindowEnd: start.Add(10 * time.Minute), Interval: 10 * time.Minute, SessionLength: 10 * time.Minute,
		PerUserLimit: 2, Prizes: []seckill.Prize{{Name: "hot", StockPerSession: 10, Buckets: 4}, {Name: "plain", StockPerSession: 5}}})
	if err != nil {
		t.Fatal(err)
	}
	sessions, err := e.cat.Sessions(e.ctx, act.ID)
	if err != nil || len(sessions) != 1 {
		t.Fatalf("sessions %v %v", sessions, err)
	}
	sid, hot, plain := sessions[0].ID, act.Prizes[0].ID, act.Prizes[1].ID
	t.Cleanup(func() {
		for _, pat := range []string{fmt.Sprintf("sk:{%d:%d}:*", sid, hot), fmt.Sprintf("sk:{%d:%d:*}:*", sid, hot), fmt.Sprintf("sk:{%d:%d}:*", sid, plain)} {
			keys, _ := e.rdb.Keys(context.Background(), pat).Result()
			if len(keys) > 0 {
				e.rdb.Del(context.Background(), keys...)
			}
		}
	})
	p := e.preheater(e.gate)
	res, err := p.Session(e.ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Loaded, []int64{hot, plain}) || len(res.Kept) != 0 {
		t.Fatalf("first preheat: %+v, want both prizes loaded", res)
	}
	buckets, err := e.gate.Buckets(e.ctx, sid, hot, 4)
	if err != nil {
		t.Fatal(err)
	}
	for b, want := range []int64{3, 3, 2, 2} {
		got := buckets[b]
		if !got.Loaded || got.Left != want || got.Total != want || got.Sent != 0 || got.Received != 0 {
			t.Errorf("bucket %d: %+v, want %d units loaded", b, got, want)
		}
	}
	if n := stock.InFlight(buckets); n != 0 {
		t.Errorf("in flight %d after a preheat", n)
	}
	// Each bucket carries the prize-wide per-user limit.
	for b := range 4 {
		if lim, err := e.rdb.HGet(e.ctx, stock.BucketKeysFor(sid, hot, b, 4).Meta, "limit").Int(); err != nil || lim != 2 {
			t.Errorf("bucket %d limit %d %v, want 2", b, lim, err)
		}
	}
	// The prize without buckets has its one set of keys, as before buckets existed.
	if n, err := e.rdb.Exists(e.ctx, stock.BucketKeysFor(sid, plain, 1, 2).Meta).Result(); err != nil || n != 0 {
		t.Errorf("plain prize has a bucket 1 key (%d %v)", n, err)
	}
	e.check(t, sid, plain, 5, 5)

	res, err = p.Session(e.ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Loaded) != 0 || !slices.Equal(res.Kept, []int64{hot, plain}) {
		t.Fatalf("second preheat: %+v, want both kept", res)
	}
}

// movingCatalog runs moved once, right after the first read of a prize's bucket rows: a
// reconciler's step that commits between the preheat's reads.
type movingCatalog struct {
	*store.Catalog
	moved func()
}

func (c *movingCatalog) Buckets(ctx context.Context, sessionID, prizeID int64) ([]store.Bucket, error) {
	rows, err := c.Catalog.Buckets(ctx, sessionID, prizeID)
	if m := c.moved; m != nil {
		c.moved = nil
		m()
	}
	return rows, err
}

// A stock adjustment's raise whose MySQL step (the move) commits while a preheat is
// between reading a bucket's row and reading the journal's ledger: the preheat must not
// load the row from before the move with a ledger that already records the raise, or the
// reconciler's give finds the raise recorded, adds nothing, and the raised units are in
// MySQL but never for sale in Redis. Every bucket's Redis stock must end equal to its row.
func TestPreheatRacingARaiseLoadsItsUnitsOnce(t *testing.T) {
	e := newEnv(t)
	start := time.Now().UTC().Add(time.Hour).Truncate(time.Second)
	act, err := e.cat.CreateActivity(e.ctx, seckill.Activity{Name: "bucket raise race", WindowStart: start,
		WindowEnd: start.Add(10 * time.Minute), Interval: 10 * time.Minute, SessionLength: 10 * time.Minute,
		PerUserLimit: 1, Prizes: []seckill.Prize{{Name: "hot", StockPerSession: 8, Buckets: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	sessions, err := e.cat.Sessions(e.ctx, act.ID)
	if err != nil || len(sessions) != 1 {
		t.Fatalf("sessions %v %v", sessions, err)
	}
	sid, pid := sessions[0].ID, act.Prizes[0].ID
	t.Cleanup(func() {
		for _, pat := range []string{fmt.Sprintf("sk:{%d:%d}:*", sid, pid), fmt.Sprintf("sk:{%d:%d:*}:*", sid, pid)} {
			keys, _ := e.rdb.Keys(context.Background(), pat).Result()
			for _, k := range keys { // one key per call: a cluster refuses keys of two slots
				e.rdb.Del(context.Background(), k)
			}
		}
	})
	// 8 -> 10: one unit to each bucket (4 and 4 left).
	adj, err := e.cat.PlanBucketAdjustment(e.ctx, sid, pid, 10, "ann", "", "test")
	if err != nil || len(adj.Transfers) != 2 {
		t.Fatalf("plan: %+v %v", adj, err)
	}
	l := lease.New(e.db, "t-preheat-raise-"+stacktest.ID(t), time.Minute)
	held, ok, err := l.TryAcquire(e.ctx)
	if err != nil || !ok {
		t.Fatalf("lease: %v %v", ok, err)
	}
	expire := sessions[0].End.Add(time.Hour)
	versions := map[int]int64{}
	cat := &movingCatalog{Catalog: e.cat, moved: func() {
		// The reconciler's step 3 of each raise, as transferExecutor runs it.
		for _, tr := range adj.Transfers {
			_, v, err := e.cat.MoveTransfer(e.ctx, held.Fence, tr.ID, tr.Requested)
			if err != nil {
				t.Errorf("move %d: %v", tr.ID, err)
			}
			versions[tr.To] = v
		}
	}}
	if _, err := preheat.New(cat, e.gate, time.Hour, time.Now).Session(e.ctx, sid); err != nil {
		t.Fatal(err)
	}
	// Step 4, after the preheat: the give of each raise.
	for _, tr := range adj.Transfers {
		if _, err := e.gate.Give(e.ctx, sid, pid, tr.To, tr.Buckets, tr.ID, tr.Requested, 0, versions[tr.To], expire, held.Fence.Number); err != nil {
			t.Fatalf("give %d: %v", tr.ID, err)
		}
	}
	rows, err := e.cat.Buckets(e.ctx, sid, pid)
	if err != nil {
		t.Fatal(err)
	}
	redisBuckets, err := e.gate.Buckets(e.ctx, sid, pid, 2)
	if err != nil {
		t.Fatal(err)
	}
	for b, row := range rows {
		if got := redisBuckets[b]; !got.Loaded || got.Left != int64(row.Left) || got.Total != int64(row.Total) {
			t.Errorf("bucket %d: Redis %+v, MySQL row %+v: want Redis's left and total equal to the row's", b, got, row)
		}
	}
	if n := stock.InFlight(redisBuckets); n != 0 {
		t.Errorf("in flight %d", n)
	}
}
