package main

import (
	"fmt"
	"strings"
)

// The open step's targets (judged in results.md by evaluate, like every target) and its
// section of results.md.

// openLoads are the open step's gateway rows in the report's order.
var openLoads = []struct{ label, name string }{{"half", "0.5×"}, {"max", "1×"}, {"crowd", "crowd rate"}, {"double", "2×"}}

func openTargets() []target {
	ts := []target{
		{Name: "open at 1×: goodput ≥ 0.9× the pipeline's closed-loop max", Row: keyOpenGateway("max"),
			Figure: "ratio:goodput_over_closed_max", Op: ">=", Threshold: 0.9, Unit: "×"},
		{Name: "open at the crowd rate: goodput ≥ 0.8× the pipeline's closed-loop max", Row: keyOpenGateway("crowd"),
			Figure: "ratio:goodput_over_closed_max", Op: ">=", Threshold: 0.8, Unit: "×"},
	}
	for _, l := range openLoads {
		ts = append(ts, target{Name: fmt.Sprintf("open at %s: p99 of every answer ≤ 10× the trivial handler's p99 at the same rate", l.name),
			Row: keyOpenGateway(l.label), Figure: "ratio:p99_over_trivial", Op: "<=", Threshold: 10, Unit: "×"})
	}
	return append(ts,
		target{Name: "open at 0.5× (no sell-out): p99 ≤ 5× the trivial handler's p99 at the same rate", Row: keyOpenGateway("half"),
			Figure: "ratio:p99_over_trivial", Op: "<=", Threshold: 5, Unit: "×"},
		target{Name: "sold-out answers (no key) at the crowd rate: ≥ 0.8× the trivial handler's answers per second", Row: keyOpenSoldOutUnkeyed,
			Figure: "ratio:rate_over_trivial", Op: ">=", Threshold: 0.8, Unit: "×"},
		target{Name: "sold-out answers (no key) at the crowd rate: p99 ≤ 2× the trivial handler's", Row: keyOpenSoldOutUnkeyed,
			Figure: "ratio:p99_over_trivial", Op: "<=", Threshold: 2, Unit: "×"},
		target{Name: "sold-out answers with a fresh Idempotency-Key: answers per second over the trivial handler's (no target)", Row: keyOpenSoldOutKeyed,
			Figure: "ratio:rate_over_trivial", Unit: "×"},
		target{Name: "sold-out answers with a fresh Idempotency-Key: p99 over the trivial handler's (no target)", Row: keyOpenSoldOutKeyed,
			Figure: "ratio:p99_over_trivial", Unit: "×"},
		target{Name: "open at the crowd rate: gateway peak RSS < 150 MB (2,000 connections unless -open-connections)", Row: keyOpenGateway("crowd"),
			Figure: "extra:gateway_peak_rss_mb", Op: "<", Threshold: 150, Unit: "MB"},
		target{Name: "open at 0.5×: gateway CPU per admitted grab ≤ 1.5× the trivial handler's CPU per request", Row: keyOpenGateway("half"),
			Figure: "ratio:cpu_per_admitted_over_trivial", Op: "<=", Threshold: 1.5, Unit: "×"},
		target{Name: "entering a draw at 1×: entries/s ≥ the pipeline's closed-loop max (grabs/s)", Row: keyOpenDraw("max"),
			Figure: "ratio:entries_over_closed_max", Op: ">=", Threshold: 1, Unit: "×"},
		target{Name: "entering a draw at the crowd rate: entries/s over the pipeline's closed-loop max (no target)", Row: keyOpenDraw("crowd"),
			Figure: "ratio:entries_over_closed_max", Unit: "×"},
	)
}

