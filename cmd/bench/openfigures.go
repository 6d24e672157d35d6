package main

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/seckill-pipeline/seckill/internal/load"
)

// The open step's figures and invariants, computed from decoded vegeta answers: pure
// functions, so they are tested with hand-made results (open_test.go).

// latencies are the quantiles of one set of answers, in ms.
type latencies struct {
	n                   int
	p50, p99, p999, max float64
}

func latenciesOf(ms []float64) latencies {
	if len(ms) == 0 {
		return latencies{}
	}
	s := slices.Clone(ms)
	slices.Sort(s)
	// internal/load's rank, so these rows read like the rest of the bench.
	at := func(q float64) float64 { return load.Quantile(s, q) }
	return latencies{n: len(s), p50: at(.5), p99: at(.99), p999: at(.999), max: s[len(s)-1]}
}

const (
	kindAdmitted = "202"
	kindSoldOut  = "409 sold_out"
)

// openFigures is one attack's figures.
type openFigures struct {
	rate            int // offered, per second
	requests        int // sent
	answered        int // with an HTTP answer
	transportErrors int
	firstTransport  string
	mix             map[string]int // answers by kind ("202", "409 sold_out", ...)

	achievedPS float64   // requests sent per second, first send to last (vegeta's Rate)
	began      time.Time // when the attack started (the schedule's origin)
	firstSent  time.Time
	lastEnd    time.Time

	// Latency is timed from when each request was due (began + (seq+1)/rate, vegeta's
	// schedule), not from when vegeta got round to sending it: a generator that falls
	// behind on a busy machine shows as latency, as in the bench's other open-loop rows.
	all, admitted latencies
	sentP99ms     float64 // vegeta's own latency (from the send), p99 of every answer
	lagP99ms      float64 // how far behind schedule requests were sent, p99

	server5xx    int      // 5xx answers other than 503
	noRetryAfter int      // 503 answers without Retry-After
	requestIDs   []string // the 202s' request ids
	missingIDs   int      // 202s without a request id

	// Relative to the open (set only when the attack had one).
	hasOpen         bool
	openAfterStartS float64 // the open, seconds after the attack started
	goodputPS       float64 // 202s per second from the open until the last 202
	hasAdmitted     bool
	lastAdmittedS   float64 // the last 202's answer, seconds after the open
	hasSoldOut      bool
	firstSoldOutS   float64 // the first sold_out answer, seconds after the open
	soldOutAfterPS  float64 // sold_out answers per second after the last 202
}

// figuresOf computes an attack's figures; open is when the session opened (zero: no open
// in this attack).
func figuresOf(as []hit, rate int, open time.Time) openFigures {
	f := openFigures{rate: rate, requests: len(as), mix: map[string]int{}}
	if len(as) == 0 || rate <= 0 {
		return f
	}
	interval := time.Second / time.Duration(rate) // vegeta's constant pacer: hit k is due at (k+1) intervals
	due := func(a hit) time.Duration { return time.Duration(a.seq+1) * interval }
	// No request is sent before it is due, so the earliest send less its due offset is the
	// attack's start (exact when one request went out on time).
	f.began, f.firstSent = as[0].sent.Add(-due(as[0])), as[0].sent
	var lastSent time.Time
	for _, a := range as {
		f.began = minTime(f.began, a.sent.Add(-due(a)))
		f.firstSent = minTime(f.firstSent, a.sent)
		lastSent = maxTime(lastSent, a.sent)
	}
	if span := lastSent.Sub(f.firstSent).Seconds(); len(as) > 1 && span > 0 {
		f.achievedPS = float64(len(as)-1) / span
	}
	var all, admitted, sent, lag []float64
	for _, a := range as {
		lag = append(lag, ms(a.sent.Sub(f.began.Add(due(a)))))
		if a.code == 0 {
			f.transportErrors++
			if f.firstTransport == "" {
				f.firstTransport = a.transport
			}
			continue
		}
		f.answered++
		f.mix[a.kind]++
		f.lastEnd = maxTime(f.lastEnd, a.end())
		fromDue := ms(a.end().Sub(f.began.Add(due(a))))
		all, sent = append(all, fromDue), append(sent, ms(a.latency))
		switch {
		case a.code == 202:
			admitted = append(admitted, fromDue)
			if a.requestID == "" {
				f.missingIDs++
			} else {
				f.requestIDs = append(f.requestIDs, a.requestID)
			}
		case a.code == 503 && !a.retryAfter:
			f.noRetryAfter++
		case a.code >= 500 && a.code != 503:
			f.server5xx++
		}
	}
	f.all, f.admitted = latenciesOf(all), latenciesOf(admitted)
	f.sentP99ms, f.lagP99ms = latenciesOf(sent).p99, latenciesOf(lag).p99
	if !open.IsZero() {
		f.fromOpen(as, open)
	}
	return f
}

