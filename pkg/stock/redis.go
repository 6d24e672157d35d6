// Package stock is the Redis admission gate: its keys, its Lua scripts, and the calls that
// load, reserve and release stock for a session×prize.
package stock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Connect returns a Redis client for the gate and checks that the server answers. addr is
// one address or a comma-separated list of seed addresses. Whether it is a Redis Cluster is
// asked of the servers, not configured: the first seed that answers says (INFO cluster),
// and a cluster gets a cluster client (keys routed by slot; pipelines split per node), a
// single server a plain one, so the services run unchanged on either. Several seeds that
// are not a cluster are refused: a client would silently use only the first. A reply slower
// than readTimeout is retried by go-redis (up to 3 times), which the gate's scripts are
// built to survive.
func Connect(ctx context.Context, addr, password string, readTimeout time.Duration) (redis.UniversalClient, error) {
	if readTimeout <= 0 {
		readTimeout = time.Second
	}
	var seeds []string
	for _, a := range strings.Split(addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			seeds = append(seeds, a)
		}
	}
	if len(seeds) == 0 {
		return nil, errors.New("redis: no address")
	}
	cluster, err := clusterEnabled(ctx, seeds, password)
	if err != nil {
		return nil, err
	}
	if !cluster && len(seeds) > 1 {
		return nil, fmt.Errorf("redis %s: several addresses, but the servers do not run in cluster mode (give one address for a single server)", addr)
	}
	var rdb redis.UniversalClient
	if cluster {
		rdb = redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:        seeds,
			Password:     password,
			DialTimeout:  2 * time.Second,
			ReadTimeout:  readTimeout,
			WriteTimeout: time.Second,
			PoolSize:     64, // per node
			MinIdleConns: 8,
			// go-redis re-reads the slot map after a MOVED reply, but a dead primary sends
			// none: it refuses connections, and with the default interval (60 s) the client
			// kept sending a shard's scripts to it for up to a minute after its replica was
			// promoted. Reading the map (CLUSTER SLOTS) at most once a second while commands
			// flow follows a failover within a second of the promotion.
			ClusterStateReloadInterval: time.Second,
		})
	} else {
		rdb = redis.NewClient(&redis.Options{
			Addr:         seeds[0],
			Password:     password,
			DialTimeout:  2 * time.Second,
			ReadTimeout:  readTimeout,
			WriteTimeout: time.Second,
			PoolSize:     64,
			MinIdleConns: 8,
		})
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("redis %s: %w", addr, err)
	}
	return rdb, nil
}

// clusterEnabled asks the seeds, in order, whether they run in cluster mode; the first that
// answers decides.
func clusterEnabled(ctx context.Context, seeds []string, password string) (bool, error) {
	var errs []error
	for _, a := range seeds {
		c := redis.NewClient(&redis.Options{Addr: a, Password: password, DialTimeout: 2 * time.Second,
			ReadTimeout: 2 * time.Second, MaxRetries: -1})
		info, err := c.Info(ctx, "cluster").Result()
		_ = c.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("redis %s: %w", a, err))
			continue
		}
		return strings.Contains(info, "cluster_enabled:1"), nil
	}
	return false, errors.Join(errs...)
}

// CheckPolicy refuses a Redis that may evict keys: an evicted stock key would read as "not
// loaded" at best and, rebuilt lazily, oversell at worst. NewGate calls it, so every
// service that builds a gate refuses such a Redis at start-up. On a cluster every node the
// cluster lists is asked, replicas included (a replica is promoted in a failover); a node
// that does not answer cannot be vouched for and fails the check too.
func CheckPolicy(ctx context.Context, rdb redis.UniversalClient) error {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return checkPolicy(ctx, rdb, "")
	}
	var mu sync.Mutex
	var errs []error
	nodes := 0
	err := cc.ForEachShard(ctx, func(ctx context.Context, node *redis.Client) error {
		err := checkPolicy(ctx, node, node.Options().Addr+" ")
		mu.Lock()
		defer mu.Unlock()
		nodes++
		if err != nil {
			errs = append(errs, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis cluster nodes: %w", err)
	}
	if nodes == 0 {
		return errors.New("redis cluster: no node to check")
	}
	return errors.Join(errs...)
}

func checkPolicy(ctx context.Context, rdb redis.Cmdable, node string) error {
	cfg, err := rdb.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		return fmt.Errorf("redis %sCONFIG GET maxmemory-policy: %w", node, err)
	}
	if p := cfg["maxmemory-policy"]; p != "noeviction" {
		return fmt.Errorf("redis %smaxmemory-policy is %q; the stock gate requires noeviction", node, p)
	}
	return nil
}
