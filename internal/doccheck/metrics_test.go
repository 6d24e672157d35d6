package doccheck

import (
	"slices"
	"strings"
	"testing"
)

// TestMetricsFollowTheConventions runs MetricProblems on the tree.
func TestMetricsFollowTheConventions(t *testing.T) {
	_, sources := repoFacts(t)
	n := 0
	for _, src := range sources {
		n += len(metricOptsRE.FindAllString(src, -1))
	}
	if n < 40 {
		t.Fatalf("found %d metric definitions; the scan looks broken", n)
	}
	for _, p := range MetricProblems(sources) {
		t.Error(p)
	}
}

func TestMetricProblems(t *testing.T) {
	const good = `f := promauto.With(reg)
	a := f.NewCounterVec(prometheus.CounterOpts{Name: "seckill_x_done_total", Help: "h"}, nil)
	b := f.NewGauge(prometheus.GaugeOpts{Name: "seckill_x_left",
		Help: "h"})`
	tests := []struct {
		name    string
		sources map[string]string
		want    []string
	}{
		{"conventions kept", map[string]string{"gateway/metrics.go": good, "pkg/b/b.go": good, "gateway/main.go": "newMetrics(reg)"}, nil},
		{"made but not registered", map[string]string{"gateway/metrics.go": `prometheus.NewCounter(prometheus.CounterOpts{Name: "seckill_x_total"})`},
			[]string{"gateway/metrics.go: prometheus.NewCounter makes a metric nothing registers; use promauto.With(reg).NewCounter"}},
		{"outside the deployable's metrics.go", map[string]string{"reconciler/drift.go": good},
			[]string{"reconciler/drift.go: seckill_x_done_total is defined outside reconciler/metrics.go",
				"reconciler/drift.go: seckill_x_left is defined outside reconciler/metrics.go"}},
		{"a gauge named like a counter", map[string]string{"consumer/metrics.go": strings.ReplaceAll(good, "seckill_x_left", "seckill_x_stock_total")},
			[]string{"consumer/metrics.go: seckill_x_stock_total is a gauge named like a counter (_total)"}},
		{"a counter without _total", map[string]string{"pkg/a/a.go": `f.NewCounter(prometheus.CounterOpts{Name: "seckill_x_done"})`},
			[]string{"pkg/a/a.go: counter seckill_x_done does not end in _total"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := MetricProblems(tc.sources); !slices.Equal(got, tc.want) {
				t.Errorf("problems:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}
