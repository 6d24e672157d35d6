package contractfuzz

import (
	"flag"
	"strings"
	"testing"
)

// Each run tries cases no run tried before: a fixed seed replays the same few hundred cases
// forever, and never found that the document admitted 0000-00-00T00:00:00Z. A failure is
// replayed from the seed it prints.
func TestEachRunDrawsAFreshSeed(t *testing.T) {
	if def := flag.Lookup("seed").DefValue; def != "0" {
		t.Fatalf("-seed defaults to %s: every run without SEED tries the same cases; want 0 (draw one)", def)
	}
	draws := []uint32{6, 0, 9}
	draw := func() uint32 { d := draws[0]; draws = draws[1:]; return d }
	if got := runSeed(0, draw); got != 7 {
		t.Fatalf("no -seed: seed %d, want the drawn 6 shifted off 0 (7)", got)
	}
	if got := runSeed(0, draw); got != 1 {
		t.Fatalf("no -seed, 0 drawn: seed %d, want 1 (0 would draw again when replayed)", got)
	}
	if got := runSeed(42, draw); got != 42 {
		t.Fatalf("-seed 42: seed %d", got)
	}
	if len(draws) != 1 {
		t.Fatalf("-seed 42 drew a seed")
	}
	for _, tc := range []struct {
		seed, examples int
		make, goTest   string
	}{
		{123, 25, "make contract-fuzz SEED=123", "-seed 123"},
		{123, 50, "make contract-fuzz SEED=123 EXAMPLES=50", "-seed 123 -examples 50"},
	} {
		got := replay(tc.seed, tc.examples)
		if !strings.HasPrefix(got, tc.make+" ") || !strings.Contains(got, "./internal/contractfuzz") || !strings.Contains(got, tc.goTest) {
			t.Errorf("replay(%d, %d) = %q, want %q and the go test command with %q", tc.seed, tc.examples, got, tc.make, tc.goTest)
		}
	}
}
