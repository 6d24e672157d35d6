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

// cleanupAll removes every key of a prize, the returned units' included, when the test ends.
func cleanupAll(t *testing.T, rdb redis.UniversalClient, k stock.Keys) {
	t.Cleanup(func() { rdb.Del(context.Background(), k.Meta, k.Users, k.Reserved, k.Outcomes, k.Fence, k.Returned) })
}

// A cancelled order's unit goes back once: a replayed or redelivered return adds nothing,
// the outcome says cancelled (and stays so whatever a late settlement says), and the next
// grab buys the unit.
func TestReturnGivesTheUnitBackOnce(t *testing.T) { onEachRedis(t, returnGivesTheUnitBackOnce) }

func returnGivesTheUnitBackOnce(t *testing.T, rdb redis.UniversalClient) {
	g, rdb, ctx := newGateOn(t, rdb)
	sid := testSession(t)
	load(t, g, rdb, ctx, sid, 1, 2, 1)
	k := stock.KeysFor(sid, 1)
	cleanupAll(t, rdb, k)
	alice, bob := grab(sid, 1, "alice", "key-alice-1"), grab(sid, 1, "bob", "key-bob-01")
	for _, gr := range []seckill.Grab{alice, bob} {
		if v, err := g.Reserve(ctx, gr); err != nil || v.Code != stock.Admitted {
			t.Fatalf("reserve %s: %v %v", gr.UserID, v, err)
		}
	}
	// bob's order is settled; alice's is cancelled before its settlement reached Redis.
	if _, err := g.Settle(ctx, []stock.SettleBatch{{SessionID: sid, PrizeID: 1, Items: []stock.Settlement{
		{RequestID: bob.RequestID, UserID: "bob", OrderID: 2}}}}); err != nil {
		t.Fatal(err)
	}
	if v, _ := g.Reserve(ctx, grab(sid, 1, "carol", "key-carol-1")); v.Code != stock.SoldOut {
		t.Fatalf("carol before the return: %v, want sold out", v.Code)
	}
	ret := stock.UnitReturn{RequestID: alice.RequestID, UserID: "alice", OrderID: 1, Reason: "payment_timeout", Resale: true}
	for i, want := range []stock.ReturnResult{{Loaded: true, Returned: 1}, {Loaded: true, Already: 1}} {
		got, err := g.Return(ctx, sid, 1, []stock.UnitReturn{ret})
		if err != nil || got != want {
			t.Fatalf("return #%d: %+v %v, want %+v", i+1, got, err, want)
		}
	}
	if left, _ := rdb.HGet(ctx, k.Meta, "left").Result(); left != "1" {
		t.Fatalf("left %s after the return and its replay, want 1", left)
	}
	if n, err := rdb.HLen(ctx, k.Reserved).Result(); err != nil || n != 0 {
		t.Fatalf("%d reservations pending: the return settles alice's", n)
	}
	// A late settlement of alice's order as created (a redelivered grab event, the stale
	// job) does not revive it in Redis.
	if _, err := g.Settle(ctx, []stock.SettleBatch{{SessionID: sid, PrizeID: 1, Items: []stock.Settlement{
		{RequestID: alice.RequestID, UserID: "alice", OrderID: 1}}}}); err != nil {
		t.Fatal(err)
	}
	l, err := g.Lookup(ctx, alice.RequestID)
	if err != nil || l.Owner != "alice" || l.Status != (stock.Status{State: "cancelled", OrderID: 1, Reason: "payment_timeout"}) {
		t.Fatalf("alice's status: %+v %v", l, err)
	}
	if v, _ := g.Reserve(ctx, alice); v.Code != stock.Seen || v.State.State != "cancelled" {
		t.Fatalf("alice repeating her key: %+v, want seen cancelled", v)
	}
	// The activity does not let alice grab again: her admission still counts.
	if v, _ := g.Reserve(ctx, grab(sid, 1, "alice", "key-alice-2")); v.Code != stock.Limit {
		t.Fatalf("alice grabbing again: %v, want limit", v.Code)
	}
	// carol buys the returned unit; then it is gone again.
	if v, _ := g.Reserve(ctx, grab(sid, 1, "carol", "key-carol-1")); v.Code != stock.Admitted {
		t.Fatalf("carol after the return: %v, want admitted", v.Code)
	}
	if v, _ := g.Reserve(ctx, grab(sid, 1, "dave", "key-dave-01")); v.Code != stock.SoldOut {
		t.Fatalf("dave: %v, want sold out (the unit was resold once)", v.Code)
	}
}

