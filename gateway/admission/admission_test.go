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
	return New(Config{Tolerance: 4, Min: 4, Max: 1000, Start: start,
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

func TestAStallShrinksTheLimit(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	g := newTestGate(c, 100)
	window(t, g, c, 50, 10*time.Millisecond) // the recent level: 10 ms, 50 grabs a window
	if got := g.Limit(); got != 100 {
		t.Fatalf("limit %d after the first window (not pressed), want 100", got)
	}
	// Slower, but as many grabs done: a busy machine, not a stall.
	window(t, g, c, 50, 60*time.Millisecond)
	if got := g.Limit(); got != 100 {
		t.Fatalf("limit %d after a slow window that did as much work, want 100 unchanged", got)
	}
	// Slower and a fifth of the work: the limit shrinks by tolerance x level / latency.
	window(t, g, c, 10, 60*time.Millisecond) // level now 12.5 ms: 4 x 12.5 / 60 = 0.83
	if got := g.Limit(); got != 83 {
		t.Fatalf("limit %d after a stalled window, want 83", got)
	}
	window(t, g, c, 10, time.Second) // far above: at most x 0.75 a window
	if got := g.Limit(); got != 62 {
		t.Fatalf("limit %d after a window at 100x, want 62 (0.75 a window at most)", got)
	}
	// Within about the slow averages' span (2 s) a stall shrinks the limit to a small part
	// of itself; a stall that lasts longer becomes the averages' level, and the limit holds.
	for range 20 {
		window(t, g, c, 10, 10*time.Second)
	}
	if got := g.Limit(); got > 20 {
		t.Fatalf("limit %d after 2 s of stall, want at most 20 (a fifth of where it was)", got)
	}
}

// An idle gateway's last figures say nothing about the next open: after an idle spell the
// averages start afresh, and the open's first windows are not judged against them.
func TestAnIdleSpellStartsTheAveragesAfresh(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	g := newTestGate(c, 100)
	for range 5 {
		window(t, g, c, 90, time.Millisecond) // a busy, fast period
	}
	c.t = c.t.Add(10 * time.Second) // idle
	window(t, g, c, 10, 100*time.Millisecond)
	window(t, g, c, 10, 100*time.Millisecond)
	if got := g.Limit(); got != 100 {
		t.Fatalf("limit %d after an idle spell, want 100: the old figures were judged against", got)
	}
}

// The open: latency rises from its idle level while more and more grabs complete (the
// batches fill). That is a ramp, not a queue: the limit grows, pressed, instead of shrinking.
func TestARampIsNotQueueing(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	g := newTestGate(c, 100)
	window(t, g, c, 10, 2*time.Millisecond)
	for i, took := range []time.Duration{10, 20, 40} {
		before := g.Limit()
		window(t, g, c, 300*(i+1), took*time.Millisecond) // pressed, 3x, 6x, 9x the grabs
		if got := g.Limit(); got <= before {
			t.Fatalf("limit %d after a ramp window at %s with more completions, want above %d", got, took*time.Millisecond, before)
		}
	}
}

// A saturated machine makes the grab path slow whatever the limit: once the slow latency
// is the recent level, the limit stops shrinking (and grows again when pressed), instead
// of starving the sale at its floor.
func TestASteadilySlowPathDoesNotStarveTheLimit(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	g := newTestGate(c, 256)
	window(t, g, c, 50, 5*time.Millisecond)
	for range 200 { // 20 s at 3x the first level, pressed
		window(t, g, c, 2000, 15*time.Millisecond)
	}
	if got := g.Limit(); got < 256 {
		t.Fatalf("limit %d after 20 s of a steady 15 ms, pressed: it starved (started at 256)", got)
	}
}

func TestAPressedLimitGrowsByItsSquareRootAndAnIdleOneStays(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	g := newTestGate(c, 100)
	window(t, g, c, 50, 5*time.Millisecond) // not pressed
	if got := g.Limit(); got != 100 {
		t.Fatalf("limit %d after a window that never reached it, want 100 unchanged", got)
	}
	if refused := window(t, g, c, 150, 5*time.Millisecond); refused != 50 {
		t.Fatalf("%d refused of 150 at a limit of 100, want 50", refused)
	}
	if got := g.Limit(); got != 110 {
		t.Fatalf("limit %d after a pressed window at the recent latency, want 110", got)
	}
	for range 200 {
		window(t, g, c, 2000, 5*time.Millisecond)
	}
	if got := g.Limit(); got != 1000 {
		t.Fatalf("limit %d after many pressed windows, want the maximum 1000", got)
	}
}

func TestASmallLimitCanGrow(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	g := New(Config{Tolerance: 2, Min: 1, Max: 10, Start: 1, MinSamples: 1, Now: c.now})
	window(t, g, c, 3, time.Millisecond)
	if got := g.Limit(); got != 2 {
		t.Fatalf("limit %d, want 2", got)
	}
}

func TestAWindowWithTooFewGrabsMovesNothing(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	g := newTestGate(c, 100)
	window(t, g, c, 50, time.Millisecond)
	window(t, g, c, 3, time.Second) // 4 samples, MinSamples 5
	if got := g.Limit(); got != 100 {
		t.Fatalf("limit %d after a window of 4 grabs, want 100 unchanged", got)
	}
}

func TestWithoutAToleranceTheLimitIsFixed(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	g := New(Config{Min: 1, Max: 8, Start: 2, Now: c.now})
	if got := g.Limit(); got != 8 {
		t.Fatalf("limit %d without a tolerance, want the maximum 8", got)
	}
	window(t, g, c, 20, time.Millisecond)
	window(t, g, c, 20, time.Hour)
	if got := g.Limit(); got != 8 {
		t.Fatalf("limit %d moved without a tolerance", got)
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
