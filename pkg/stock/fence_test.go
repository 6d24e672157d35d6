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

// Every write the reconciler makes carries its lease's fencing number; once a newer
// reconciler wrote a session×prize, an older one's correct, rebuild and remove are refused.
func TestReconcilerWritesRefuseStaleFence(t *testing.T) {
	onEachRedis(t, reconcilerWritesRefuseStaleFence)
}

func reconcilerWritesRefuseStaleFence(t *testing.T, rdb redis.UniversalClient) {
	g, rdb, ctx := newGateOn(t, rdb)
	sid := testSession(t)
	k := stock.KeysFor(sid, 1)
	t.Cleanup(func() { rdb.Del(context.Background(), k.Meta, k.Users, k.Reserved, k.Outcomes, k.Fence) })
	st := seckill.Stock{SessionID: sid, PrizeID: 1, Total: 10, Left: 10, PerUserLimit: 1}
	exp := time.Now().Add(time.Hour)

	if created, err := g.Rebuild(ctx, st, nil, nil, nil, exp, 5); err != nil || !created {
		t.Fatalf("rebuild with fence 5: %v %v", created, err)
	}
	if err := g.CorrectLeft(ctx, sid, 1, stock.View{Left: 10}, 9, 4); !errors.Is(err, stock.ErrFenced) {
		t.Fatalf("correct with older fence 4: %v, want ErrFenced", err)
	}
	if left, _ := rdb.HGet(ctx, k.Meta, "left").Result(); left != "10" {
		t.Fatalf("left %s after a refused correction", left)
	}
	if err := g.CorrectLeft(ctx, sid, 1, stock.View{Left: 10}, 9, 6); err != nil {
		t.Fatalf("correct with newer fence 6: %v", err)
	}
	if err := g.Remove(ctx, sid, 1, 5); !errors.Is(err, stock.ErrFenced) {
		t.Fatalf("remove with fence 5 after 6 wrote: %v, want ErrFenced", err)
	}
	if n, err := rdb.Exists(ctx, k.Meta).Result(); err != nil || n != 1 {
		t.Fatal("a refused remove deleted the keys")
	}
	rdb.Del(ctx, k.Meta)
	if _, err := g.Rebuild(ctx, st, map[string]int{"u": 1}, nil, nil, exp, 5); !errors.Is(err, stock.ErrFenced) {
		t.Fatalf("rebuild with fence 5 after 6 wrote: %v, want ErrFenced", err)
	}
	if n, err := rdb.Exists(ctx, k.Meta, k.Users).Result(); err != nil || n != 0 {
		t.Fatal("a refused rebuild wrote keys")
	}
}

// Rebuild writes nothing at all, not even per-user counts or outcomes, when the stock key
// exists: a rebuild racing a preheat or another rebuild cannot mix stale counts into live
// keys.
func TestRebuildWritesNothingWhenStockKeyExists(t *testing.T) {
	onEachRedis(t, rebuildWritesNothingWhenStockKeyExists)
}

func rebuildWritesNothingWhenStockKeyExists(t *testing.T, rdb redis.UniversalClient) {
	g, rdb, ctx := newGateOn(t, rdb)
	sid := testSession(t)
	load(t, g, rdb, ctx, sid, 1, 5, 1)
	k := stock.KeysFor(sid, 1)
	t.Cleanup(func() { rdb.Del(context.Background(), k.Fence) })
	st := seckill.Stock{SessionID: sid, PrizeID: 1, Total: 5, Left: 2, PerUserLimit: 1}
	created, err := g.Rebuild(ctx, st, map[string]int{"stale-user": 1},
		[]stock.Settlement{{RequestID: seckill.RequestID(sid, 1, "k1"), UserID: "stale-user", OrderID: 7}}, nil, time.Now().Add(time.Hour), 1)
	if err != nil || created {
		t.Fatalf("rebuild over a live key: created=%v err=%v", created, err)
	}
	if n, err := rdb.Exists(ctx, k.Users, k.Outcomes).Result(); err != nil || n != 0 {
		t.Fatalf("rebuild over a live key wrote %d per-user/outcome keys", n)
	}
	if left, _ := rdb.HGet(ctx, k.Meta, "left").Result(); left != "5" {
		t.Fatalf("left %s, want the live 5", left)
	}
}

// A rebuild of thousands of users and outcomes lands completely (chunked inside the script).
func TestRebuildLargeAndRemoveRefusesPending(t *testing.T) {
	onEachRedis(t, rebuildLargeAndRemoveRefusesPending)
}

func rebuildLargeAndRemoveRefusesPending(t *testing.T, rdb redis.UniversalClient) {
	g, rdb, ctx := newGateOn(t, rdb)
	sid := testSession(t)
	k := stock.KeysFor(sid, 1)
	t.Cleanup(func() { rdb.Del(context.Background(), k.Meta, k.Users, k.Reserved, k.Outcomes, k.Fence) })
	users := map[string]int{}
	var outs []stock.Settlement
	for i := range 5000 {
		u := "u" + string(rune('a'+i%26)) + time.Duration(i).String()
		users[u] = 1
		outs = append(outs, stock.Settlement{RequestID: seckill.RequestID(sid, 1, u), UserID: u, OrderID: int64(i + 1)})
	}
	st := seckill.Stock{SessionID: sid, PrizeID: 1, Total: 6000, Left: 1000, PerUserLimit: 1}
	if created, err := g.Rebuild(ctx, st, users, outs, nil, time.Now().Add(time.Hour), 1); err != nil || !created {
		t.Fatalf("rebuild: %v %v", created, err)
	}
	if n, _ := rdb.HLen(ctx, k.Users).Result(); n != int64(len(users)) {
		t.Fatalf("%d users rebuilt, want %d", n, len(users))
	}
	if n, _ := rdb.HLen(ctx, k.Outcomes).Result(); n != int64(len(outs)) {
		t.Fatalf("%d outcomes rebuilt, want %d", n, len(outs))
	}
	rdb.HSet(ctx, k.Reserved, seckill.RequestID(sid, 1, "pending"), "x|1")
	if err := g.Remove(ctx, sid, 1, 1); !errors.Is(err, stock.ErrPending) {
		t.Fatalf("remove with a pending reservation: %v, want ErrPending", err)
	}
	rdb.Del(ctx, k.Reserved)
	if err := g.Remove(ctx, sid, 1, 1); err != nil {
		t.Fatal(err)
	}
	if n, err := rdb.Exists(ctx, k.Meta, k.Users, k.Outcomes).Result(); err != nil || n != 0 {
		t.Fatalf("%d keys left after remove", n)
	}
}
