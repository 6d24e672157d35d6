package stock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
)

// testIDs returns a session id no other test run uses, so keys never collide.
func testSession(t *testing.T) int64 {
	t.Helper()
	var n int64
	fmt.Sscanf(stacktest.ID(t)[:10], "%x", &n)
	return n
}

func newGate(t *testing.T, opts ...stock.Option) (*stock.Gate, redis.UniversalClient, context.Context) {
	t.Helper()
	return newGateOn(t, stacktest.Redis(t), opts...)
}

func newGateOn(t *testing.T, rdb redis.UniversalClient, opts ...stock.Option) (*stock.Gate, redis.UniversalClient, context.Context) {
	t.Helper()
	ctx := stacktest.Context(t, 60*time.Second)
	g, err := stock.NewGate(ctx, rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return g, rdb, ctx
}

func load(t *testing.T, g *stock.Gate, rdb redis.UniversalClient, ctx context.Context, sid, pid int64, left, limit int) {
	t.Helper()
	res, err := g.Load(ctx, []seckill.Stock{{SessionID: sid, PrizeID: pid, Total: left, Left: left, PerUserLimit: limit}},
		time.Now().Add(time.Hour))
	if err != nil || len(res) != 1 || !res[0].Loaded {
		t.Fatalf("load: %v %v", res, err)
	}
	k := stock.KeysFor(sid, pid)
	t.Cleanup(func() { rdb.Del(context.Background(), k.Meta, k.Users, k.Reserved, k.Outcomes) })
}

// onEachRedis runs test on the stack's Redis ("stack") and on the cluster profile's Redis
// Cluster ("cluster": skipped when it is not up, unless SECKILL_CLUSTER=1), where every
// key of a call must share a slot and any CROSSSLOT error fails the test.
func onEachRedis(t *testing.T, test func(t *testing.T, rdb redis.UniversalClient)) {
	t.Run("stack", func(t *testing.T) { test(t, stacktest.Redis(t)) })
	t.Run("cluster", func(t *testing.T) { test(t, stacktest.ClusterRedis(t)) })
}

func grab(sid, pid int64, user, key string) seckill.Grab {
	return seckill.Grab{RequestID: seckill.RequestID(sid, pid, key), UserID: user, SessionID: sid, PrizeID: pid, AdmittedAt: time.Now()}
}

func TestReserveVerdicts(t *testing.T) { onEachRedis(t, reserveVerdicts) }

func reserveVerdicts(t *testing.T, rdb redis.UniversalClient) {
	g, rdb, ctx := newGateOn(t, rdb)
	sid := testSession(t)
	load(t, g, rdb, ctx, sid, 1, 2, 1) // stock 2, one per user

	steps := []struct {
		name     string
		grab     seckill.Grab
		want     stock.Code
		wantLeft int64
	}{
		{"first grab admitted", grab(sid, 1, "alice", "key-alice-1"), stock.Admitted, 1},
		{"same key again: first verdict, nothing deducted", grab(sid, 1, "alice", "key-alice-1"), stock.Seen, 1},
		{"same key from another user: refused", grab(sid, 1, "bob", "key-alice-1"), stock.Foreign, 1},
		{"new key, same user: limit before stock", grab(sid, 1, "alice", "key-alice-2"), stock.Limit, 1},
		{"last unit: sold == total", grab(sid, 1, "bob", "key-bob-0001"), stock.Admitted, 0},
		{"after the last unit: sold out", grab(sid, 1, "carol", "key-carol-01"), stock.SoldOut, 0},
		{"limit is still checked before stock", grab(sid, 1, "bob", "key-bob-0002"), stock.Limit, 0},
		{"unknown prize: not loaded", grab(sid, 2, "alice", "key-alice-3"), stock.NotLoaded, -1},
	}
	for _, s := range steps {
		v, err := g.Reserve(ctx, s.grab)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if v.Code != s.want || v.Left != s.wantLeft {
			t.Fatalf("%s: got %s left %d, want %s left %d", s.name, v.Code, v.Left, s.want, s.wantLeft)
		}
	}
	// The script never creates a missing stock key.
	if n, err := rdb.Exists(ctx, stock.KeysFor(sid, 2).Meta).Result(); err != nil || n != 0 {
		t.Fatal("reserve created a stock key for an unloaded prize")
	}
	l, err := g.Lookup(ctx, seckill.RequestID(sid, 1, "key-bob-0001"))
	if err != nil || !l.Found || !l.Live || l.Owner != "bob" || l.Status.State != "queued" {
		t.Fatalf("lookup: %+v %v", l, err)
	}
	snaps, err := g.Snapshots(ctx, []seckill.SessionPrize{{Session: sid, Prize: 1}, {Session: sid, Prize: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if s := snaps[0]; !s.Loaded || s.Left != 0 || s.Total != 2 || s.Pending != 2 || s.TTLMillis <= 0 {
		t.Fatalf("snapshot %+v", s)
	}
	if snaps[1].Loaded {
		t.Fatalf("unloaded prize reported loaded: %+v", snaps[1])
	}
}

// 500 concurrent grabs on stock 100: exactly 100 admitted and stock never below zero,
// one EVALSHA per call and with concurrent calls coalesced into pipelines.
func TestReserveConcurrentExactlyStock(t *testing.T) {
	onEachRedis(t, func(t *testing.T, rdb redis.UniversalClient) {
		t.Run("one round trip each", func(t *testing.T) { concurrentExactlyStock(t, rdb) })
		t.Run("coalesced", func(t *testing.T) { concurrentExactlyStock(t, rdb, stock.WithCoalescing(32, 4)) })
	})
}

func concurrentExactlyStock(t *testing.T, rdb redis.UniversalClient, opts ...stock.Option) {
	g, rdb, ctx := newGateOn(t, rdb, opts...)
	sid := testSession(t)
	load(t, g, rdb, ctx, sid, 7, 100, 1)
	var admitted, soldOut atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 500)
	for i := range 500 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := g.Reserve(ctx, grab(sid, 7, fmt.Sprintf("user-%d", i), fmt.Sprintf("key-%08d", i)))
			if err != nil {
				errs <- err
				return
			}
			switch v.Code {
			case stock.Admitted:
				admitted.Add(1)
				if v.Left < 0 {
					errs <- fmt.Errorf("left %d after admission", v.Left)
				}
			case stock.SoldOut:
				soldOut.Add(1)
			default:
				errs <- fmt.Errorf("unexpected verdict %s", v.Code)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if admitted.Load() != 100 || soldOut.Load() != 400 {
		t.Fatalf("admitted %d, sold out %d; want 100 and 400", admitted.Load(), soldOut.Load())
	}
	k := stock.KeysFor(sid, 7)
	if left, _ := rdb.HGet(ctx, k.Meta, "left").Int(); left != 0 {
		t.Fatalf("left = %d, want 0", left)
	}
	if n, err := rdb.HLen(ctx, k.Reserved).Result(); err != nil || n != 100 {
		t.Fatalf("%d reservations, want 100", n)
	}
}

func TestPreheatIdempotentAndNeverOverwrites(t *testing.T) {
	onEachRedis(t, preheatIdempotentAndNeverOverwrites)
}

func preheatIdempotentAndNeverOverwrites(t *testing.T, rdb redis.UniversalClient) {
	g, rdb, ctx := newGateOn(t, rdb)
	sid := testSession(t)
	k := stock.KeysFor(sid, 3)
	t.Cleanup(func() { rdb.Del(context.Background(), k.Meta, k.Users, k.Reserved) })
	sessionEnd := time.Now().Add(30 * time.Minute)
	expire := sessionEnd.Add(time.Hour)
	st := []seckill.Stock{{SessionID: sid, PrizeID: 3, Total: 10, Left: 10, PerUserLimit: 1}}

	// Two instances preheat at once: exactly one creates the key.
	var loaded atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := g.Load(ctx, st, expire)
			if err != nil {
				t.Error(err)
				return
			}
			if res[0].Loaded {
				loaded.Add(1)
			}
		}()
	}
	wg.Wait()
	if loaded.Load() != 1 {
		t.Fatalf("%d concurrent preheats loaded the key, want 1", loaded.Load())
	}
	ttl, _ := rdb.PTTL(ctx, k.Meta).Result()
	if time.Now().Add(ttl).Before(sessionEnd) {
		t.Fatalf("TTL %s ends before the session", ttl)
	}

	// A live key with an admission is not overwritten by another preheat.
	if v, err := g.Reserve(ctx, grab(sid, 3, "u1", "key-u1-0001")); err != nil || v.Code != stock.Admitted {
		t.Fatalf("reserve: %v %v", v, err)
	}
	res, err := g.Load(ctx, st, expire)
	if err != nil || res[0].Loaded {
		t.Fatalf("second preheat: %v %v", res, err)
	}
	if left, _ := rdb.HGet(ctx, k.Meta, "left").Int(); left != 9 {
		t.Fatalf("left = %d after re-preheat, want 9 (kept)", left)
	}
	// The script cache lost (as after a Redis restart): preheat still works.
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Load(ctx, st, expire); err != nil {
		t.Fatalf("preheat after SCRIPT FLUSH: %v", err)
	}
	if _, err := g.Reserve(ctx, grab(sid, 3, "u2", "key-u2-0001")); err != nil {
		t.Fatalf("reserve after SCRIPT FLUSH: %v", err)
	}
}

func TestAdjustBeforeOpen(t *testing.T) { onEachRedis(t, adjustBeforeOpen) }

func adjustBeforeOpen(t *testing.T, rdb redis.UniversalClient) {
	g, rdb, ctx := newGateOn(t, rdb)
	sid := testSession(t)
	load(t, g, rdb, ctx, sid, 4, 5, 1)
	exp := time.Now().Add(time.Hour)
	t.Cleanup(func() {
		// One DEL per prize: the two keys are in different cluster slots.
		rdb.Del(context.Background(), fmt.Sprintf("sk:{%d:4}:rev", sid))
		rdb.Del(context.Background(), fmt.Sprintf("sk:{%d:99}:rev", sid))
	})
	if loaded, err := g.Adjust(ctx, seckill.Stock{SessionID: sid, PrizeID: 4, Total: 8, Version: 1}, exp); err != nil || !loaded {
		t.Fatalf("adjust: %v %v", loaded, err)
	}
	if left, _ := rdb.HGet(ctx, stock.KeysFor(sid, 4).Meta, "left").Int(); left != 8 {
		t.Fatalf("left = %d, want 8", left)
	}
	if _, err := g.Reserve(ctx, grab(sid, 4, "u1", "key-u1-0001")); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Adjust(ctx, seckill.Stock{SessionID: sid, PrizeID: 4, Total: 3, Version: 2}, exp); !errors.Is(err, stock.ErrAdmitted) {
		t.Fatalf("adjust after an admission: %v, want ErrAdmitted", err)
	}
	if loaded, err := g.Adjust(ctx, seckill.Stock{SessionID: sid, PrizeID: 99, Total: 3, Version: 1}, exp); err != nil || loaded {
		t.Fatalf("adjust of an unloaded prize: %v %v", loaded, err)
	}
}

// ReserveAll judges a batch in its order, each grab exactly as Reserve would one after the
// other: a user's second grab hits the limit, the stock runs out, a repeat is seen.
func TestReserveAllJudgesInOrder(t *testing.T) {
	g, rdb, ctx := newGate(t)
	sid := testSession(t)
	load(t, g, rdb, ctx, sid, 1, 2, 1) // stock 2, one per user
	grabs := []seckill.Grab{grab(sid, 1, "alice", "key-alice-1"), grab(sid, 1, "alice", "key-alice-2"),
		grab(sid, 1, "bob", "key-bob-0001"), grab(sid, 1, "carol", "key-carol-01"), grab(sid, 1, "alice", "key-alice-1")}
	vs, err := g.ReserveAll(ctx, grabs)
	if err != nil {
		t.Fatal(err)
	}
	want := []stock.Code{stock.Admitted, stock.Limit, stock.Admitted, stock.SoldOut, stock.Seen}
	for i, v := range vs {
		if v.Code != want[i] {
			t.Errorf("grab %d (%s of %s): %s, want %s", i, grabs[i].RequestID, grabs[i].UserID, v.Code, want[i])
		}
	}
	if _, err := g.ReserveAll(ctx, []seckill.Grab{grab(sid, 1, "a", "key-a-000001"), grab(sid, 2, "b", "key-b-000001")}); err == nil {
		t.Error("a batch over two prizes was accepted")
	}
}
