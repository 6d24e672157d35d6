package main

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/seckill-pipeline/seckill/internal/harness"
	"github.com/seckill-pipeline/seckill/internal/load"
)

// What the two latency curves (gateway.go: the gateway alone; salecurve.go: the whole
// pipeline) share: a crowd of fresh users and one open-loop level.

// feed returns the tokens of n users no earlier window of the step used.
type feed func(n int) (func(i int) string, error)

// userFeed starts a step's crowd: every request is a different user (per-user limit 1), as
// in a sale; a repeat would be answered limit_reached, and the gateway's token cache would
// skip the JWT check.
func (b *bench) userFeed() feed {
	offset := 0
	return func(n int) (func(i int) string, error) {
		tok, err := b.tokens(offset + n)
		if err != nil {
			return nil, err
		}
		from := offset
		offset += n
		return func(i int) string { return tok(from + i) }, nil
	}
}

// openLevel offers pct % of maxRate for levelSeconds in an open loop, each request timed
// from when it was due, and returns the level's sample (the caller adds the stages).
func (b *bench) openLevel(ctx context.Context, pct int, maxRate float64, url func(int) string, users feed, keyPrefix string) (*sample, error) {
	rate := maxRate * float64(pct) / 100
	n := max(int(rate*b.levelSeconds()), 200)
	tok, err := users(n)
	if err != nil {
		return nil, err
	}
	s := load.Run(ctx, load.Options{Requests: n, Concurrency: 4096, Rate: rate,
		MaxDuration: time.Duration(b.levelSeconds()*3+10) * time.Second},
		b.httpGrab(url, tok, fmt.Sprintf("%s%d", keyPrefix, pct)))
	b.logf("  open loop at %d%% of max (%.0f/s): %s", pct, rate, s)
	sm := sampleFrom(s)
	sm.Extra["pct_of_max"] = pct
	sm.Extra["offered_per_s"] = rate
	sm.Extra["late"] = s.Late
	sm.Extra["saturated"] = s.Saturated
	sm.Extra["late_fraction"] = float64(s.Late) / float64(max(1, s.Requests))
	return sm, nil
}

// closedWindow runs one closed-loop window of fresh users at conc clients and returns its
// summary and the CPU each of procs spent per answered grab. settle, when set, runs after
// the load and before CPU is read again (the sale curve waits there for the window's
// orders, so their persistence is in the figure).
func (b *bench) closedWindow(ctx context.Context, conc int, url func(int) string, users feed, keyPrefix string,
	procs []cpuProc, settle func() error) (load.Summary, map[string]float64, error) {
	n := b.n(30_000)
	tok, err := users(n)
	if err != nil {
		return load.Summary{}, nil, err
	}
	before, err := cpuTimes(procs)
	if err != nil {
		return load.Summary{}, nil, err
	}
	s := load.Run(ctx, load.Options{Requests: n, Concurrency: conc}, b.httpGrab(url, tok, fmt.Sprintf("%s%d", keyPrefix, conc)))
	if settle != nil {
		if err := settle(); err != nil {
			return s, nil, err
		}
	}
	after, err := cpuTimes(procs)
	if err != nil {
		return s, nil, err
	}
	answered := 0
	for _, k := range s.Codes {
		answered += k
	}
	return s, cpuPerGrab(procs, before, after, answered), nil
}

// curvePipeline starts a pipeline for a latency curve: one prize of stock, every user may
// grab once, no per-user rate limit, room for every request in flight, the gateway's admin
// listener at adminAddr for its histograms, -gateway-env added and -kafka-config set on
// the brokers. done restores the brokers and stops the pipeline.
func (b *bench) curvePipeline(ctx context.Context, stock int) (c *harness.Pipeline, adminAddr string, done func(), err error) {
	return b.pipelineWith(ctx, stock, map[string]string{"SECKILL_MAX_INFLIGHT": "100000"})
}

// pipelineWith is curvePipeline with env added to the gateway's (before -gateway-env).
func (b *bench) pipelineWith(ctx context.Context, stock int, env map[string]string) (c *harness.Pipeline, adminAddr string, done func(), err error) {
	if adminAddr, err = harness.FreeAddr(); err != nil {
		return nil, "", nil, err
	}
	gwEnv := map[string]string{"SECKILL_RATE_PER_USER": "0", "SECKILL_ADMIN_ADDR": adminAddr, "SECKILL_JWT_SECRET": b.secret}
	maps.Copy(gwEnv, env)
	maps.Copy(gwEnv, b.gatewayEnv) // -gateway-env (kafkatune.go)
	if c, err = harness.NewPipeline(ctx, harness.Options{Bin: b.bin, Stocks: []int{stock}, Limit: 1, Consumers: 0, GatewayEnv: gwEnv}); err != nil {
		return nil, "", nil, err
	}
	if err := b.applyKafkaConfig(ctx, c); err != nil {
		c.Close()
		return nil, "", nil, err
	}
	return c, adminAddr, func() { b.restoreKafkaConfig(ctx, c); c.Close() }, nil
}