func TestReturnReleasesTheSlotWhenRegrabIsAllowed(t *testing.T) {
	onEachRedis(t, returnReleasesTheSlot)
}

func returnReleasesTheSlot(t *testing.T, rdb redis.UniversalClient) {
	g, rdb, ctx := newGateOn(t, rdb)
	sid := testSession(t)
	load(t, g, rdb, ctx, sid, 1, 5, 1)
	k := stock.KeysFor(sid, 1)
	cleanupAll(t, rdb, k)
	alice := grab(sid, 1, "alice", "key-alice-1")
	if v, _ := g.Reserve(ctx, alice); v.Code != stock.Admitted {
		t.Fatal(v.Code)
	}
	ret := stock.UnitReturn{RequestID: alice.RequestID, UserID: "alice", OrderID: 1, Reason: "buyer_cancelled", Resale: true, ReleaseSlot: true}
	for range 2 {
		if _, err := g.Return(ctx, sid, 1, []stock.UnitReturn{ret}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := rdb.HGet(ctx, k.Users, "alice").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("alice's count %q %v after the released return (twice), want none", n, err)
	}
	if v, _ := g.Reserve(ctx, grab(sid, 1, "alice", "key-alice-2")); v.Code != stock.Admitted {
		t.Fatalf("alice grabbing again: %v, want admitted", v.Code)
	}
	if v, _ := g.Reserve(ctx, grab(sid, 1, "alice", "key-alice-3")); v.Code != stock.Limit {
		t.Fatalf("alice a third time: %v, want limit", v.Code)
	}
}

// Without the stock key nothing is written (no key is created: the rebuild's business); a
// return after the session is an outcome only, with no unit for resale.
func TestReturnWithoutKeysAndAfterTheSession(t *testing.T) {
	onEachRedis(t, returnWithoutKeysAndAfterTheSession)
}

func returnWithoutKeysAndAfterTheSession(t *testing.T, rdb redis.UniversalClient) {
	g, rdb, ctx := newGateOn(t, rdb)
	sid := testSession(t)
	k := stock.KeysFor(sid, 1)
	cleanupAll(t, rdb, k)
	rid := seckill.RequestID(sid, 1, "key-alice-1")
	got, err := g.Return(ctx, sid, 1, []stock.UnitReturn{{RequestID: rid, UserID: "alice", OrderID: 1, Reason: "buyer_cancelled", Resale: true}})
	if err != nil || got != (stock.ReturnResult{}) {
		t.Fatalf("return without keys: %+v %v, want not loaded", got, err)
	}
	if n, err := rdb.Exists(ctx, k.Meta, k.Users, k.Reserved, k.Outcomes, k.Returned).Result(); err != nil || n != 0 {
		t.Fatalf("a return without keys created %d keys", n)
	}
	load(t, g, rdb, ctx, sid, 1, 3, 1)
	got, err = g.Return(ctx, sid, 1, []stock.UnitReturn{{RequestID: rid, UserID: "alice", OrderID: 1, Reason: "buyer_cancelled"}})
	if err != nil || got != (stock.ReturnResult{Loaded: true, Marked: 1}) {
		t.Fatalf("return after the session: %+v %v", got, err)
	}
	if left, _ := rdb.HGet(ctx, k.Meta, "left").Result(); left != "3" {
		t.Fatalf("left %s: a unit returned after the session is not for sale", left)
	}
	if l, _ := g.Lookup(ctx, rid); l.Status.State != "cancelled" {
		t.Fatalf("status %+v, want cancelled", l.Status)
	}
}

// The drift check's view counts the returns, and a correction is refused when a return
// happened after the view was read, even if left came back to the same value (a return
// and an admission in between).
func TestCorrectionRefusedWhenAReturnMovedTheView(t *testing.T) {
	onEachRedis(t, correctionRefusedWhenAReturnMoved)
}

func correctionRefusedWhenAReturnMoved(t *testing.T, rdb redis.UniversalClient) {
	g, rdb, ctx := newGateOn(t, rdb)
	sid := testSession(t)
	load(t, g, rdb, ctx, sid, 1, 2, 1)
	k := stock.KeysFor(sid, 1)
	cleanupAll(t, rdb, k)
	alice := grab(sid, 1, "alice", "key-alice-1")
	g.Reserve(ctx, alice)
	v, err := g.View(ctx, sid, 1)
	if err != nil || v.Left != 1 || v.Returned != 0 {
		t.Fatalf("view %+v %v", v, err)
	}
	if _, err := g.Return(ctx, sid, 1, []stock.UnitReturn{{RequestID: alice.RequestID, UserID: "alice", OrderID: 1, Reason: "buyer_cancelled", Resale: true}}); err != nil {
		t.Fatal(err)
	}
	g.Reserve(ctx, grab(sid, 1, "bob", "key-bob-01")) // left is 1 again
	if err := g.CorrectLeft(ctx, sid, 1, v, 2, 1); !errors.Is(err, stock.ErrMoved) {
		t.Fatalf("correction after a return: %v, want ErrMoved", err)
	}
	v, _ = g.View(ctx, sid, 1)
	if v.Returned != 1 {
		t.Fatalf("view %+v, want one return", v)
	}
	if err := g.CorrectLeft(ctx, sid, 1, v, 0, 1); err != nil {
		t.Fatalf("correction from the fresh view: %v", err)
	}
}

// A rebuild records the returns it copies from MySQL, so a return replayed afterwards adds
// nothing: the unit is counted once, in the rebuilt left.
func TestRebuildCountsReturnedUnitsOnce(t *testing.T) { onEachRedis(t, rebuildCountsReturnsOnce) }

func rebuildCountsReturnsOnce(t *testing.T, rdb redis.UniversalClient) {
	g, rdb, ctx := newGateOn(t, rdb)
	sid := testSession(t)
	k := stock.KeysFor(sid, 1)
	cleanupAll(t, rdb, k)
	rid := seckill.RequestID(sid, 1, "key-alice-1")
	st := seckill.Stock{SessionID: sid, PrizeID: 1, Total: 2, Left: 1, PerUserLimit: 1} // alice's unit is back in left
	outcomes := []stock.Settlement{
		{RequestID: rid, UserID: "alice", OrderID: 1, Reason: "payment_timeout", Cancelled: true},
		{RequestID: seckill.RequestID(sid, 1, "key-bob-01"), UserID: "bob", OrderID: 2},
	}
	if created, err := g.Rebuild(ctx, st, map[string]int{"bob": 1}, outcomes, []string{rid}, time.Now().Add(time.Hour), 1); err != nil || !created {
		t.Fatalf("rebuild: %v %v", created, err)
	}
	got, err := g.Return(ctx, sid, 1, []stock.UnitReturn{{RequestID: rid, UserID: "alice", OrderID: 1, Reason: "payment_timeout", Resale: true}})
	if err != nil || got != (stock.ReturnResult{Loaded: true, Already: 1}) {
		t.Fatalf("return after the rebuild: %+v %v", got, err)
	}
	if left, _ := rdb.HGet(ctx, k.Meta, "left").Result(); left != "1" {
		t.Fatalf("left %s, want 1", left)
	}
	if l, _ := g.Lookup(ctx, rid); l.Status.State != "cancelled" || l.Status.Reason != "payment_timeout" {
		t.Fatalf("alice's rebuilt status %+v", l.Status)
	}
	if v, _ := g.View(ctx, sid, 1); v.Returned != 1 {
		t.Fatalf("view %+v, want the rebuilt return counted", v)
	}
	if err := g.Remove(ctx, sid, 1, 1); err != nil {
		t.Fatal(err)
	}
	if n, err := rdb.Exists(ctx, k.Returned).Result(); err != nil || n != 0 {
		t.Fatal("remove left the returns behind")
	}
}
