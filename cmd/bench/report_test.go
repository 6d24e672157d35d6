package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestMedianAndSpread(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []float64
		want spread
	}{
		{"one repetition", []float64{7}, spread{Median: 7, Min: 7, Max: 7, N: 1}},
		{"odd count, unsorted", []float64{9, 1, 5}, spread{Median: 5, Min: 1, Max: 9, N: 3}},
		{"even count takes the mean of the middle two", []float64{4, 1, 3, 10}, spread{Median: 3.5, Min: 1, Max: 10, N: 4}},
		{"an outlier moves min-max, not the median", []float64{100, 101, 5000}, spread{Median: 101, Min: 100, Max: 5000, N: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.in)
			if got := spreadOf(in); got != tc.want {
				t.Fatalf("spreadOf(%v) = %+v, want %+v", tc.in, got, tc.want)
			}
			if !slices.Equal(in, tc.in) {
				t.Fatalf("spreadOf reordered its input: %v", in)
			}
		})
	}
	if s := spreadOf(nil); !math.IsNaN(s.Median) || s.N != 0 {
		t.Fatalf("spreadOf(nil) = %+v, want NaN median", s)
	}
}

func TestInterleave(t *testing.T) {
	got := interleave([]string{"ceilings", "gateway", "sale"}, 3)
	want := []string{
		"rep 1: ceilings", "rep 1: gateway", "rep 1: sale",
		"rep 2: ceilings", "rep 2: gateway", "rep 2: sale",
		"rep 3: ceilings", "rep 3: gateway", "rep 3: sale",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("interleave = %v, want %v", got, want)
	}
}

// fakeSteps record the order they run in and return throughputs from tput[step][rep-1].
func fakeSteps(calls *[]string, tput map[string][]float64, failAt string) []step {
	mk := func(name, key string) step {
		return step{name, func(_ context.Context, rep int) ([]measured, error) {
			*calls = append(*calls, fmt.Sprintf("%s/%d", name, rep))
			if failAt == fmt.Sprintf("%s/%d", name, rep) {
				return nil, errors.New("boom")
			}
			return []measured{{key, name, &sample{ThroughputPS: tput[key][rep-1], Extra: map[string]any{"sold": int64(rep)}}}}, nil
		}}
	}
	return []step{mk("ceilings", keyTrivial), mk("gateway", keyGatewayMax)}
}

func TestRunInterleaved(t *testing.T) {
	tput := map[string][]float64{keyTrivial: {1000, 2000, 1000}, keyGatewayMax: {500, 600, 800}}
	t.Run("every step of a repetition before the next repetition", func(t *testing.T) {
		var calls []string
		var rep report
		if err := runInterleaved(context.Background(), fakeSteps(&calls, tput, ""), 3, func(string, ...any) {}, &rep); err != nil {
			t.Fatal(err)
		}
		want := []string{"ceilings/1", "gateway/1", "ceilings/2", "gateway/2", "ceilings/3", "gateway/3"}
		if !slices.Equal(calls, want) {
			t.Fatalf("calls = %v, want %v", calls, want)
		}
		if rep.Reps != 3 || len(rep.Rows) != 2 {
			t.Fatalf("reps %d, rows %d; want 3 and 2", rep.Reps, len(rep.Rows))
		}
		gw := rep.find(keyGatewayMax)
		// Ratios within each repetition: 0.5, 0.3, 0.8, not a ratio of medians (600/1000).
		want3 := spread{Median: 0.5, Min: 0.3, Max: 0.8, N: 3}
		if got := gw.Ratios["gateway_over_trivial_handler"]; got != want3 {
			t.Fatalf("gateway_over_trivial_handler = %+v, want %+v", got, want3)
		}
		if got := gw.ThroughputPS; got != (spread{Median: 600, Min: 500, Max: 800, N: 3}) {
			t.Fatalf("throughput = %+v", got)
		}
		if got := gw.Extra["sold"]; got != (spread{Median: 2, Min: 1, Max: 3, N: 3}) {
			t.Fatalf("numeric extra = %+v", got)
		}
		for i, s := range gw.Runs {
			if s.Rep != i+1 || s.ThroughputPS != tput[keyGatewayMax][i] {
				t.Fatalf("run %d = rep %d, %v", i, s.Rep, s.ThroughputPS)
			}
		}
	})
	t.Run("a failure keeps the finished repetitions", func(t *testing.T) {
		var calls []string
		var rep report
		err := runInterleaved(context.Background(), fakeSteps(&calls, tput, "gateway/2"), 3, func(string, ...any) {}, &rep)
		if err == nil || !strings.Contains(err.Error(), "repetition 2, gateway") {
			t.Fatalf("err = %v", err)
		}
		if rep.Reps != 1 {
			t.Fatalf("reps = %d, want 1 finished", rep.Reps)
		}
		for _, r := range rep.Rows {
			if len(r.Runs) != 1 {
				t.Fatalf("%s has %d runs, want only repetition 1's", r.Key, len(r.Runs))
			}
		}
	})
}

func TestOversoldIsTheWorstRepetition(t *testing.T) {
	var c collector
	for rep, o := range []int64{0, 3, 0} {
		c.add(rep+1, []measured{{"x", "x", &sample{Oversold: o}}})
	}
	if got := c.summarise()[0].Oversold; got != 3 {
		t.Fatalf("oversold = %d, want 3 (one oversell in any repetition)", got)
	}
}