// fromOpen sets the figures timed from the open: goodput, the last 202 and the first
// sold_out answer, and how fast sold_out answers came after the last 202.
func (f *openFigures) fromOpen(as []hit, open time.Time) {
	f.hasOpen, f.openAfterStartS = true, open.Sub(f.began).Seconds()
	var lastAdmitted, firstSoldOut time.Time
	admitted := 0
	for _, a := range as {
		switch {
		case a.code == 202:
			admitted++
			lastAdmitted = maxTime(lastAdmitted, a.end())
		case a.kind == kindSoldOut && a.end().After(open):
			if firstSoldOut.IsZero() || a.end().Before(firstSoldOut) {
				firstSoldOut = a.end()
			}
		}
	}
	if f.hasAdmitted = admitted > 0; f.hasAdmitted {
		f.lastAdmittedS = lastAdmitted.Sub(open).Seconds()
		if f.lastAdmittedS > 0 {
			f.goodputPS = float64(admitted) / f.lastAdmittedS
		}
	}
	if f.hasSoldOut = !firstSoldOut.IsZero(); f.hasSoldOut {
		f.firstSoldOutS = firstSoldOut.Sub(open).Seconds()
	}
	if !f.hasAdmitted || !f.hasSoldOut {
		return
	}
	after := 0
	for _, a := range as {
		if a.kind == kindSoldOut && a.end().After(lastAdmitted) {
			after++
		}
	}
	if span := f.lastEnd.Sub(lastAdmitted).Seconds(); span > 0 {
		f.soldOutAfterPS = float64(after) / span
	}
}

// ratePS is how many answers of kind came per second, from the first send to the last
// answer.
func (f openFigures) ratePS(kind string) float64 {
	span := f.lastEnd.Sub(f.firstSent).Seconds()
	if span <= 0 {
		return 0
	}
	return float64(f.mix[kind]) / span
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// mixKey is an answer kind as an extra key: "409 sold_out" -> answers_409_sold_out.
func mixKey(kind string) string { return "answers_" + strings.ReplaceAll(kind, " ", "_") }

// mixLine is the answer mix for the log, most frequent first.
func mixLine(mix map[string]int) string {
	kinds := sortedKeys(mix)
	slices.SortStableFunc(kinds, func(a, b string) int { return mix[b] - mix[a] })
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s: %d", k, mix[k]))
	}
	return strings.Join(parts, ", ")
}

// sampleOf is an attack's row: throughput is every HTTP answer per second (first send to
// last answer), latency from the due time.
func sampleOf(f openFigures) *sample {
	s := &sample{ThroughputPS: float64(f.answered) / math.Max(f.lastEnd.Sub(f.firstSent).Seconds(), 1e-9),
		P50ms: f.all.p50, P99ms: f.all.p99, P999ms: f.all.p999,
		Extra: map[string]any{"offered_per_s": f.rate, "achieved_per_s": f.achievedPS, "requests": f.requests,
			"transport_errors": f.transportErrors, "max_ms": f.all.max, "p99_from_send_ms": f.sentP99ms,
			"send_lag_p99_ms": f.lagP99ms}}
	if f.answered == 0 {
		s.ThroughputPS = 0
	}
	for k, n := range f.mix {
		s.Extra[mixKey(k)] = n
	}
	if f.admitted.n > 0 {
		s.Extra["admitted_p50_ms"], s.Extra["admitted_p99_ms"], s.Extra["admitted_max_ms"] = f.admitted.p50, f.admitted.p99, f.admitted.max
	}
	if !f.hasOpen {
		return s
	}
	s.Extra["open_after_attack_start_s"] = f.openAfterStartS
	s.Extra["goodput_per_s"] = f.goodputPS
	if f.hasAdmitted {
		s.Extra["last_admitted_s"] = f.lastAdmittedS
	}
	if f.hasSoldOut {
		s.Extra["first_sold_out_s"] = f.firstSoldOutS
	}
	if f.hasAdmitted && f.hasSoldOut {
		s.Extra["sold_out_after_per_s"] = f.soldOutAfterPS
	}
	return s
}

