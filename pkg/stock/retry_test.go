package stock_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-pipeline/seckill/internal/harness"
	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/stock"
)

// go-redis retries a command whose reply timed out, EVALSHA included. The admission script
// is idempotent on the request id, so the retry returns the first verdict and the stock is
// deducted exactly once.
func TestLostReplyRetryDoesNotDoubleDeduct(t *testing.T) {
	t.Run("one round trip each", func(t *testing.T) { lostReply(t) })
	t.Run("coalesced pipeline", func(t *testing.T) { lostReply(t, stock.WithCoalescing(32, 2)) })
}

func lostReply(t *testing.T, opts ...stock.Option) {
	direct := stacktest.Redis(t)
	proxy, err := harness.NewProxy(stacktest.SingleRedisAddr(t), 1, 0, 600*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	// The stack's user and TLS (the secure profile's), through the proxy.
	o := stacktest.RedisOptions(t, proxy.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), Username: o.Username, Password: o.Password, TLSConfig: o.TLS,
		ReadTimeout: 150 * time.Millisecond, MaxRetries: 3, MinRetryBackoff: time.Millisecond, MaxRetryBackoff: 10 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	ctx := stacktest.Context(t, 30*time.Second)
	g, err := stock.NewGate(ctx, rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	sid := testSession(t)
	load(t, g, direct, ctx, sid, 1, 10, 1)

	proxy.HoldNext()
	v, err := g.Reserve(ctx, grab(sid, 1, "alice", "alice-key-0001"))
	if err != nil {
		t.Fatalf("reserve through a lost reply: %v", err)
	}
	if proxy.Delayed() != 1 {
		t.Fatal("the proxy never delayed a reply: the test did not exercise a retry")
	}
	// The first attempt admitted; the client only heard the retry's answer.
	if v.Code != stock.Seen || v.State.State != "queued" {
		t.Fatalf("verdict %s %+v, want seen/queued from the retry", v.Code, v.State)
	}
	k := stock.KeysFor(sid, 1)
	if left, _ := direct.HGet(ctx, k.Meta, "left").Int(); left != 9 {
		t.Fatalf("left = %d after one grab with a retried reply, want 9", left)
	}
	if n, _ := direct.HGet(ctx, k.Users, "alice").Int(); n != 1 {
		t.Fatalf("alice counted %d times, want 1", n)
	}
}
