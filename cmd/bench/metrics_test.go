package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const exposition = `# HELP seckill_gateway_redis_duration_seconds Redis call latency by operation.
# TYPE seckill_gateway_redis_duration_seconds histogram
seckill_gateway_redis_duration_seconds_bucket{op="reserve",le="0.001"} 10
seckill_gateway_redis_duration_seconds_bucket{op="reserve",le="0.002"} 20
seckill_gateway_redis_duration_seconds_bucket{op="reserve",le="0.005"} 30
seckill_gateway_redis_duration_seconds_bucket{op="reserve",le="+Inf"} 30
seckill_gateway_redis_duration_seconds_sum{op="reserve"} 0.05
seckill_gateway_redis_duration_seconds_count{op="reserve"} 30
seckill_gateway_redis_duration_seconds_bucket{op="lookup",le="0.001"} 1
seckill_gateway_redis_duration_seconds_bucket{op="lookup",le="0.002"} 1
seckill_gateway_redis_duration_seconds_bucket{op="lookup",le="0.005"} 1
seckill_gateway_redis_duration_seconds_bucket{op="lookup",le="+Inf"} 1
# TYPE seckill_gateway_inflight_requests gauge
seckill_gateway_inflight_requests 3
odd_bucket{path="a \"quoted\", value",le="1"} 2
odd_bucket{path="a \"quoted\", value",le="+Inf"} 2 1712345678000
`

func TestParseHistograms(t *testing.T) {
	ss, err := parseHistograms(strings.NewReader(exposition))
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 3 {
		t.Fatalf("%d series, want 3", len(ss))
	}
	h, ok, err := pick(ss, "seckill_gateway_redis_duration_seconds", map[string]string{"op": "reserve"})
	if err != nil || !ok {
		t.Fatalf("pick reserve: %v %v", ok, err)
	}
	if h.total() != 30 || len(h.bounds) != 4 || !math.IsInf(h.bounds[3], 1) {
		t.Fatalf("reserve = %+v", h)
	}
	// Without a label filter the series sum, as sum by () would.
	all, _, _ := pick(ss, "seckill_gateway_redis_duration_seconds", nil)
	if all.total() != 31 {
		t.Fatalf("sum of both ops = %v, want 31", all.total())
	}
	odd, ok, _ := pick(ss, "odd", map[string]string{"path": `a "quoted", value`})
	if !ok || odd.total() != 2 {
		t.Fatalf("escaped label value: %+v %v", odd, ok)
	}
	if _, ok, _ := pick(ss, "seckill_gateway_redis_duration_seconds", map[string]string{"op": "absent"}); ok {
		t.Fatal("a label nobody observed matched")
	}
}

func TestParseHistogramsRejectsBrokenInput(t *testing.T) {
	for _, tc := range []struct{ name, in string }{
		{"no +Inf bucket", "x_bucket{le=\"1\"} 3\n"},
		{"bucket without le", "x_bucket{a=\"1\"} 3\n"},
		{"bad value", "x_bucket{le=\"+Inf\"} three\n"},
		{"unterminated label", "x_bucket{le=\"+Inf} 3\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := parseHistograms(strings.NewReader(tc.in)); err == nil {
				t.Fatalf("no error for %q", tc.in)
			}
		})
	}
}

func hist(counts ...float64) histogram {
	return histogram{bounds: []float64{0.001, 0.002, 0.005, math.Inf(1)}, counts: counts}
}

func TestQuantile(t *testing.T) {
	for _, tc := range []struct {
		name string
		q    float64
		h    histogram
		want float64
	}{
		{"median interpolates inside its bucket", 0.5, hist(10, 20, 30, 30), 0.0015},
		{"first bucket starts at zero", 0.25, hist(10, 20, 30, 30), 0.00075},
		{"q=1 is the top of the last filled bucket", 1, hist(10, 20, 30, 30), 0.005},
		{"a rank in +Inf reads as the last finite bound", 0.99, hist(10, 10, 10, 20), 0.005},
		{"empty buckets below are skipped", 0.5, hist(0, 0, 4, 4), 0.0035},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := quantile(tc.q, tc.h); math.Abs(got-tc.want) > 1e-12 {
				t.Fatalf("quantile(%v) = %v, want %v", tc.q, got, tc.want)
			}
		})
	}
	if got := quantile(0.5, hist(0, 0, 0, 0)); !math.IsNaN(got) {
		t.Fatalf("empty histogram: %v, want NaN", got)
	}
}

func TestDelta(t *testing.T) {
	before, after := hist(5, 10, 10, 12), hist(15, 30, 40, 42)
	d, err := delta(after, before, true)
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{10, 20, 30, 30}
	for i := range want {
		if d.counts[i] != want[i] {
			t.Fatalf("delta = %v, want %v", d.counts, want)
		}
	}
	// The window's median, not the process lifetime's.
	if got := quantile(0.5, d); math.Abs(got-0.0015) > 1e-12 {
		t.Fatalf("median of the window = %v", got)
	}
	if d, err := delta(after, histogram{}, false); err != nil || d.total() != 42 {
		t.Fatalf("no series before the window: %v, %v", d, err)
	}
	if _, err := delta(before, after, true); err == nil {
		t.Fatal("a count that went down (a restart) was accepted")
	}
	if _, err := delta(after, histogram{bounds: []float64{1, math.Inf(1)}, counts: []float64{0, 0}}, true); err == nil {
		t.Fatal("different buckets were accepted")
	}
}

