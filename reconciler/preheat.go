package main

import (
	"context"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/preheat"
)

type duePreheater interface {
	Due(ctx context.Context, lead time.Duration) ([]preheat.Result, error)
}

// preheatJob loads the stock of sessions starting within lead into Redis.
type preheatJob struct {
	preheater duePreheater
	lead      time.Duration
}

func (preheatJob) Name() string { return "preheat" }

// Preheating creates keys only where absent (never overwriting), so it needs no fence.
func (j preheatJob) Run(ctx context.Context, _ lease.Fence) (result, error) {
	results, err := j.preheater.Due(ctx, j.lead)
	sum := map[string]int64{"sessions": int64(len(results)), "keys_loaded": 0, "keys_kept": 0}
	for _, r := range results {
		sum["keys_loaded"] += int64(len(r.Loaded))
		sum["keys_kept"] += int64(len(r.Kept))
	}
	return result{Summary: sum}, err
}
