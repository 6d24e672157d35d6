package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/tracing"
)

// job is one piece of reconciliation work. It returns what it did and an error when it
// could not finish (or found a problem it could not fix). Every write it makes carries
// fence, this run's lease acquisition, and is refused once a newer holder took over.
type job interface {
	Name() string
	Run(ctx context.Context, fence lease.Fence) (result, error)
}

// result is a job's account of one run: counters a person and a machine can read, and
// optional rows (the lifecycle job's final session reports).
type result struct {
	Summary map[string]int64
	Details []any
}

// leaser runs work while holding the single-actor lease.
type leaser interface {
	Do(ctx context.Context, work func(ctx context.Context, fence lease.Fence) error) (bool, error)
}

// jobReport is one job's part of a run report.
type jobReport struct {
	Name    string           `json:"name"`
	Summary map[string]int64 `json:"summary"`
	Details []any            `json:"details,omitempty"`
	Error   string           `json:"error,omitempty"`
}

// report is what one run did; printed as a table or JSON, and logged in scheduler mode.
type report struct {
	StartedAt  time.Time   `json:"started_at"`
	DurationMS int64       `json:"duration_ms"`
	Lease      string      `json:"lease"` // "held" or "busy" (another instance is acting)
	Fence      int64       `json:"fence,omitempty"`
	Jobs       []jobReport `json:"jobs"`
}

// Failed reports whether any job ended with an error (the exit code of --once).
func (r report) Failed() bool {
	for _, j := range r.Jobs {
		if j.Error != "" {
			return true
		}
	}
	return false
}

// reportSaver keeps run reports for the operator console: a *store.RunReports.
type reportSaver interface {
	Save(ctx context.Context, startedAt time.Time, durationMS, fence int64, failed bool, report []byte) error
}

// runner runs the jobs in order under the lease.
type runner struct {
	lease   leaser
	jobs    []job
	reports reportSaver // nil: reports are only printed and logged
	metrics runnerMetrics
	log     *slog.Logger
	now     func() time.Time
	tr      *tracing.Tracing // a span per run and per job; nil: off
}

// Span names of a run: the run, and each job's as "reconcile <job name>".
const (
	spanRun    = "reconcile run"
	spanJobPre = "reconcile "
)

func (r *runner) runOnce(ctx context.Context) (report, error) {
	rep := report{StartedAt: r.now().UTC(), Lease: "busy", Jobs: []jobReport{}}
	ctx, span := r.tr.Start(ctx, spanRun)
	defer span.End()
	acquired, err := r.lease.Do(ctx, func(ctx context.Context, fence lease.Fence) error {
		r.metrics.held.Set(1)
		defer r.metrics.held.Set(0)
		rep.Lease, rep.Fence = "held", fence.Number
		for _, j := range r.jobs {
			res, err := r.runJob(ctx, j, fence)
			jr := jobReport{Name: j.Name(), Summary: res.Summary, Details: res.Details}
			if jr.Summary == nil {
				jr.Summary = map[string]int64{}
			}
			if err != nil {
				jr.Error = err.Error()
			}
			rep.Jobs = append(rep.Jobs, jr)
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
		}
		return nil
	})
	if span.IsRecording() {
		span.SetAttributes(attribute.String("seckill.lease", rep.Lease), attribute.Int64("seckill.fence", rep.Fence))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, "run failed")
		}
	}
	end := r.now()
	rep.DurationMS = end.Sub(rep.StartedAt).Milliseconds()
	if acquired {
		r.metrics.lastRun.Set(float64(end.UnixMilli()) / 1000)
		r.metrics.fence.Set(float64(rep.Fence))
		r.save(ctx, rep)
	}
	switch {
	case err != nil:
		r.metrics.runs.WithLabelValues("failed").Inc()
		return rep, err
	case !acquired:
		r.metrics.runs.WithLabelValues("busy").Inc()
	case rep.Failed():
		r.metrics.runs.WithLabelValues("failed").Inc()
		r.metrics.duration.Observe(float64(rep.DurationMS) / 1000)
	default:
		r.metrics.runs.WithLabelValues("ok").Inc()
		r.metrics.duration.Observe(float64(rep.DurationMS) / 1000)
	}
	return rep, nil
}

// runJob runs j in a span of its own, the run's child, with the job's summary as attributes.
func (r *runner) runJob(ctx context.Context, j job, fence lease.Fence) (result, error) {
	if !r.tr.On() {
		return j.Run(ctx, fence)
	}
	ctx, span := r.tr.Start(ctx, spanJobPre+j.Name())
	defer span.End()
	res, err := j.Run(ctx, fence)
	if span.IsRecording() {
		for k, v := range res.Summary {
			span.SetAttributes(attribute.Int64("seckill."+k, v))
		}
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, "job failed")
		}
	}
	return res, err
}

// save keeps a run's report for the console. Losing one is a gap in a history, not in the
// reconciliation, so a failure is logged and the run goes on.
func (r *runner) save(ctx context.Context, rep report) {
	if r.reports == nil {
		return
	}
	b, err := json.Marshal(rep)
	if err == nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		err = r.reports.Save(sctx, rep.StartedAt, rep.DurationMS, rep.Fence, rep.Failed(), b)
		cancel()
	}
	if err != nil {
		r.log.Warn("saving the run report for the console failed", "error", err.Error())
	}
}

// print writes the report as a readable table, or as one JSON object.
func (rep report) print(w io.Writer, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(rep)
	}
	fmt.Fprintf(w, "reconcile run at %s: lease %s", rep.StartedAt.Format(time.RFC3339), rep.Lease)
	if rep.Lease == "busy" {
		fmt.Fprintln(w, " (another reconciler is acting; nothing done)")
		return nil
	}
	fmt.Fprintf(w, " (fence %d), %d ms\n", rep.Fence, rep.DurationMS)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tRESULT\tDETAILS")
	for _, j := range rep.Jobs {
		keys := make([]string, 0, len(j.Summary))
		for k := range j.Summary {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s=%d", k, j.Summary[k])
		}
		result := "ok"
		if j.Error != "" {
			result = "FAILED: " + j.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", j.Name, result, strings.Join(parts, " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, j := range rep.Jobs {
		for _, d := range j.Details {
			b, _ := json.Marshal(d)
			fmt.Fprintf(w, "  %s: %s\n", j.Name, b)
		}
	}
	return nil
}
