package admission

import (
	"strconv"
	"testing"
	"time"
)

// clock is a hand-moved time for the windows.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newTestGate(c *clock, start int) *Gate {
	return New(Config{Target: 10 * time.Millisecond, Min: 4, Max: 1000, Start: start,
		Window: 100 * time.Millisecond, MinSamples: 5, RetryAfterMax: 3, Now: c.now})
}

// window runs one window: n grabs enter (the ones over the limit are refused) and leave
// with latency took, then the clock passes the window and one more grab closes it.
func window(t *testing.T, g *Gate, c *clock, n int, took time.Duration) (refused int) {
	t.Helper()
	var in int
	for range n {
		if g.Enter() {
			in++
		} else {
			refused++
		}
	}
	for range in {
		g.Leave(took)
	}
	c.t = c.t.Add(101 * time.Millisecond)
	if !g.Enter() {
		t.Fatalf("a grab with nobody inside was refused (limit %d)", g.Limit())
	}
	g.Leave(took)
	return refused
}

func TestEnterRefusesBeyondTheLimitAndLeaveFreesAPlace(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	g := newTestGate(c, 4)
	for i := range 4 {
		if !g.Enter() {
			t.Fatalf("grab %d refused below the limit", i)
		}
	}
	if g.Enter() {
		t.Fatalf("a fifth grab entered a limit of 4")
	}
	g.Leave(time.Millisecond)
	if !g.Enter() {
		t.Fatalf("a place given back was not taken")
	}
	if got := g.InFlight(); got != 4 {
		t.Fatalf("in flight %d, want 4", got)
	}
}

func TestLatencyAboveTheTargetShrinksTheLimit(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	g := newTestGate(c, 100)
	window(t, g, c, 50, 40*time.Millisecond) // 4x the target: shrinks by the clamp, 0.75
	if got := g.Limit(); got != 75 {
		t.Fatalf("limit %d after a slow window, want 75", got)
	}
	for range 20 {
		window(t, g, c, 50, 40*time.Millisecond)
	}
	if got := g.Limit(); got != 4 {
		t.Fatalf("limit %d after many slow windows, want the minimum 4", got)
	}
}

func TestLatencyBelowTheTargetGrowsOnlyAPressedLimit(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	g := newTestGate(c, 100)
	window(t, g, c, 50, 2*time.Millisecond) // fast, but the limit was never reached
	if got := g.Limit(); got != 100 {
		t.Fatalf("limit %d after a fast window that never reached it, want 100 unchanged", got)
	}
	if refused := window(t, g, c, 150, 8*time.Millisecond); refused != 50 {
		t.Fatalf("%d refused of 150 at a limit of 100, want 50", refused)
	}
	if got := g.Limit(); got != 125 {
		t.Fatalf("limit %d after a pressed window at 8 ms (target 10 ms), want 125", got)
	}
	for range 50 {
		window(t, g, c, 2000, time.Millisecond)
	}
	if got := g.Limit(); got != 1000 {
		t.Fatalf("limit %d after many pressed fast windows, want the maximum 1000", got)
	}
}

func TestASmallLimitCanGrow(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	g := New(Config{Target: 10 * time.Millisecond, Min: 1, Max: 10, Start: 1, MinSamples: 1, Now: c.now})
	window(t, g, c, 3, 9*time.Millisecond) // factor 1.11: round(1 x 1.11) is still 1
	if got := g.Limit(); got != 2 {
		t.Fatalf("limit %d, want 2", got)
	}
}

func TestAWindowWithTooFewGrabsMovesNothing(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	g := newTestGate(c, 100)
	window(t, g, c, 3, time.Second) // 4 samples, MinSamples 5
	if got := g.Limit(); got != 100 {
		t.Fatalf("limit %d after a window of 4 grabs, want 100 unchanged", got)
	}
}

func TestWithoutATargetTheLimitIsFixed(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	g := New(Config{Min: 1, Max: 8, Start: 2, Now: c.now})
	if got := g.Limit(); got != 8 {
		t.Fatalf("limit %d without a target, want the maximum 8", got)
	}
	window(t, g, c, 20, time.Hour)
	if got := g.Limit(); got != 8 {
		t.Fatalf("limit %d moved without a target", got)
	}
}

func TestRetryAfterIsSpreadOverItsRange(t *testing.T) {
	g := New(Config{Max: 1, RetryAfterMax: 3})
	seen := map[int]int{}
	for range 3000 {
		s, err := strconv.Atoi(g.RetryAfter())
		if err != nil || s < 1 || s > 3 {
			t.Fatalf("Retry-After %q, want a whole number of seconds in [1, 3]", g.RetryAfter())
		}
		seen[s]++
	}
	for s := 1; s <= 3; s++ {
		if seen[s] < 800 { // each about 1000 of 3000
			t.Fatalf("Retry-After %d drawn %d times of 3000: not spread (%v)", s, seen[s], seen)
		}
	}
}
