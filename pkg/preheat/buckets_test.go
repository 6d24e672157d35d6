package preheat_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
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
