package main

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// The drift gauge keeps series only for the session×prizes the last run checked: those of
// sessions that left the scope (ended longer than the key grace ago) are deleted, so the
// series count stays bounded over a sale day of many sessions.
func TestDriftSeriesOfEndedSessionsAreRemoved(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newDriftMetrics(reg)
	m.keep(map[seckill.SessionPrize]float64{{Session: 1, Prize: 10}: 0, {Session: 1, Prize: 11}: 3})
	if n := testutil.CollectAndCount(m.drift); n != 2 {
		t.Fatalf("%d series after the first run, want 2", n)
	}
	m.keep(map[seckill.SessionPrize]float64{{Session: 2, Prize: 10}: -1}) // session 1 left the scope
	if n := testutil.CollectAndCount(m.drift); n != 1 {
		t.Fatalf("%d series after session 1 ended, want 1", n)
	}
	if v := testutil.ToFloat64(m.drift.WithLabelValues("2", "10")); v != -1 {
		t.Fatalf("drift of session 2 = %v, want -1", v)
	}
}
