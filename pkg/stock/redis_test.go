package stock_test

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/stock"
)

// The stack's Redis must be the Debian server with the settings the gate relies on.
func TestStackRedisConfig(t *testing.T) {
	rdb := stacktest.Redis(t)
	ctx := stacktest.Context(t, 5*time.Second)
	if err := stock.CheckPolicy(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"appendonly": "yes", "appendfsync": "everysec", "maxmemory-policy": "noeviction"}
	for key, val := range want {
		got, err := rdb.ConfigGet(ctx, key).Result()
		if err != nil {
			t.Fatalf("CONFIG GET %s: %v", key, err)
		}
		if got[key] != val {
			t.Errorf("%s = %q, want %q", key, got[key], val)
		}
	}
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info, "executable:/usr/bin/redis-server") {
		t.Errorf("redis is not Debian's /usr/bin/redis-server:\n%s", info)
	}
}

func TestLuaScriptRuns(t *testing.T) {
	rdb := stacktest.Redis(t)
	ctx := stacktest.Context(t, 5*time.Second)
	key := "t:" + stacktest.ID(t) + ":n"
	t.Cleanup(func() { rdb.Del(ctx, key) })
	// A compare-and-decrement: the shape of the admission script, run through EVALSHA.
	script := redis.NewScript(`
local v = tonumber(redis.call('GET', KEYS[1]) or '-1')
if v < 1 then return -1 end
return redis.call('DECR', KEYS[1])`)
	if err := rdb.Set(ctx, key, 2, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	var got []int64
	for range 3 {
		n, err := script.Run(ctx, rdb, []string{key}).Int64()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, n)
	}
	if got[0] != 1 || got[1] != 0 || got[2] != -1 {
		t.Fatalf("script results %v, want [1 0 -1]", got)
	}
}
