package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/seckill-pipeline/seckill/internal/load"
	"github.com/seckill-pipeline/seckill/pkg/config"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
)

// What is the most the gateway could do on this machine? Three ceilings from the same load
// generator: the grab script straight at Redis, a net/http handler that answers at once,
// and one that first verifies the same JWT as the gateway (HS256, issuer, audience,
// expiry). The gateway row divides by each of them in the same repetition.

func (b *bench) ceilings(ctx context.Context, rep int) ([]measured, error) {
	redis, err := b.redisCeiling(ctx)
	if err != nil {
		return nil, err
	}
	srv, base, err := b.startStrategyServer(ctx, "")
	if err != nil {
		return nil, err
	}
	defer srv.Kill()
	n := b.n(80_000)
	token, err := b.tokens(n)
	if err != nil {
		return nil, err
	}

	trivial := load.Run(ctx, load.Options{Requests: n, Concurrency: concurrency},
		b.httpGrab(func(int) string { return base + "/trivial" }, token, "triv"))
	b.logf("  trivial: %s", trivial)
	jwt := load.Run(ctx, load.Options{Requests: n, Concurrency: concurrency},
		b.httpGrab(func(int) string { return base + "/jwt" }, token, "jwt"))
	b.logf("  jwt: %s", jwt)
	es, err := b.es256.tokens(n)
	if err != nil {
		return nil, err
	}
	es256 := load.Run(ctx, load.Options{Requests: n, Concurrency: concurrency},
		b.httpGrab(func(int) string { return base + "/jwt-es256" }, es, "es256"))
	b.logf("  jwt es256: %s", es256)
	// A token the handler refuses would turn these rows into a 401 benchmark.
	for name, r := range map[string]load.Summary{"JWT": jwt, "ES256 JWT": es256} {
		if ok := r.Codes["202"]; ok < r.Requests*99/100 {
			return nil, fmt.Errorf("%s ceiling: only %d of %d requests verified (codes %v, errors %d)", name, ok, r.Requests, r.Codes, r.Errors)
		}
	}
	return []measured{
		{keyRedisCeiling, "ceiling: Lua EVALSHA straight at Redis (unpipelined)", redis},
		{keyTrivial, "ceiling: trivial net/http handler (same generator)", sampleFrom(trivial)},
		{keyJWT, "ceiling: net/http handler that verifies the same JWT, nothing else", sampleFrom(jwt)},
		{keyJWTES256, "ceiling: the same with ES256 against a key set (the production path), every request a new user", sampleFrom(es256)},
	}, nil
}

func (b *bench) redisCeiling(ctx context.Context) (*sample, error) {
	rdb, err := stock.Connect(ctx, envOr("SECKILL_REDIS_ADDR", config.DefaultRedisAddr), "", time.Second)
	if err != nil {
		return nil, err
	}
	defer rdb.Close()
	gate, err := stock.NewGate(ctx, rdb)
	if err != nil {
		return nil, err
	}
	sid := 3_000_000_000 + time.Now().UnixNano()%1_000_000
	st := seckill.Stock{SessionID: sid, PrizeID: 1, Total: 100_000_000, Left: 100_000_000, PerUserLimit: 1}
	if _, err := gate.Load(ctx, []seckill.Stock{st}, time.Now().Add(time.Hour)); err != nil {
		return nil, err
	}
	k := stock.KeysFor(sid, 1)
	defer rdb.Del(context.Background(), k.Meta, k.Users, k.Reserved, k.Outcomes, k.Fence, k.Returned)
	now := time.Now()
	s := load.Run(ctx, load.Options{Requests: b.n(100_000), Concurrency: concurrency}, func(ctx context.Context, i int) (int, error) {
		v, err := gate.Reserve(ctx, seckill.Grab{RequestID: seckill.RequestID(sid, 1, fmt.Sprintf("ceil-%010d", i)),
			UserID: "u" + strconv.Itoa(i), SessionID: sid, PrizeID: 1, AdmittedAt: now})
		return int(v.Code), err
	})
	b.logf("  redis: %s", s)
	return sampleFrom(s), nil
}
