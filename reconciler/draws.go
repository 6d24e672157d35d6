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
	Restore(ctx context.Context, now, since time.Time) (int, error)
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
	grace  time.Duration // a session's draws are live until its end + grace
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

// tick restores the phases Redis lost, then does the due draws' next steps; what
// fails is logged and tried again next tick.
func (l drawLoop) tick(ctx context.Context) {
	now := time.Now()
	if n, err := l.runner.Restore(ctx, now, now.Add(-l.grace)); err != nil && ctx.Err() == nil {
		l.log.Warn("draw loop: restoring the draws' phases failed", "error", err.Error())
	} else if n > 0 {
		l.log.Warn("draw loop: restored the phase of draws whose keys Redis had lost", "draws", n)
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
	case rep.Frozen > 0 || rep.Drawn > 0 || rep.Admitted > 0 || rep.Skipped > 0:
		l.log.Info("draw loop", "report", rep)
	}
}
