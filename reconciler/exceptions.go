package main

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// caseKinds are the exception kinds the open-cases gauge always exports (at 0 when none),
// so an alert on a kind sees its series before the first case.
var caseKinds = []string{
	seckill.CaseDeadLetter, seckill.CaseAdmittedRejected, seckill.CaseDriftUncorrected, seckill.CaseStaleReservation,
	seckill.CaseCompensationFailing, seckill.CaseUnknownOrder, seckill.CaseNotSucceeded, seckill.CaseCancelAfterPaid,
	seckill.CasePaidAfterCancel,
}

type openCases interface {
	OpenByKind(ctx context.Context) (map[string]int, error)
}

// exceptionsJob reports the open exception cases: what waits for a person on the
// workbench. It runs last, after the jobs that record cases, and fixes nothing itself.
type exceptionsJob struct {
	cases openCases
	open  *prometheus.GaugeVec
}

func newOpenCasesGauge(reg prometheus.Registerer) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "seckill_exceptions_open",
		Help: "Open exception cases on the workbench (MySQL exception_cases), by kind, at the last reconciler run."}, []string{"kind"})
	reg.MustRegister(g)
	return g
}

func (exceptionsJob) Name() string { return "exceptions" }

func (j exceptionsJob) Run(ctx context.Context, _ lease.Fence) (result, error) {
	open, err := j.cases.OpenByKind(ctx)
	if err != nil {
		return result{Summary: map[string]int64{}}, err
	}
	sum := map[string]int64{"open": 0}
	for _, k := range caseKinds {
		j.open.WithLabelValues(k).Set(float64(open[k]))
	}
	for k, n := range open {
		j.open.WithLabelValues(k).Set(float64(n))
		sum["open"] += int64(n)
		sum["open_"+k] = int64(n)
	}
	return result{Summary: sum}, nil
}
