package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
)

// The sale curve's invariant: a grab Redis admitted and MySQL does not hold as an order,
// or a count that could not be read, fails the run; only an exact match passes.
func TestPersistedCheck(t *testing.T) {
	for _, tc := range []struct {
		name             string
		admitted, orders int64
		readErr          error
		wantDiff         int64
		wantErr          string
	}{
		{"every admitted grab is an order", 120_001, 120_001, nil, 0, ""},
		{"orders missing", 120_001, 119_990, nil, 11, "admitted grabs without an order: 11"},
		{"more orders than admissions", 100, 101, nil, -1, "admitted grabs without an order: -1"},
		{"a count that cannot be read is not a 0", 0, 0, errors.New("connection refused"), 0, "cannot be read: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := persistedCheck(tc.admitted, tc.orders, tc.readErr)
			if d != tc.wantDiff {
				t.Fatalf("difference = %d, want %d", d, tc.wantDiff)
			}
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// A step that measured and then found its invariant broken returns its rows and an error:
// the run fails and the report keeps the rows (the invariant target reads "missed").
func TestBrokenInvariantFailsTheRunAndKeepsTheRow(t *testing.T) {
	broken := step{"salecurve", func(context.Context, int) ([]measured, error) {
		d, err := persistedCheck(1000, 990, nil)
		return []measured{{keySaleMax, "pipeline max", &sample{ThroughputPS: 900, Extra: map[string]any{"not_persisted": d}}}}, err
	}}
	var rep report
	err := runInterleaved(context.Background(), []step{broken}, 3, func(string, ...any) {}, &rep)
	if err == nil || !strings.Contains(err.Error(), "repetition 1, salecurve: admitted grabs without an order: 10") {
		t.Fatalf("err = %v", err)
	}
	if rep.Reps != 0 {
		t.Fatalf("reps = %d, want 0 finished", rep.Reps)
	}
	x := rep.find(keySaleMax)
	if x == nil || len(x.Runs) != 1 || x.Extra["not_persisted"].Median != 10 {
		t.Fatalf("the failing repetition's row is not in the report: %+v", x)
	}
	for _, tg := range evaluate(rep.Rows) {
		if tg.Row == keySaleMax && tg.Verdict != "missed" {
			t.Fatalf("%s: verdict %q, want missed", tg.Name, tg.Verdict)
		}
	}
}

func TestParseSettings(t *testing.T) {
	got, err := parseSettings(" num.io.threads=4, num.network.threads = 2 ")
	if err != nil || len(got) != 2 || got["num.io.threads"] != "4" || got["num.network.threads"] != "2" {
		t.Fatalf("parseSettings = %v, %v", got, err)
	}
	if got, err := parseSettings(""); err != nil || got != nil {
		t.Fatalf("empty: %v, %v", got, err)
	}
	for _, bad := range []string{"num.io.threads", "=4", "a=", "a=1,a=2"} {
		if _, err := parseSettings(bad); err == nil {
			t.Errorf("parseSettings(%q) accepted it", bad)
		}
	}
	if settingsNote(nil, nil) != nil {
		t.Fatal("a stock run must carry no settings note")
	}
}

// The broker checks -kafka-config before the bench changes anything: a setting it can
// change at run time passes validation, one it cannot (log.dirs needs a restart) is
// refused. Validate-only: the shared broker is left as it is.
func TestBrokerValidatesTheSettingsToTry(t *testing.T) {
	ctx := stacktest.Context(t, 30e9)
	brokers := stacktest.KafkaBrokers()
	if err := alterBrokerDefaults(ctx, brokers, map[string]string{"num.io.threads": "8"}, false, true); err != nil {
		t.Fatalf("a dynamic broker setting was refused: %v", err)
	}
	if err := alterBrokerDefaults(ctx, brokers, map[string]string{"log.dirs": "/tmp/elsewhere"}, false, true); err == nil {
		t.Fatal("a read-only broker setting passed validation")
	}
}

func TestCurveSectionAndChart(t *testing.T) {
	var c collector
	for rep := 1; rep <= 3; rep++ {
		ms := []measured{{keySaleMax, "pipeline max", &sample{ThroughputPS: 6000, Extra: map[string]any{"concurrency": 256,
			"not_persisted": int64(0), "cpu_us_per_grab_gateway": 60.0, "cpu_us_per_grab_consumer": 30.0, "cpu_us_per_grab_total": 90.0}}}}
		for _, p := range openLevels {
			f := float64(p)
			ms = append(ms, measured{keyOpen(p), "open", &sample{ThroughputPS: 80 * f, P50ms: 2, P99ms: 5 + f, P999ms: 20 + f,
				Extra: map[string]any{"offered_per_s": 80 * f}}},
				measured{keySaleOpen(p), "pipeline open", &sample{ThroughputPS: 60 * f, P50ms: 3, P99ms: 10 + f, P999ms: 30 + f,
					Extra: map[string]any{"offered_per_s": 60 * f, "late": 1, "saturated": 0, "persist_lag_s": 0.5,
						"stage_kafka_ack_p99_ms": 7.0, "stage_admission_to_order_p99_ms": 120.0}}})
		}
		c.add(rep, ms)
	}
	rep := report{Reps: 3, Rows: c.summarise(), Settings: settingsNote(map[string]string{"SECKILL_KAFKA_BATCH_TIMEOUT": "200us"}, nil)}
	dir := t.TempDir()
	var out strings.Builder
	if err := write(dir, rep, &out); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| p99 < 10 ms at 50% of max, whole pipeline persisting (open loop) | 60 ms | **missed** |",
		"| gateway alone (no consumers): p99 at 50% of its max (component view, no target) | 55 ms | reported |",
		"| admitted grabs without an order after the sale curve (must be 0) | 0  | **met** |",
		"| 50% | 3,000 | 3,000 | 3 | 60 | 80 | 55 | 1 | 0 | – | – | 7 | 120 | 0.50 |",
		"| consumer | 30 |",
		"| **total** | 90 |",
		"**Settings tried in this run**",
		"gateway env SECKILL_KAFKA_BATCH_TIMEOUT=200us",
		"Kafka acknowledgement (acks=all), whole pipeline",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("results.md lacks %q:\n%s", want, md)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "latency.png")); err != nil || st.Size() == 0 {
		t.Fatalf("latency.png: %v", err)
	}
	fmt.Fprint(&out) // keep out used when the table checks pass
}