func TestDeriveRatios(t *testing.T) {
	rep := map[string]*sample{
		keyGatewayMax:                 {ThroughputPS: 600},
		keyTrivial:                    {ThroughputPS: 1200},
		keyJWT:                        {ThroughputPS: 0}, // a zero denominator is left out
		keyPipeline:                   {ThroughputPS: 10_000},
		keyLock:                       {ThroughputPS: 200},
		keyHotRow(modeConfigured):     {ThroughputPS: 16_000, Extra: map[string]any{extraPerOrder: 800.0}},
		keyKafkaMySQL(modeConfigured): {ThroughputPS: 8_000},
	}
	deriveRatios(rep)
	for _, tc := range []struct {
		row, ratio string
		want       float64
		present    bool
	}{
		{keyGatewayMax, "gateway_over_trivial_handler", 0.5, true},
		{keyGatewayMax, "gateway_over_jwt_handler", 0, false},
		{keyGatewayMax, "gateway_over_redis_ceiling", 0, false}, // the ceiling did not run
		{keyPipeline, "pipeline_over_redis_lock", 50, true},
		{keyPipeline, "pipeline_over_db_optimistic", 0, false},
		{keyHotRow(modeConfigured), "batched_over_one_tx_per_order", 20, true},
		{keyKafkaMySQL(modeConfigured), "kafka_mysql_over_one_tx_per_order", 10, true},
	} {
		t.Run(tc.row+"/"+tc.ratio, func(t *testing.T) {
			got, ok := rep[tc.row].Ratios[tc.ratio]
			if ok != tc.present || got != tc.want {
				t.Fatalf("%s = %v (present %v), want %v (present %v)", tc.ratio, got, ok, tc.want, tc.present)
			}
		})
	}
}

func TestEvaluateTargets(t *testing.T) {
	three := func(med float64) spread { return spread{Median: med, Min: med * 0.9, Max: med * 1.1, N: 3} }
	runs := []*sample{{}, {}, {}}
	rows := []*row{
		{Key: keyGatewayMax, Runs: runs, Ratios: map[string]spread{"gateway_over_trivial_handler": three(0.44),
			"gateway_over_jwt_handler": three(0.8)}, Extra: map[string]spread{"gateway_peak_rss_mb": three(117)}},
		{Key: keyOpen(50), Runs: runs, P99ms: three(4)},      // the gateway alone: reported, never judged
		{Key: keySaleOpen(50), Runs: runs, P99ms: three(10)}, // exactly at "< 10": missed
		{Key: keySaleMax, Runs: runs, Extra: map[string]spread{"not_persisted": three(0)}},
		{Key: keyPipeline, Runs: runs, Ratios: map[string]spread{"pipeline_over_redis_lock": three(10), // exactly at ">= 10": met
			"pipeline_over_db_optimistic": three(61)}},
		{Key: keyKafkaMySQL(modeConfigured), Runs: runs, ThroughputPS: three(8000),
			Ratios: map[string]spread{"kafka_mysql_over_one_tx_per_order": three(13)}},
	}
	got := map[string]string{}
	for _, tg := range evaluate(rows) {
		got[tg.Name] = tg.Verdict
		if (tg.Verdict == "not measured") != (tg.Value == nil) {
			t.Fatalf("%s: verdict %q with value %v", tg.Name, tg.Verdict, tg.Value)
		}
	}
	for name, want := range map[string]string{
		"gateway ≥ 0.6× a trivial net/http handler":                                             "missed",
		"gateway vs a handler that verifies the same JWT (ceiling, no target)":                  "reported",
		"p99 < 10 ms at 50% of max, whole pipeline persisting (open loop)":                      "missed",
		"gateway alone (no consumers): p99 at 50% of its max (component view, no target)":       "reported",
		"admitted grabs without an order after the sale curve (must be 0)":                      "met",
		"pipeline ≥ 10× Redis lock, one hot item":                                               "met",
		"pipeline ≥ 50× DB optimistic locking, one hot item":                                    "met",
		"Kafka → MySQL, one hot prize ≥ 20,000 orders/s (as configured)":                        "missed",
		"Kafka → MySQL, one hot prize ≥ 20× one transaction per order (as configured)":          "missed",
		"Kafka → MySQL, one hot prize ≥ 20,000 orders/s (binlog + sync_binlog=1)":               "not measured",
		"gateway peak RSS < 150 MB at max rate":                                                 "met",
		"consumer peak RSS during the whole sale (largest consumer; no target)":                 "not measured",
		"reconciler peak RSS during the whole sale (no target)":                                 "not measured",
		"Kafka → MySQL, one hot prize ≥ 20× one transaction per order (binlog + sync_binlog=1)": "not measured",
	} {
		if got[name] != want {
			t.Errorf("%s: verdict %q, want %q", name, got[name], want)
		}
	}
	if len(got) != len(targetDefs()) {
		t.Fatalf("evaluated %d targets, defined %d", len(got), len(targetDefs()))
	}
}

func TestParseOnly(t *testing.T) {
	steps := (&bench{}).steps()
	for _, tc := range []struct {
		in      string
		want    map[string]bool
		wantErr bool
	}{
		{"", map[string]bool{}, false},
		{"gateway", map[string]bool{"gateway": true}, false},
		{"ceilings, sale", map[string]bool{"ceilings": true, "sale": true}, false},
		{"ceiling", nil, true}, // no prefix matching: a typo must not run nothing silently
		{"gate", nil, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseOnly(tc.in, steps)
			if (err != nil) != tc.wantErr || (!tc.wantErr && !reflect.DeepEqual(got, tc.want)) {
				t.Fatalf("parseOnly(%q) = %v, %v", tc.in, got, err)
			}
		})
	}
}