// ---------------------------------------------------------------- invariants

// answerCheck is the invariants every attack's answers keep: every request answered (a
// transport error is a crowd member who got nothing), no 5xx but 503, every 503 with
// Retry-After (the crowd's clients retry on it), and no target sent twice (one user, one
// request).
func answerCheck(f openFigures, targets int) error {
	var errs []error
	if f.transportErrors > 0 {
		errs = append(errs, fmt.Errorf("%d of %d requests got no answer (first: %s)", f.transportErrors, f.requests, f.firstTransport))
	}
	if f.server5xx > 0 {
		errs = append(errs, fmt.Errorf("%d answers were a 5xx other than 503 (%s)", f.server5xx, mixLine(f.mix)))
	}
	if f.noRetryAfter > 0 {
		errs = append(errs, fmt.Errorf("%d answers 503 without Retry-After", f.noRetryAfter))
	}
	if f.requests > targets {
		errs = append(errs, fmt.Errorf("%d requests from %d targets: users repeated", f.requests, targets))
	}
	return errors.Join(errs...)
}

// trivialCheck is answerCheck for the trivial handler, which answers nothing but 202: any
// other answer is the comparison failing, not a figure.
func trivialCheck(f openFigures, targets int) error {
	err := answerCheck(f, targets)
	if other := f.answered - f.mix[kindAdmitted]; other > 0 {
		err = errors.Join(err, fmt.Errorf("the trivial handler answered %d requests with something else than 202 (%s)", other, mixLine(f.mix)))
	}
	return err
}

// stockCheck is the stock's invariant: never more admitted than the stock, and exactly the
// stock on a prize the crowd must sell out. A count that could not be read fails it.
func stockCheck(admitted, stock int64, mustSellOut bool, readErr error) error {
	switch {
	case readErr != nil:
		return fmt.Errorf("admitted grabs: cannot be read: %w", readErr)
	case admitted > stock:
		return fmt.Errorf("oversold: %d admitted of a stock of %d", admitted, stock)
	case mustSellOut && admitted != stock:
		return fmt.Errorf("not sold out: %d admitted of a stock of %d by the end of the attack", admitted, stock)
	}
	return nil
}

// ordersCheck is the persistence invariant after the drain: every 202's request id is an
// order in MySQL, and the orders are exactly the admitted grabs. Counts that could not be
// read fail it.
func ordersCheck(f openFigures, orderIDs map[string]bool, orders, admitted int64, readErr error) error {
	if readErr != nil {
		return fmt.Errorf("orders: cannot be read: %w", readErr)
	}
	var errs []error
	if f.missingIDs > 0 {
		errs = append(errs, fmt.Errorf("%d 202s carried no request_id (they cannot be checked against the orders)", f.missingIDs))
	}
	missing := 0
	first := ""
	for _, id := range f.requestIDs {
		if !orderIDs[id] {
			if missing++; first == "" {
				first = id
			}
		}
	}
	if missing > 0 {
		errs = append(errs, fmt.Errorf("%d of %d 202s are no order in MySQL (first: %s)", missing, len(f.requestIDs), first))
	}
	if orders != admitted {
		errs = append(errs, fmt.Errorf("%d orders for %d admitted grabs", orders, admitted))
	}
	return errors.Join(errs...)
}

// ---------------------------------------------------------------- the crowd rate

// crowdRates are the rates tried against the trivial handler, highest first.
var crowdRates = []int{20_000, 15_000, 12_000, 10_000, 8_000, 6_000, 4_000, 3_000, 2_000}

