package main

import (
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/stock"
)

// A gateway decides at start: 0 turns the wait off; a Redis without any replica turns it off
// (a WAIT there could never succeed); one with replicas turns it on.
func TestReplicaWaitDecidedAtStart(t *testing.T) {
	ctx := stacktest.Context(t, 30*time.Second)
	rdb := stacktest.Redis(t)
	gate, err := stock.NewGate(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer gate.Close()
	log := slog.New(slog.DiscardHandler)
	if r, err := replicaWaitFor(ctx, rdb, gate, 0, log); err != nil || r != nil {
		t.Fatalf("wait 0: %v, %v; want off", r, err)
	}
	has, err := stock.HasReplicas(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	r, err := replicaWaitFor(ctx, rdb, gate, time.Second, log)
	if err != nil || (r != nil) != has {
		t.Fatalf("wait 1s on a Redis with replicas=%v: %v, %v", has, r, err)
	}
	if cc := clusterIfUp(t); cc != nil {
		if r, err := replicaWaitFor(ctx, cc, gate, time.Second, log); err != nil || r == nil {
			t.Fatalf("wait 1s on the cluster profile: %v, %v; want on", r, err)
		}
	}
}

// clusterIfUp returns the cluster profile's Redis when it answers, else nil.
func clusterIfUp(t *testing.T) *redis.ClusterClient {
	t.Helper()
	first, _, _ := strings.Cut(stacktest.ClusterRedisAddr(), ",")
	c, err := net.DialTimeout("tcp", first, time.Second)
	if err != nil {
		return nil
	}
	c.Close()
	return stacktest.ClusterRedis(t)
}