// openSection is the open step's tables; empty when the step did not run.
func (r report) openSection() string {
	closed, crowd := r.find(keyOpenClosedMax), r.find(keyOpenCrowd)
	if closed == nil || crowd == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n## The open of a sale under a crowd (vegeta, open loop)\n\n"+
		"vegeta (its own process, fresh connections, keep-alive) sends at a fixed rate whatever the answers do, every "+
		"request a different user without an Idempotency-Key, to a sale whose session opens %s after the attack "+
		"starts (created and preheated through the admin API), one hot prize, per-user limit 1, the whole pipeline "+
		"running (gateway, one consumer, reconciler on their shipped settings, the rate limits off). Each row is beside "+
		"the trivial handler at the same rate, connections and duration in the same repetition (× columns). Latency is "+
		"timed from each request's due time in vegeta's schedule. Goodput: 202s per second from the open to the last "+
		"202. Times are seconds after the open. CPU: utime + stime over the run (and, for the pipeline, until its "+
		"orders were committed); the generator's is vegeta's own over the attack.\n\n"+
		"Closed-loop max of the whole pipeline (1×): %s grabs/s. Crowd rate (the highest of %s/s that vegeta sustains "+
		"against the trivial handler, no error and ≥ 99 %% of the rate): %s/s.\n\n", openLead, spr(closed.ThroughputPS),
		rateList(crowdRates), spr(crowd.ThroughputPS))
	b.WriteString(r.openGatewayTable())
	b.WriteString(r.openTrivialTable())
	b.WriteString(r.openMixTable())
	b.WriteString(r.openCPUTable())
	b.WriteString(r.openSoldOutTable())
	b.WriteString(r.openDrawTable())
	return b.String()
}

