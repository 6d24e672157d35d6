package main

import (
	"context"
	"fmt"
	"time"

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
