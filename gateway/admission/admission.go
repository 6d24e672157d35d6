// Package admission decides, for each grab that would cost a Redis call and a Kafka write,
// whether it enters the grab path now or is refused at once, so that under a crowd far
// above what the pipeline can serve the time a request waits inside the gateway stays
// bounded while the pipeline still serves at its capacity.
//
// The gate is a concurrency limit that follows the grab path's measured latency (the time
// from entering to leaving: the admission script and the Kafka acknowledgement). Every
// window the limit is multiplied by target / (the window's mean latency), clamped to
// [0.75, 1.25]: latency above the target shrinks it, latency below grows it, but only in a
// window where the limit was reached (a limit nobody presses against says nothing about
// whether more would help). At equilibrium the grab path holds about throughput × target
// grabs, which is the concurrency the batching Redis coalescer and Kafka writer need to run
// at their maximum, and no more. A grab over the limit is refused (503 overloaded with a
// jittered Retry-After, see RetryAfter) without waiting: there is no queue inside the
// gateway, because a queue is exactly the waiting this bounds; the client's backoff is the
// queue, spread over seconds by the jitter.
//
// Why not a CoDel queue: CoDel judges the time a request spent queued, and the requests of a
// flash crowd queue where the gateway cannot see them (the listen backlog, the connections'
// unread bytes, the run queue of a saturated CPU); the latency of the work behind the gate
// is what the gateway can measure, and what a larger limit makes worse.
package admission

import (
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Config sets the gate.
type Config struct {
	// Target is the grab path's mean latency the limit steers to (0: the limit stays at Max).
	Target time.Duration
	// Min and Max bound the limit; the gate starts at Start (clamped into [Min, Max]).
	Min, Max, Start int
	// Window is how often the limit is recomputed, from the latencies of that window.
	Window time.Duration
	// MinSamples is how many grabs a window needs before it moves the limit.
	MinSamples int
	// RetryAfterMax is the largest Retry-After a refusal carries, in whole seconds (at least 1):
	// each refusal draws one uniformly from 1 to RetryAfterMax.
	RetryAfterMax int
	Now           func() time.Time
}

// Defaults for what Config leaves at zero.
const (
	DefaultWindow     = 100 * time.Millisecond
	DefaultMinSamples = 20
)

// Gate is the adaptive concurrency limit. Its methods are safe for concurrent use.
type Gate struct {
	target        time.Duration
	min, max      int64
	window        time.Duration
	minSamples    int64
	retryAfterMax int
	now           func() time.Time

	limit    atomic.Int64
	inflight atomic.Int64
	pressed  atomic.Bool // the limit was reached in the current window

	mu          sync.Mutex
	windowStart time.Time
	sum         time.Duration
	count       int64
}

// New makes a gate from cfg.
func New(cfg Config) *Gate {
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.MinSamples <= 0 {
		cfg.MinSamples = DefaultMinSamples
	}
	cfg.Min = max(cfg.Min, 1)
	cfg.Max = max(cfg.Max, cfg.Min)
	if cfg.Target <= 0 || cfg.Start <= 0 {
		cfg.Start = cfg.Max
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	g := &Gate{target: cfg.Target, min: int64(cfg.Min), max: int64(cfg.Max), window: cfg.Window,
		minSamples: int64(cfg.MinSamples), retryAfterMax: max(cfg.RetryAfterMax, 1), now: cfg.Now}
	g.limit.Store(min(max(int64(cfg.Start), g.min), g.max))
	g.windowStart = cfg.Now()
	return g
}

// Enter takes a place in the grab path, or reports false when the limit is reached (the
// grab is then to be refused). A true must be followed by exactly one Leave.
func (g *Gate) Enter() bool {
	for {
		n := g.inflight.Load()
		if n >= g.limit.Load() {
			g.pressed.Store(true)
			return false
		}
		if g.inflight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// Leave gives the place back and records how long the grab took since it entered.
func (g *Gate) Leave(took time.Duration) {
	g.inflight.Add(-1)
	if g.target <= 0 {
		return
	}
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sum += took
	g.count++
	if now.Sub(g.windowStart) < g.window {
		return
	}
	if g.count >= g.minSamples {
		g.adjust(g.sum / time.Duration(g.count))
	}
	g.windowStart, g.sum, g.count = now, 0, 0
	g.pressed.Store(false)
}

// adjust moves the limit by target / mean, clamped; growth only when the limit was pressed.
func (g *Gate) adjust(mean time.Duration) {
	factor := 1.25
	if mean > 0 {
		factor = min(max(float64(g.target)/float64(mean), 0.75), 1.25)
	}
	if factor > 1 && !g.pressed.Load() {
		return
	}
	cur := g.limit.Load()
	next := int64(math.Round(float64(cur) * factor))
	if factor > 1 && next == cur {
		next++ // a small limit must still be able to grow
	}
	g.limit.Store(min(max(next, g.min), g.max))
}

// Limit is the current limit.
func (g *Gate) Limit() int { return int(g.limit.Load()) }

// InFlight is how many grabs are inside the gate now.
func (g *Gate) InFlight() int { return int(g.inflight.Load()) }

// RetryAfter is the Retry-After value for a refusal: whole seconds drawn uniformly from 1
// to RetryAfterMax, so the refused part of a crowd that arrived in one instant comes back
// spread over that many seconds rather than as the same wave one second later.
func (g *Gate) RetryAfter() string {
	return strconv.Itoa(1 + rand.IntN(g.retryAfterMax))
}