// crowdVerdict says whether vegeta sustained rate against the trivial handler for d: every
// request answered 202, and at least 99 % of the offered requests and rate achieved; nil
// when it did, else why not.
func crowdVerdict(f openFigures, rate int, d time.Duration) error {
	want := float64(rate) * d.Seconds()
	switch {
	case f.transportErrors > 0:
		return fmt.Errorf("%d requests got no answer (first: %s)", f.transportErrors, f.firstTransport)
	case f.answered != f.mix[kindAdmitted]:
		return fmt.Errorf("answers other than 202 (%s)", mixLine(f.mix))
	case float64(f.requests) < 0.99*want:
		return fmt.Errorf("sent %d of %.0f requests", f.requests, want)
	case f.achievedPS < 0.99*float64(rate):
		return fmt.Errorf("achieved %.0f/s", f.achievedPS)
	}
	return nil
}

// crowdSearch tries rates highest first, each for window (try runs it), and returns the
// first rate crowdVerdict says was sustained, with a line per rate tried; err is a try that
// could not run at all, or no rate sustained.
func crowdSearch(rates []int, window time.Duration, try func(rate int) (openFigures, error)) (int, []string, error) {
	var tried []string
	for _, r := range rates {
		f, err := try(r)
		if err != nil {
			return 0, tried, fmt.Errorf("crowd rate %d/s: %w", r, err)
		}
		verdict := crowdVerdict(f, r, window)
		if verdict == nil {
			return r, append(tried, fmt.Sprintf("%d/s sustained", r)), nil
		}
		tried = append(tried, fmt.Sprintf("%d/s not sustained: %v", r, verdict))
	}
	return 0, tried, fmt.Errorf("vegeta sustained none of %v against the trivial handler: %s", rates, strings.Join(tried, "; "))
}

// ---------------------------------------------------------------- ratios

// setOpenRatios sets a gateway row's ratios to the trivial handler's run at the same rate
// (in the same repetition) and to the pipeline's closed-loop max; a figure either side
// lacks, or a zero denominator, leaves its ratio out.
func setOpenRatios(gw, triv *sample, closedMax float64) {
	if gw.Ratios == nil {
		gw.Ratios = map[string]float64{}
	}
	set := func(name string, num, den float64, ok bool) {
		if ok && den > 0 && !math.IsNaN(num) {
			gw.Ratios[name] = num / den
		}
	}
	x := func(s *sample, k string) (float64, bool) { return number(s.Extra[k]) }
	set("p50_over_trivial", gw.P50ms, triv.P50ms, true)
	set("p99_over_trivial", gw.P99ms, triv.P99ms, true)
	gmax, ok1 := x(gw, "max_ms")
	tmax, ok2 := x(triv, "max_ms")
	set("max_over_trivial", gmax, tmax, ok1 && ok2)
	ga, ok1 := x(gw, "achieved_per_s")
	ta, ok2 := x(triv, "achieved_per_s")
	set("achieved_over_trivial", ga, ta, ok1 && ok2)
	if ap, ok := x(gw, "admitted_p99_ms"); ok {
		set("admitted_p99_over_trivial", ap, triv.P99ms, true)
	}
	gc, ok1 := x(gw, "cpu_us_per_admitted_gateway")
	tc, ok2 := x(triv, "cpu_us_per_request_trivial")
	set("cpu_per_admitted_over_trivial", gc, tc, ok1 && ok2)
	if gp, ok := x(gw, "goodput_per_s"); ok {
		set("goodput_over_closed_max", gp, closedMax, true)
		// The trivial handler answers every request 202: its throughput is its goodput.
		set("goodput_over_trivial", gp, triv.ThroughputPS, true)
	}
	if sa, ok := x(gw, "sold_out_after_per_s"); ok {
		set("sold_out_after_over_trivial", sa, triv.ThroughputPS, true)
	}
	gr, ok1 := x(gw, "gateway_peak_rss_mb")
	tr, ok2 := x(triv, "trivial_peak_rss_mb")
	set("peak_rss_over_trivial", gr, tr, ok1 && ok2)
}

// setSoldOutRatios sets a sold-out row's ratios to the trivial handler's run at the same
// rate: its sold_out answers per second over the trivial's 202s per second (both in
// ThroughputPS), and the latencies.
func setSoldOutRatios(so, triv *sample) {
	setOpenRatios(so, triv, 0)
	if triv.ThroughputPS > 0 {
		so.Ratios["rate_over_trivial"] = so.ThroughputPS / triv.ThroughputPS
	}
}