func TestStageExtras(t *testing.T) {
	page := func(reserve ...float64) []series {
		return []series{{name: "seckill_gateway_redis_duration_seconds", labels: map[string]string{"op": "reserve"}, h: hist(reserve...)}}
	}
	extra := map[string]any{}
	// The Kafka histogram is absent: its stage is left out, not reported as zero.
	if err := stageExtras(gatewayStages(), page(5, 10, 10, 12), page(15, 30, 40, 42), extra); err != nil {
		t.Fatal(err)
	}
	if got := extra["stage_redis_reserve_p50_ms"]; math.Abs(got.(float64)-1.5) > 1e-9 {
		t.Fatalf("redis p50 = %v ms, want 1.5", got)
	}
	if got := extra["stage_redis_reserve_samples"]; got != 30.0 {
		t.Fatalf("samples = %v", got)
	}
	if _, ok := extra["stage_kafka_ack_p50_ms"]; ok {
		t.Fatal("an absent histogram produced a figure")
	}
}

func TestWriteRendersEveryChart(t *testing.T) {
	// A synthetic three-repetition run: write must produce results.json, results.md and
	// the four charts, and results.md must show medians with their spread.
	var c collector
	for rep := 1; rep <= 3; rep++ {
		f := float64(rep)
		got := map[string]*sample{}
		ms := []measured{
			{keyTrivial, "trivial", &sample{ThroughputPS: 20000 * f}},
			{keyGatewayMax, "gateway", &sample{ThroughputPS: 8000 + 100*f, P50ms: 20, P99ms: 60, P999ms: 90,
				Extra: map[string]any{"gateway_peak_rss_mb": 110 + f}}},
			{keyPipeline, "pipeline", &sample{ThroughputPS: 10000}},
			{keyLock, "lock", &sample{ThroughputPS: 180 + f}},
			{keyOptimistic, "optimistic", &sample{ThroughputPS: 160}},
			{keyPessimistic, "pessimistic", &sample{ThroughputPS: 1200}},
			{keyHotRow(modeConfigured), "hot", &sample{ThroughputPS: 16000, Extra: map[string]any{extraPerOrder: 600.0}}},
			{keyKafkaMySQL(modeConfigured), "k2m", &sample{ThroughputPS: 8000}},
			{keyHotRow(modeBinlog), "hot binlog", &sample{ThroughputPS: 15000, Extra: map[string]any{extraPerOrder: 450.0}}},
			{keyKafkaMySQL(modeBinlog), "k2m binlog", &sample{ThroughputPS: 8800}},
			{keySale, "sale", &sample{ThroughputPS: 3800, P50ms: 60, P99ms: 140, P999ms: 160, Extra: map[string]any{
				"stage_consumer_tx_p50_ms": 20.0, "stage_consumer_tx_p99_ms": 80.0, "stage_consumer_tx_p999_ms": 90.0, "stage_consumer_tx_samples": 40.0}}},
		}
		for _, p := range openLevels {
			ms = append(ms, measured{keyOpen(p), "open", &sample{ThroughputPS: 80 * float64(p), P50ms: 2 + float64(p)/10,
				P99ms: 5 + float64(p), P999ms: 20 + 2*float64(p), Extra: map[string]any{"offered_per_s": 80.0 * float64(p),
					"late": 3, "saturated": 0, "stage_redis_reserve_p50_ms": 0.4, "stage_redis_reserve_p99_ms": 1.8,
					"stage_redis_reserve_p999_ms": 4.0, "stage_redis_reserve_samples": 1000.0}}})
		}
		for _, m := range ms {
			got[m.key] = m.s
		}
		deriveRatios(got)
		c.add(rep, ms)
	}
	rep := report{Reps: 3, Order: interleave([]string{"ceilings", "gateway"}, 3), Rows: c.summarise(), Machine: map[string]string{"cores": "2"}}
	dir := t.TempDir()
	var out strings.Builder
	if err := write(dir, rep, &out); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"results.json", "results.md", "strategies.png", "persistence.png", "latency.png", "stages.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Fatalf("%s not written: %v", f, err)
		}
	}
	md, _ := os.ReadFile(filepath.Join(dir, "results.md"))
	for _, want := range []string{
		"| gateway ≥ 0.6× a trivial net/http handler | 0.20 (0.14–0.41) × | **missed** |",
		"8,200 (8,100–8,300)",
		"| 50% | 4,000 | 4,000 | 7 | 55 | 120 | 3 | 0 |",
		"Redis admission script",
		"consumer persistence transaction (one batch)",
		"not measured: the histogram had no observations in the window",
		"![strategies on one hot item](strategies.png)",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("results.md lacks %q:\n%s", want, md)
		}
	}
	// -render reads results.json back and writes the same tables.
	if err := os.Remove(filepath.Join(dir, "latency.png")); err != nil {
		t.Fatal(err)
	}
	if err := run(t.Context(), []string{"-render", dir}, &out); err != nil {
		t.Fatal(err)
	}
	md2, _ := os.ReadFile(filepath.Join(dir, "results.md"))
	if string(md2) != string(md) {
		t.Fatalf("re-rendered results.md differs")
	}
	if _, err := os.Stat(filepath.Join(dir, "latency.png")); err != nil {
		t.Fatal("-render did not redraw latency.png")
	}
}
