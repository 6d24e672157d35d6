package stock_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
)

// These tests need the cluster profile's Redis Cluster (deploy/local/stack up --profile
// cluster): three primaries, three replicas. They are skipped without it, unless
// SECKILL_CLUSTER=1. stacktest.ClusterRedis fails a test on any CROSSSLOT error.

// clusterPrizes returns prize ids of session sid whose keys live on every primary, per
// primaries at least perNode of them, and the primary of each.
func clusterPrizes(t *testing.T, cc *redis.ClusterClient, ctx context.Context, sid int64, perNode int) ([]int64, map[int64]string) {
	t.Helper()
	owner := map[int64]string{}
	count := map[string]int{}
	var ids []int64
	for pid := int64(1); pid < 1000; pid++ {
		node, err := cc.MasterForKey(ctx, stock.KeysFor(sid, pid).Meta)
		if err != nil {
			t.Fatal(err)
		}
		addr := node.Options().Addr
		if count[addr] >= perNode {
			continue
		}
		count[addr]++
		owner[pid] = addr
		ids = append(ids, pid)
		if len(count) == 3 && len(ids) == 3*perNode {
			return ids, owner
		}
	}
	t.Fatalf("prizes spread over %d primaries, want 3: %v", len(count), count)
	return nil, nil
}

func cleanupPrizes(t *testing.T, rdb redis.UniversalClient, sid int64, pids []int64) {
	t.Cleanup(func() {
		for _, pid := range pids {
			k := stock.KeysFor(sid, pid)
			rdb.Del(context.Background(), k.Meta, k.Users, k.Reserved, k.Outcomes, k.Fence)
		}
	})
}

// The server agrees that a session×prize's keys share one slot.
func TestClusterKeysInOneSlot(t *testing.T) {
	cc := stacktest.ClusterRedis(t)
	ctx := stacktest.Context(t, 10*time.Second)
	k := stock.KeysFor(testSession(t), 3)
	rev := strings.TrimSuffix(k.Meta, "meta") + "rev"
	want, err := cc.ClusterKeySlot(ctx, k.Meta).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{k.Users, k.Reserved, k.Outcomes, k.Fence, rev} {
		if got, err := cc.ClusterKeySlot(ctx, key).Result(); err != nil || got != want {
			t.Errorf("CLUSTER KEYSLOT %s = %d (%v), want %d", key, got, err, want)
		}
	}
}