// openDrawTable is the draw rows: the same crowd entering a draw prize's window.
func (r report) openDrawTable() string {
	var b strings.Builder
	for _, l := range openLoads {
		x := r.find(keyOpenDraw(l.label))
		if x == nil {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("\nEntering a draw at the open: the same crowd, every request a new user, against a draw prize whose " +
				"entry window spans the attack (each grab an entry: one Redis script, no Kafka write); entries/s from the open " +
				"to the last 202 entered, beside the grab path's closed-loop max; the draw then checked (the frozen set is " +
				"exactly the users answered 202, the stock's worth of winners admitted, every one an order):\n\n" +
				"| load | offered/s | achieved/s | entries/s (× closed max) | entries | p50 ms | p99 ms (× trivial) | max ms | " +
				"gateway CPU µs per entry | gateway peak RSS MB | draw done s after the attack | answers |\n" +
				"|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", l.name, exOr(x, "offered_per_s"),
			exOr(x, "achieved_per_s"), withRatio(exOr(x, "goodput_per_s"), x, "entries_over_closed_max"), exOr(x, "entries"),
			spr(x.P50ms), withRatio(spr(x.P99ms), x, "p99_over_trivial"), exOr(x, "max_ms"), exOr(x, "cpu_us_per_entry_gateway"),
			exOr(x, "gateway_peak_rss_mb"), exOr(x, "draw_done_s"), mixOf(x))
	}
	return b.String()
}

func rateList(rates []int) string {
	var parts []string
	for _, r := range rates {
		parts = append(parts, thousands(float64(r)))
	}
	return strings.Join(parts, ", ")
}

// exOr is a row's extra as "median (min–max)", or "–" when the row lacks it.
func exOr(x *row, k string) string {
	if v, ok := x.Extra[k]; ok {
		return spr(v)
	}
	return "–"
}

// withRatio is a figure and, when the row has it, its ratio: "12 [3.1× (2.9–3.3)]".
func withRatio(fig string, x *row, ratio string) string {
	v, ok := x.Ratios[ratio]
	switch {
	case !ok:
		return fig
	case v.N <= 1 || v.Min == v.Max:
		return fmt.Sprintf("%s [%s×]", fig, num(v.Median))
	}
	return fmt.Sprintf("%s [%s× (%s–%s)]", fig, num(v.Median), num(v.Min), num(v.Max))
}

func (r report) openGatewayTable() string {
	var b strings.Builder
	b.WriteString("| load | offered/s | achieved/s | goodput/s (× closed max) | p50 ms | p99 ms (× trivial) | max ms | " +
		"202s p50 / p99 / max ms | first sold_out s | last 202 s | sold_out/s after the last 202 (× trivial/s) | open after attack start s | " +
		"gateway peak RSS MB (× trivial) | gateway CPU µs per 202 (× trivial per request) |\n" +
		"|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, l := range openLoads {
		x := r.find(keyOpenGateway(l.label))
		if x == nil {
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s / %s / %s | %s | %s | %s | %s | %s | %s |\n", l.name,
			exOr(x, "offered_per_s"), exOr(x, "achieved_per_s"), withRatio(exOr(x, "goodput_per_s"), x, "goodput_over_closed_max"),
			spr(x.P50ms), withRatio(spr(x.P99ms), x, "p99_over_trivial"), exOr(x, "max_ms"),
			exOr(x, "admitted_p50_ms"), exOr(x, "admitted_p99_ms"), exOr(x, "admitted_max_ms"),
			exOr(x, "first_sold_out_s"), exOr(x, "last_admitted_s"), withRatio(exOr(x, "sold_out_after_per_s"), x, "sold_out_after_over_trivial"),
			exOr(x, "open_after_attack_start_s"), withRatio(exOr(x, "gateway_peak_rss_mb"), x, "peak_rss_over_trivial"), withRatio(exOr(x, "cpu_us_per_admitted_gateway"), x, "cpu_per_admitted_over_trivial"))
	}
	return b.String()
}

func (r report) openTrivialTable() string {
	var b strings.Builder
	b.WriteString("\nThe trivial handler at the same rates (`bench -serve strategies`, /trivial):\n\n" +
		"| load | offered/s | achieved/s | p50 ms | p99 ms | max ms | peak RSS MB | CPU µs per request | generator CPU s |\n" +
		"|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, l := range openLoads {
		x := r.find(keyOpenTrivial(l.label))
		if x == nil {
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", l.name, exOr(x, "offered_per_s"), exOr(x, "achieved_per_s"),
			spr(x.P50ms), spr(x.P99ms), exOr(x, "max_ms"), exOr(x, "trivial_peak_rss_mb"), exOr(x, "cpu_us_per_request_trivial"),
			exOr(x, "cpu_s_generator"))
	}
	return b.String()
}

// mixOf is a row's answer mix from its answers_* extras, medians over repetitions.
func mixOf(x *row) string {
	var parts []string
	for _, k := range sortedKeys(x.Extra) {
		if kind, ok := strings.CutPrefix(k, "answers_"); ok {
			parts = append(parts, fmt.Sprintf("%s: %s", strings.Replace(kind, "_", " ", 1), spr(x.Extra[k])))
		}
	}
	return strings.Join(parts, "; ")
}

func (r report) openMixTable() string {
	var b strings.Builder
	b.WriteString("\nThe answers (status and the body's `error` code), per run:\n\n| load | requests | answers |\n|---|---:|---|\n")
	for _, l := range openLoads {
		if x := r.find(keyOpenGateway(l.label)); x != nil {
			fmt.Fprintf(&b, "| %s | %s | %s |\n", l.name, exOr(x, "requests"), mixOf(x))
		}
	}
	return b.String()
}

// openProcs are the processes of the CPU table, in its order.
var openProcs = []string{"gateway", "generator", "redis", "kafka", "mysql", "consumer", "reconciler"}

func (r report) openCPUTable() string {
	var b strings.Builder
	b.WriteString("\nCPU seconds per process over each gateway run (a process not found here is –):\n\n| load | " +
		strings.Join(openProcs, " | ") + " |\n|---|" + strings.Repeat("---:|", len(openProcs)) + "\n")
	for _, l := range openLoads {
		x := r.find(keyOpenGateway(l.label))
		if x == nil {
			continue
		}
		cells := []string{l.name}
		for _, p := range openProcs {
			cells = append(cells, exOr(x, "cpu_s_"+p))
		}
		fmt.Fprintf(&b, "| %s |\n", strings.Join(cells, " | "))
	}
	return b.String()
}

func (r report) openSoldOutTable() string {
	triv := r.find(keyOpenSoldOutTrivial)
	if triv == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString("\nThe sold-out prize's answers after the crowd-rate run, at the crowd rate, every request a new user " +
		"(the trivial handler's column is its 202s):\n\n" +
		"| run | offered/s | achieved/s | sold_out answers/s (× trivial) | p50 ms | p99 ms (× trivial) | max ms | answers |\n" +
		"|---|---:|---:|---:|---:|---:|---:|---|\n")
	fmt.Fprintf(&b, "| trivial handler | %s | %s | %s | %s | %s | %s | %s |\n", exOr(triv, "offered_per_s"), exOr(triv, "achieved_per_s"),
		spr(triv.ThroughputPS), spr(triv.P50ms), spr(triv.P99ms), exOr(triv, "max_ms"), mixOf(triv))
	for _, run := range []struct{ key, name string }{{keyOpenSoldOutUnkeyed, "no Idempotency-Key"}, {keyOpenSoldOutKeyed, "a fresh Idempotency-Key"}} {
		x := r.find(run.key)
		if x == nil {
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", run.name, exOr(x, "offered_per_s"), exOr(x, "achieved_per_s"),
			withRatio(spr(x.ThroughputPS), x, "rate_over_trivial"), spr(x.P50ms), withRatio(spr(x.P99ms), x, "p99_over_trivial"),
			exOr(x, "max_ms"), mixOf(x))
	}
	return b.String()
}
