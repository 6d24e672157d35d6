package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/draw"
	"github.com/seckill-pipeline/seckill/pkg/lease"
)

// drawRunner is the draws' work under the lease (*draw.Runner).
type drawRunner interface {
	Rearm(ctx context.Context, now time.Time) (int, error)
	Due(ctx context.Context) (bool, error)
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

// drawLoop runs the draws between the reconciler's runs, every SECKILL_DRAW_INTERVAL, so a
// draw is frozen and its winners admitted about that long after its window closes rather
// than up to a reconcile interval later. It asks MySQL whether any draw is due first and
// takes the lease (shared with the runs and the rebalance loop) only when one is.
type drawLoop struct {
	runner drawRunner
	lease  leaser
	every  time.Duration
	log    *slog.Logger
}

func (l drawLoop) Run(ctx context.Context) error {
	t := time.NewTicker(l.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		l.tick(ctx)
	}
}

// tick re-arms the open windows' keys Redis lost, then does the due draws' next steps; what
// fails is logged and tried again next tick.
func (l drawLoop) tick(ctx context.Context) {
	if n, err := l.runner.Rearm(ctx, time.Now()); err != nil && ctx.Err() == nil {
		l.log.Warn("draw loop: re-arming open windows failed", "error", err.Error())
	} else if n > 0 {
		l.log.Warn("draw loop: armed the keys of draws in their window again (Redis had lost them)", "draws", n)
	}
	due, err := l.runner.Due(ctx)
	if err != nil || !due {
		if err != nil && ctx.Err() == nil {
			l.log.Warn("draw loop: reading the due draws failed", "error", err.Error())
		}
		return
	}
	var rep draw.Report
	_, err = l.lease.Do(ctx, func(ctx context.Context, f lease.Fence) error {
		rep, err = l.runner.Run(ctx, f)
		return err
	})
	switch {
	case err != nil && ctx.Err() == nil:
		l.log.Error("draw loop failed", "error", err.Error(), "report", rep)
	case rep != draw.Report{}:
		l.log.Info("draw loop", "report", rep)
	}
}
