package securetest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/config"
	"github.com/seckill-pipeline/seckill/pkg/stock"
)

// The stock-bucket commands the services send outside the gate's scripts are in their
// Redis users' rules: the gateway counts a bucket's demand (INCRBY, PEXPIRE) and marks a
// dry bucket wanted (SET with a TTL); the reconciler's rebalance loop reads and resets the
// demand (GETDEL). A rule missing here is a NOPERM the gateway only logs, and the rebalance
// loop then moves units on the wanted flags alone.
func TestBucketCommandsAsTheServicesOwnUsers(t *testing.T) {
	dir := profile(t)
	ctx := stacktest.Context(t, 30*time.Second)
	dial := func(service string) (*stock.Gate, redis.UniversalClient) {
		common, err := config.LoadCommon(stacktest.Getenv(serviceEnv(t, dir, service)))
		if err != nil {
			t.Fatal(err)
		}
		rdb, err := stock.Dial(ctx, common.Redis())
		if err != nil {
			t.Fatalf("dial Redis as %s: %v", service, err)
		}
		t.Cleanup(func() { rdb.Close() })
		g, err := stock.NewGate(ctx, rdb)
		if err != nil {
			t.Fatalf("gate as %s: %v", service, err)
		}
		t.Cleanup(func() { g.Close() })
		return g, rdb
	}
	sid := time.Now().UnixNano() % 1_000_000_000
	k := stock.BucketKeysFor(sid, 1, 1, 2)
	t.Cleanup(func() { stacktest.Redis(t).Del(context.Background(), k.Demand(), k.Wanted()) })

	gw, _ := dial("gateway")
	if err := gw.AddDemand(ctx, []stock.BucketDemand{{SessionID: sid, PrizeID: 1, Bucket: 1, Buckets: 2, Grabs: 3}}); err != nil {
		t.Fatalf("count demand as the gateway: %v", err)
	}
	if err := gw.MarkWanted(ctx, sid, 1, 1, 2, time.Minute); err != nil {
		t.Fatalf("mark a bucket wanted as the gateway: %v", err)
	}
	if ttl, err := stacktest.Redis(t).PTTL(ctx, k.Demand()).Result(); err != nil || ttl <= 0 {
		t.Fatalf("the demand key's TTL: %v %v, want one set", ttl, err)
	}

	_, rec := dial("reconciler")
	got, err := rec.GetDel(ctx, k.Demand()).Int64()
	if err != nil || got != 3 {
		t.Fatalf("read and reset the demand as the reconciler: %d %v, want 3", got, err)
	}
}