// The coalescer sends concurrent admissions for prizes on all three primaries in shared
// pipelines, which go-redis splits per node. Every caller must get its own script's reply:
// for each prize, the stock left after each admission must be exactly stock-1, ..., 0,
// once each (a reply handed to the wrong caller would repeat or skip a value, or carry
// another prize's count). Midway the script cache of one primary is flushed (as after a
// restart): the calls it serves are rerun with EVAL alone, so none of the admissions that
// already ran elsewhere turns into "seen".
func TestClusterCoalescerMapsRepliesAcrossNodes(t *testing.T) {
	cc := stacktest.ClusterRedis(t)
	g, _, ctx := newGateOn(t, cc, stock.WithCoalescing(32, 4))
	sid := testSession(t)
	pids, owner := clusterPrizes(t, cc, ctx, sid, 3)
	cleanupPrizes(t, cc, sid, pids)
	stockOf := map[int64]int{}
	var stocks []seckill.Stock
	for i, pid := range pids {
		stockOf[pid] = 5 + 3*i // a different stock per prize, all below the crowd
		stocks = append(stocks, seckill.Stock{SessionID: sid, PrizeID: pid, Total: stockOf[pid], Left: stockOf[pid], PerUserLimit: 1})
	}
	res, err := g.Load(ctx, stocks, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if !r.Loaded {
			t.Fatalf("prize %d not loaded: %+v", r.PrizeID, res)
		}
	}

	const perPrize = 60
	type reply struct {
		pid int64
		v   stock.Verdict
		err error
	}
	replies := make(chan reply, perPrize*len(pids))
	var wg sync.WaitGroup
	flushAt := perPrize * len(pids) / 2
	var flushOnce sync.Once
	n := 0
	for i := range perPrize {
		for _, pid := range pids {
			n++
			if n == flushAt {
				flushOnce.Do(func() {
					node, err := cc.MasterForKey(ctx, stock.KeysFor(sid, pids[0]).Meta)
					if err == nil {
						err = node.ScriptFlush(ctx).Err()
					}
					if err != nil {
						t.Errorf("flush one primary's scripts: %v", err)
					}
				})
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				v, err := g.Reserve(ctx, grab(sid, pid, fmt.Sprintf("u%d", i), fmt.Sprintf("key-%d-%04d", pid, i)))
				replies <- reply{pid, v, err}
			}()
		}
	}
	wg.Wait()
	close(replies)
	lefts := map[int64][]int64{}
	soldOut := map[int64]int{}
	for r := range replies {
		switch {
		case r.err != nil:
			t.Errorf("prize %d (%s): %v", r.pid, owner[r.pid], r.err)
		case r.v.Code == stock.Admitted:
			lefts[r.pid] = append(lefts[r.pid], r.v.Left)
		case r.v.Code == stock.SoldOut:
			soldOut[r.pid]++
		default:
			t.Errorf("prize %d (%s): verdict %s, want admitted or sold out", r.pid, owner[r.pid], r.v.Code)
		}
	}
	for _, pid := range pids {
		got := lefts[pid]
		slices.Sort(got)
		want := make([]int64, stockOf[pid])
		for i := range want {
			want[i] = int64(i)
		}
		if !slices.Equal(got, want) {
			t.Errorf("prize %d on %s: lefts after admissions %v, want 0..%d once each", pid, owner[pid], got, stockOf[pid]-1)
		}
		if soldOut[pid] != perPrize-stockOf[pid] {
			t.Errorf("prize %d: %d sold out, want %d", pid, soldOut[pid], perPrize-stockOf[pid])
		}
	}
}

