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

// Keep pushes the keys' expiry only while a reservation is pending, never creates a key,
// never shortens one, and refuses a stale fence.
func TestKeepExtendsOnlyWhilePending(t *testing.T) {
	onEachRedis(t, keepExtendsOnlyWhilePending)
}

func keepExtendsOnlyWhilePending(t *testing.T, rdb redis.UniversalClient) {
	g, rdb, ctx := newGateOn(t, rdb)
	sid := testSession(t)
	k := stock.KeysFor(sid, 1)
	t.Cleanup(func() { rdb.Del(context.Background(), k.Meta, k.Users, k.Reserved, k.Outcomes, k.Fence, k.Returned) })
	later := time.Now().Add(time.Hour)

	if kept, err := g.Keep(ctx, sid, 1, later, 1); err != nil || kept {
		t.Fatalf("keep without keys: %v %v, want nothing done", kept, err)
	}
	if n, err := rdb.Exists(ctx, k.Meta, k.Reserved).Result(); err != nil || n != 0 {
		t.Fatal("keep created a key")
	}
	soon := time.Now().Add(10 * time.Second)
	if _, err := g.Load(ctx, []seckill.Stock{{SessionID: sid, PrizeID: 1, Total: 3, Left: 3, PerUserLimit: 1}}, soon); err != nil {
		t.Fatal(err)
	}
	if kept, err := g.Keep(ctx, sid, 1, later, 1); err != nil || kept {
		t.Fatalf("keep with nothing pending: %v %v, want nothing done", kept, err)
	}
	rid := seckill.RequestID(sid, 1, "key-keep-0001")
	if v, err := g.Reserve(ctx, seckill.Grab{RequestID: rid, UserID: "u", SessionID: sid, PrizeID: 1, AdmittedAt: time.Now()}); err != nil || v.Code != stock.Admitted {
		t.Fatalf("reserve: %v %v", v, err)
	}
	if kept, err := g.Keep(ctx, sid, 1, later, 1); err != nil || !kept {
		t.Fatalf("keep with a reservation pending: %v %v, want kept", kept, err)
	}
	for _, key := range []string{k.Meta, k.Users, k.Reserved} {
		if ttl := rdb.PTTL(ctx, key).Val(); ttl < 50*time.Minute {
			t.Fatalf("%s expires in %s after keep, want about an hour", key, ttl)
		}
	}
	if kept, _ := g.Keep(ctx, sid, 1, soon, 1); kept {
		t.Fatal("keep shortened the expiry")
	}
	// The scripts that write the hashes later give them the stock key's recorded expiry.
	g.Settle(ctx, []stock.SettleBatch{{SessionID: sid, PrizeID: 1, Items: []stock.Settlement{{RequestID: rid, UserID: "u", OrderID: 7}}}})
	if ttl := rdb.PTTL(ctx, k.Outcomes).Val(); ttl < 50*time.Minute {
		t.Fatalf("outcomes expire in %s after a settle, want the kept expiry", ttl)
	}
	rdb.Set(ctx, k.Fence, 5, time.Hour)
	if _, err := g.Keep(ctx, sid, 1, later.Add(time.Hour), 4); !errors.Is(err, stock.ErrFenced) {
		t.Fatalf("keep with a stale fence: %v, want ErrFenced", err)
	}
}
