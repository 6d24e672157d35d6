package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// caseKinds are the exception kinds the open-cases gauge always exports (at 0 when none),
// so an alert on a kind sees its series before the first case.
var caseKinds = []string{
	seckill.CaseDeadLetter, seckill.CaseAdmittedRejected, seckill.CaseDriftUncorrected, seckill.CaseStaleReservation,
	seckill.CaseCompensationFailing, seckill.CaseUnknownOrder, seckill.CaseNotSucceeded, seckill.CaseCancelAfterPaid,
	seckill.CasePaidAfterCancel, seckill.CaseReplayGap,
}

type openCases interface {
	OpenByKind(ctx context.Context) (map[string]int, error)
}

// exceptionsJob reports the open exception cases in the run report: what waits for a
// person on the workbench. It runs last, after the jobs that record cases, and fixes nothing.
type exceptionsJob struct {
	cases openCases
}

func (exceptionsJob) Name() string { return "exceptions" }

func (j exceptionsJob) Run(ctx context.Context, _ lease.Fence) (result, error) {
	open, err := j.cases.OpenByKind(ctx)
	if err != nil {
		return result{Summary: map[string]int64{}}, err
	}
	sum := map[string]int64{"open": 0}
	for k, n := range open {
		sum["open"] += int64(n)
		sum["open_"+k] = int64(n)
	}
	return result{Summary: sum}, nil
}

// openCasesGauge exports the open cases by kind. Every instance samples it on its own
// interval, outside the lease (it only reads), so max() over instances is current whichever
// instance acts: a gauge set only under the lease would keep a former holder's stale value.
type openCasesGauge struct {
	cases openCases
	open  *prometheus.GaugeVec
	every time.Duration
	log   *slog.Logger
}

func newOpenCasesGauge(reg prometheus.Registerer, cases openCases, every time.Duration, log *slog.Logger) *openCasesGauge {
	return &openCasesGauge{cases: cases, open: newOpenCasesMetric(reg), every: every, log: log}
}

func (g *openCasesGauge) sample(ctx context.Context) error {
	open, err := g.cases.OpenByKind(ctx)
	if err != nil {
		return err
	}
	for _, k := range caseKinds {
		g.open.WithLabelValues(k).Set(float64(open[k]))
	}
	for k, n := range open {
		g.open.WithLabelValues(k).Set(float64(n))
	}
	return nil
}

// Run samples at once and then every g.every until ctx ends.
func (g *openCasesGauge) Run(ctx context.Context) error {
	sampleEvery(ctx, g.every, g.sample, func(err error) {
		g.log.Warn("open exception cases unreadable", "error", err.Error())
	})
	return nil
}