// Lookup, Snapshots and Settle pipeline commands for prizes on different primaries; each
// answer must be the one of its own prize.
func TestClusterPipelinesAcrossNodes(t *testing.T) {
	cc := stacktest.ClusterRedis(t)
	g, _, ctx := newGateOn(t, cc)
	sid := testSession(t)
	pids, _ := clusterPrizes(t, cc, ctx, sid, 2)
	cleanupPrizes(t, cc, sid, pids)
	var stocks []seckill.Stock
	for i, pid := range pids {
		stocks = append(stocks, seckill.Stock{SessionID: sid, PrizeID: pid, Total: 10 + i, Left: 10 + i, PerUserLimit: 1})
	}
	if _, err := g.Load(ctx, stocks, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	// Prize i gets i+1 admissions.
	var batches []stock.SettleBatch
	for i, pid := range pids {
		b := stock.SettleBatch{SessionID: sid, PrizeID: pid}
		for j := range i + 1 {
			gr := grab(sid, pid, fmt.Sprintf("user-%d", j), fmt.Sprintf("key-%04d-%04d", pid, j))
			if v, err := g.Reserve(ctx, gr); err != nil || v.Code != stock.Admitted {
				t.Fatalf("reserve: %v %v", v, err)
			}
			if j > 0 { // the first one of each prize stays queued
				b.Items = append(b.Items, stock.Settlement{RequestID: gr.RequestID, UserID: gr.UserID, OrderID: pid*100 + int64(j)})
			}
		}
		batches = append(batches, b)
	}
	ids := make([]seckill.SessionPrize, len(pids))
	for i, pid := range pids {
		ids[i] = seckill.SessionPrize{Session: sid, Prize: pid}
	}
	snaps, err := g.Snapshots(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range snaps {
		if s.PrizeID != pids[i] || !s.Loaded || s.Total != int64(10+i) || s.Left != int64(10+i-(i+1)) || s.Pending != int64(i+1) {
			t.Errorf("snapshot %d: %+v, want prize %d total %d left %d pending %d", i, s, pids[i], 10+i, 9, i+1)
		}
	}
	cleared, err := g.Settle(ctx, batches)
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for i := range pids {
		want += i
	}
	if cleared != int64(want) {
		t.Fatalf("settle cleared %d reservations, want %d", cleared, want)
	}
	for i, pid := range pids {
		l, err := g.Lookup(ctx, seckill.RequestID(sid, pid, fmt.Sprintf("key-%04d-0000", pid)))
		if err != nil || !l.Found || !l.Live || l.Owner != "user-0" || l.Status.State != "queued" {
			t.Errorf("lookup of prize %d's first grab: %+v %v", pid, l, err)
		}
		if i == 0 {
			continue
		}
		l, err = g.Lookup(ctx, seckill.RequestID(sid, pid, fmt.Sprintf("key-%04d-%04d", pid, i)))
		if err != nil || !l.Found || l.Status.State != "succeeded" || l.Status.OrderID != pid*100+int64(i) {
			t.Errorf("lookup of prize %d's settled grab: %+v %v", pid, l, err)
		}
	}
}

// On a cluster CheckPolicy asks every node, replicas included: a replica that may evict is
// refused by name, since a failover would promote it.
func TestClusterCheckPolicyAsksEveryNode(t *testing.T) {
	cc := stacktest.ClusterRedis(t)
	ctx := stacktest.Context(t, 20*time.Second)
	if err := stock.CheckPolicy(ctx, cc); err != nil {
		t.Fatal(err)
	}
	var replica *redis.Client
	var mu sync.Mutex
	if err := cc.ForEachSlave(ctx, func(ctx context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		if replica == nil {
			replica = c
		}
		return nil
	}); err != nil || replica == nil {
		t.Fatalf("no replica found: %v", err)
	}
	if err := replica.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := replica.ConfigSet(context.Background(), "maxmemory-policy", "noeviction").Err(); err != nil {
			t.Errorf("restore %s's policy: %v", replica.Options().Addr, err)
		}
	})
	err := stock.CheckPolicy(ctx, cc)
	if err == nil || !strings.Contains(err.Error(), replica.Options().Addr) || !strings.Contains(err.Error(), "allkeys-lru") {
		t.Fatalf("CheckPolicy with replica %s on allkeys-lru: %v", replica.Options().Addr, err)
	}
	if _, err := stock.NewGate(ctx, cc); err == nil {
		t.Fatal("NewGate accepted a cluster with an evicting replica")
	}
}

// Connect asks the servers: one seed of a cluster gives a cluster client, the stack's one
// server a plain client, and several addresses that are not a cluster are refused.
func TestConnectDetectsCluster(t *testing.T) {
	stacktest.ClusterRedis(t) // skips without the cluster
	ctx := stacktest.Context(t, 10*time.Second)
	one := strings.Split(stacktest.ClusterRedisAddr(), ",")[0]
	rdb, err := stock.Connect(ctx, one, "", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	oneSeed, ok := rdb.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("one seed of the cluster (%s) gave a %T", one, rdb)
	}
	// A dead primary answers no MOVED: only a periodic re-read of the slot map finds its
	// promoted replica, so it must be frequent (go-redis's default is a minute).
	if d := oneSeed.Options().ClusterStateReloadInterval; d <= 0 || d > time.Second {
		t.Errorf("slot map re-read every %s, want at most a second", d)
	}
	if err := rdb.Set(ctx, "t:{"+stacktest.ID(t)+"}:k", 1, time.Minute).Err(); err != nil {
		t.Fatalf("write through one seed: %v", err)
	}

	single := stacktest.RedisAddr()
	if strings.Contains(single, ",") {
		t.Skip("the stack's SECKILL_REDIS_ADDR is a cluster; the single-server half needs the single-node stack")
	}
	s, err := stock.Connect(ctx, single, "", time.Second)
	if err != nil {
		t.Skipf("single-node stack: %v", err)
	}
	defer s.Close()
	if _, ok := s.(*redis.Client); !ok {
		t.Fatalf("the single server %s gave a %T", single, s)
	}
	if _, err := stock.Connect(ctx, single+","+single, "", time.Second); err == nil || !strings.Contains(err.Error(), "cluster mode") {
		t.Fatalf("two addresses of a server not in cluster mode: %v, want a refusal", err)
	}
}
