package main

import (
	"context"
	"io"
	"strings"
	"testing"
)

// A paired step runs the baseline and the candidate in every repetition, alternating which
// goes first, with the baseline's deployables and settings in place only while it runs.
func TestPairedRunsBothSidesAlternating(t *testing.T) {
	b := &bench{out: io.Discard, bin: "cand-bin", gatewayEnv: map[string]string{"X": "1"},
		base: &variant{label: "abc", bin: "base-bin"}}
	var seen []string
	s := b.paired(step{name: "gateway", run: func(ctx context.Context, rep int) ([]measured, error) {
		seen = append(seen, b.bin)
		return []measured{{key: keyGatewayMax, name: "gateway", s: &sample{ThroughputPS: float64(len(b.bin))}}}, nil
	}})
	for rep := 1; rep <= 2; rep++ {
		m, err := s.run(context.Background(), rep)
		if err != nil {
			t.Fatal(err)
		}
		if len(m) != 2 {
			t.Fatalf("rep %d: %d rows, want 2", rep, len(m))
		}
		keys := map[string]bool{m[0].key: true, m[1].key: true}
		if !keys[keyGatewayMax] || !keys[keyGatewayMax+baseSuffix] {
			t.Fatalf("rep %d: keys %v", rep, keys)
		}
	}
	if got := strings.Join(seen, ","); got != "base-bin,cand-bin,cand-bin,base-bin" {
		t.Fatalf("run order %s", got)
	}
	if b.bin != "cand-bin" || b.gatewayEnv["X"] != "1" {
		t.Fatalf("the candidate's settings were not restored: %s %v", b.bin, b.gatewayEnv)
	}
	if free := b.paired(step{name: "ceilings"}); free.run != nil {
		t.Fatal("the ceilings do not depend on the deployables and must run once")
	}
}

// Each side's ratio uses its own rows and the shared ceiling; the change is paired by
// repetition.
func TestCompareRowsPairsByRepetition(t *testing.T) {
	var col collector
	for rep, v := range [][3]float64{{40_000, 20_000, 16_000}, {50_000, 24_000, 20_000}, {45_000, 22_000, 0}} {
		got := map[string]*sample{
			keyTrivial:    {ThroughputPS: v[0]},
			keyGatewayMax: {ThroughputPS: v[1], P99ms: 10},
		}
		if v[2] > 0 { // repetition 3's baseline failed to measure
			got[keyGatewayMax+baseSuffix] = &sample{ThroughputPS: v[2], P99ms: 20}
		}
		deriveRatios(got)
		deriveBaseRatios(got)
		var ms []measured
		for k, s := range got {
			ms = append(ms, measured{key: k, name: k, s: s})
		}
		col.add(rep+1, ms)
	}
	cs := compareRows(col.summarise())
	byFig := map[string]comparison{}
	for _, c := range cs {
		if c.Row != keyGatewayMax {
			t.Fatalf("unexpected row %q", c.Row)
		}
		byFig[c.Figure] = c
	}
	tp := byFig["throughput_per_s"]
	if tp.Change.N != 2 || tp.Change.Min != 1.2 || tp.Change.Max != 1.25 {
		t.Fatalf("throughput change %+v, want 2 pairs 1.2–1.25", tp.Change)
	}
	r := byFig["ratio:gateway_over_trivial_handler"]
	if r.Baseline.N != 2 || r.Baseline.Min != 0.4 || r.Candidate.Max != 0.5 {
		t.Fatalf("ratio %+v", r)
	}
	if p := byFig["p99_ms"]; p.Change.Median != 0.5 {
		t.Fatalf("p99 change %+v, want 0.5", p.Change)
	}
	md := report{Compare: "abc", Comparisons: cs}.compareSection()
	if !strings.Contains(md, "## Before and after (baseline: abc; candidate: this tree)") || !strings.Contains(md, "| gateway_max | throughput_per_s |") {
		t.Fatalf("section:\n%s", md)
	}
}

func TestSplitCompare(t *testing.T) {
	for in, want := range map[string][2]string{"abc": {"abc", ""}, "shipped": {"shipped", ""}, "a..b": {"a", "b"}} {
		b, c, err := splitCompare(in)
		if err != nil || b != want[0] || c != want[1] {
			t.Fatalf("%q: %q %q %v", in, b, c, err)
		}
	}
	for _, bad := range []string{"", "..b", "a..", "shipped..b", "a..shipped"} {
		if _, _, err := splitCompare(bad); err == nil {
			t.Fatalf("%q: accepted", bad)
		}
	}
}
