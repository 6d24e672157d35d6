// Package stock is the Redis admission gate: its keys, its Lua scripts, and the calls that
// load, reserve and release stock for a session×prize.
package stock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Connect returns a Redis client for the gate and checks that the server answers. A reply
// slower than readTimeout is retried by go-redis (up to 3 times), which the gate's scripts
// are built to survive.
func Connect(ctx context.Context, addr, password string, readTimeout time.Duration) (*redis.Client, error) {
	if readTimeout <= 0 {
		readTimeout = time.Second
	}
	rdb := redis.NewClient(&redis.Options{
		Addr:         addr,
		Password:     password,
		DialTimeout:  2 * time.Second,
		ReadTimeout:  readTimeout,
		WriteTimeout: time.Second,
		PoolSize:     64,
		MinIdleConns: 8,
	})
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("redis %s: %w", addr, err)
	}
	return rdb, nil
}

// CheckPolicy refuses a Redis that may evict keys: an evicted stock key would read as "not
// loaded" at best and, rebuilt lazily, oversell at worst. NewGate calls it, so every
// service that builds a gate refuses such a Redis at start-up.
func CheckPolicy(ctx context.Context, rdb redis.UniversalClient) error {
	cfg, err := rdb.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		return fmt.Errorf("redis CONFIG GET maxmemory-policy: %w", err)
	}
	if p := cfg["maxmemory-policy"]; p != "noeviction" {
		return fmt.Errorf("redis maxmemory-policy is %q; the stock gate requires noeviction", p)
	}
	return nil
}
