// Package admission decides, for each grab that would cost a Redis call and a Kafka write,
// whether it enters the grab path now or is refused at once, so that under a crowd far
// above what the pipeline can serve the time a request waits inside the gateway stays
// bounded while the pipeline still serves at its capacity.
//
// The gate is a concurrency limit that follows the grab path's measured latency (the time
// from entering to leaving: the token's verification, the admission script and the Kafka
// acknowledgement), after the gradient design of Netflix's concurrency-limits. Every window
// (100 ms) it compares the window's mean latency (short) and completions per second with
// slow averages of the past windows (about 2 s):
//   - short above Tolerance × the latency's average while grabs complete at less than half
//     their average rate: the work behind the gate has stalled (a broker leader election, a
//     Redis failover): the limit is multiplied by Tolerance × average / short, at most down
//     to 0.75 a window, so the crowd is refused instead of piling up behind it;
//   - otherwise, if the crowd pressed against the limit in that window, it grows by its
//     square root.
//
// The comparison is with the gate's own recent behaviour, not a fixed latency target, and it
// asks for the work done to fall, not only for latency to rise: on a machine whose CPU a
// crowd saturates, the grab path is slow whatever the limit (the run queue is shared with the
// refusals and everything else) but completes as fast as ever, and refusing then only takes
// CPU from the sale (measured: docs/design.md, "The open of a sale"); at the open, latency
// rises from its idle level together with the completions. A grab over the limit is refused
// (503 overloaded with a jittered Retry-After, see RetryAfter) without waiting: there is no
// queue inside the gateway, because a queue is exactly the waiting this bounds; the client's
// backoff is the queue, spread over seconds by the jitter. While nothing completes (a
// produce that hangs until a new leader is elected) the limit cannot move, but it holds:
// the grabs inside wait, every other is refused at once.
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
	// Tolerance is how many times its recent level the grab path's latency may rise, with
	// completions below half their recent rate, before the limit shrinks (0: the limit
	// stays at Max).
	Tolerance float64
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
	// longWindows is how many windows the slow average spans (about 2 s at 100 ms).
	longWindows = 20
	// minFactor is the most the limit shrinks in one window.
	minFactor = 0.75
	// stallRate is the share of their recent rate below which completions, with latency
	// above its tolerance, mark a stall behind the gate.
	stallRate = 0.5
	// staleAfter is how many windows without an adjustment make the slow averages stale (an
	// idle gateway's last figures say nothing about the next sale's open).
	staleAfter = 10
)

// Gate is the adaptive concurrency limit. Its methods are safe for concurrent use.
type Gate struct {
	tolerance     float64
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
	long        float64 // the slow average of the windows' mean latency, in ns (0: none yet)
	rate        float64 // the slow average of the windows' completions per second
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
	if cfg.Tolerance <= 0 || cfg.Start <= 0 {
		cfg.Start = cfg.Max
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	g := &Gate{tolerance: cfg.Tolerance, min: int64(cfg.Min), max: int64(cfg.Max), window: cfg.Window,
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
	if g.tolerance <= 0 {
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
	if now.Sub(g.windowStart) > staleAfter*g.window {
		g.long, g.rate = 0, 0 // after an idle spell, start the averages afresh
	}
	if g.count >= g.minSamples {
		g.adjust(g.sum/time.Duration(g.count), float64(g.count)/now.Sub(g.windowStart).Seconds())
	}
	g.windowStart, g.sum, g.count = now, 0, 0
	g.pressed.Store(false)
}

// adjust moves the limit after a window whose grabs took short on average and completed at
// rate per second (see the package comment), and folds the window into the slow averages.
func (g *Gate) adjust(short time.Duration, rate float64) {
	cur := g.limit.Load()
	next := cur
	shortNS := float64(short)
	// A stall is waiting that buys no work: latency above its tolerance while grabs complete
	// at less than half their recent rate. A ramp (the open: latency and completions rising
	// together) is not one, nor a saturated machine (slow, but completing as fast as ever).
	queueing := g.long > 0 && shortNS > g.tolerance*g.long && rate < g.rate*stallRate
	if queueing {
		next = int64(math.Round(float64(cur) * max(g.tolerance*g.long/shortNS, minFactor)))
	} else if g.pressed.Load() {
		next = cur + max(int64(math.Sqrt(float64(cur))), 1)
	}
	g.limit.Store(min(max(next, g.min), g.max))
	if g.long == 0 {
		g.long, g.rate = shortNS, rate
	} else {
		g.long += (shortNS - g.long) / longWindows
		g.rate += (rate - g.rate) / longWindows
	}
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
