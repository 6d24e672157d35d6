package main

import (
	"context"

	"github.com/seckill-pipeline/seckill/pkg/draw"
	"github.com/seckill-pipeline/seckill/pkg/lease"
)

// drawRunner is the draws' work under the lease (*draw.Runner).
type drawRunner interface {
	Run(ctx context.Context, fence lease.Fence) (draw.Report, error)
}

// drawsJob freezes the entry sets of draws whose window closed, ranks them, admits the
// winners through the stock gate and offers returned units down the waitlists (package
// draw does all of it; this is its place in the run).
type drawsJob struct {
	runner drawRunner
}

func (drawsJob) Name() string { return "draws" }

func (j drawsJob) Run(ctx context.Context, fence lease.Fence) (result, error) {
	rep, err := j.runner.Run(ctx, fence)
	return result{Summary: map[string]int64{
		"frozen": rep.Frozen, "drawn": rep.Drawn, "admitted": rep.Admitted, "skipped": rep.Skipped,
		"waiting": rep.Waiting, "awaiting_beacon": rep.AwaitingBeacon,
	}}, err
}
