package main

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// A _total suffix promises a counter (rate() and increase() over it are meaningful): the
// stock gauges must not carry it.
func TestStockGaugesAreNotNamedLikeCounters(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newStockMetrics(reg)
	m.left.WithLabelValues("1", "10", "mysql").Set(1)
	m.total.WithLabelValues("1", "10").Set(1)
	m.sold.WithLabelValues("1", "10").Set(0)
	m.pending.WithLabelValues("1", "10").Set(0)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
		if mf.GetType() != dto.MetricType_COUNTER && strings.HasSuffix(mf.GetName(), "_total") {
			t.Errorf("%s is a %s named like a counter", mf.GetName(), mf.GetType())
		}
	}
	if !names["seckill_reconciler_stock_units"] {
		t.Errorf("no seckill_reconciler_stock_units among %v", names)
	}
}
