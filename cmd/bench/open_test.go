package main

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// vegeta's results file, written by its own encoder and read back: a 202's request id, the
// error code of a refusal from its body, Retry-After, and a request that got no answer
// told apart from an answer vegeta also marks with an error ("409 Conflict").
func TestDecodeHits(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	retry := http.Header{"Retry-After": {"1"}, "Content-Type": {"application/json"}}
	in := []vegeta.Result{
		{Seq: 0, Code: 202, Timestamp: t0, Latency: time.Millisecond, Body: []byte(`{"request_id":"1-2-abc","status":"queued"}`)},
		{Seq: 1, Code: 409, Timestamp: t0, Latency: time.Millisecond, Error: "409 Conflict", Body: []byte(`{"error":"sold_out","message":"sold out"}`)},
		{Seq: 2, Code: 503, Timestamp: t0, Latency: time.Millisecond, Error: "503 Service Unavailable", Headers: retry,
			Body: []byte(`{"error":"overloaded","message":"too many requests in flight; retry shortly"}`)},
		{Seq: 3, Code: 502, Timestamp: t0, Latency: time.Millisecond, Error: "502 Bad Gateway", Body: []byte("<html>bad gateway</html>")},
		{Seq: 4, Code: 0, Timestamp: t0, Latency: time.Second, Error: "dial tcp 127.0.0.1:1: connect: connection refused"},
		{Seq: 5, Code: 202, Timestamp: t0, Latency: time.Millisecond, Body: []byte(`{"status":"queued"}` + "\n")}, // the trivial handler's
	}
	var buf bytes.Buffer
	enc := vegeta.NewEncoder(&buf)
	for i := range in {
		if err := enc.Encode(&in[i]); err != nil {
			t.Fatal(err)
		}
	}
	got, err := decodeHits(&buf)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		kind, requestID, transport string
		retryAfter                 bool
	}{
		{"202", "1-2-abc", "", false},
		{"409 sold_out", "", "", false},
		{"503 overloaded", "", "", true},
		{"502", "", "", false},
		{"", "", "dial tcp 127.0.0.1:1: connect: connection refused", false},
		{"202", "", "", false},
	}
	if len(got) != len(want) {
		t.Fatalf("%d hits decoded, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.kind != w.kind || g.requestID != w.requestID || g.transport != w.transport || g.retryAfter != w.retryAfter || g.seq != uint64(i) {
			t.Errorf("hit %d = %+v, want %+v", i, g, w)
		}
	}
	if _, err := decodeHits(strings.NewReader("not gob")); err == nil {
		t.Fatal("a file that is not vegeta's results decoded")
	}
}

// sale is a hand-made attack at 10/s (due every 100 ms from t0): ten not_open answers
// before the open at t0+1s, five 202s (one sent 50 ms late), five sold_outs.
func sale(t0 time.Time) []hit {
	var hs []hit
	at := func(seq int) time.Time { return t0.Add(time.Duration(seq+1) * 100 * time.Millisecond) }
	for seq := range 10 {
		hs = append(hs, hit{seq: uint64(seq), code: 409, kind: "409 not_open", sent: at(seq), latency: 5 * time.Millisecond})
	}
	for seq := 10; seq < 15; seq++ {
		h := hit{seq: uint64(seq), code: 202, kind: "202", sent: at(seq), latency: 10 * time.Millisecond, requestID: fmt.Sprintf("r%d", seq)}
		if seq == 12 {
			h.sent = h.sent.Add(50 * time.Millisecond)
		}
		hs = append(hs, h)
	}
	for seq := 15; seq < 20; seq++ {
		hs = append(hs, hit{seq: uint64(seq), code: 409, kind: kindSoldOut, sent: at(seq), latency: 2 * time.Millisecond})
	}
	return hs
}

func approx(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

func TestFiguresOfASale(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	open := t0.Add(time.Second)
	f := figuresOf(sale(t0), 10, open)
	if !f.began.Equal(t0) || !approx(f.openAfterStartS, 1) {
		t.Fatalf("began %v (want %v), open %.3fs after, want 1", f.began, t0, f.openAfterStartS)
	}
	if f.requests != 20 || f.answered != 20 || f.transportErrors != 0 {
		t.Fatalf("requests %d, answered %d, transport errors %d", f.requests, f.answered, f.transportErrors)
	}
	if f.mix["202"] != 5 || f.mix["409 not_open"] != 10 || f.mix[kindSoldOut] != 5 {
		t.Fatalf("mix %v", f.mix)
	}
	// First send at 100 ms, last at 2 s: 19 intervals in 1.9 s.
	if !approx(f.achievedPS, 10) {
		t.Errorf("achieved %.3f/s, want 10", f.achievedPS)
	}
	// Timed from the due time: the late 202 took 10 ms after a 50 ms late start.
	if f.all.max != 60 || f.admitted.max != 60 || f.admitted.p50 != 10 || f.all.p50 != 5 || f.sentP99ms != 10 || f.lagP99ms != 50 {
		t.Errorf("latencies: all %+v, 202s %+v, from send p99 %v, lag p99 %v", f.all, f.admitted, f.sentP99ms, f.lagP99ms)
	}
	// The last 202 answered at 1.51 s (seq 14, due at 1.5 s): 5 in 0.51 s from the open.
	if !f.hasAdmitted || !approx(f.lastAdmittedS, 0.51) || !approx(f.goodputPS, 5/0.51) {
		t.Errorf("last 202 %.3fs, goodput %.3f/s", f.lastAdmittedS, f.goodputPS)
	}
	// The first sold_out answered at 1.602 s; five of them after the last 202 until 2.002 s.
	if !f.hasSoldOut || !approx(f.firstSoldOutS, 0.602) || !approx(f.soldOutAfterPS, 5/0.492) {
		t.Errorf("first sold_out %.3fs, after the last 202 %.3f/s", f.firstSoldOutS, f.soldOutAfterPS)
	}
	if strings.Join(f.requestIDs, ",") != "r10,r11,r12,r13,r14" || f.missingIDs != 0 {
		t.Errorf("request ids %v, missing %d", f.requestIDs, f.missingIDs)
	}
	s := sampleOf(f)
	for k, want := range map[string]float64{"answers_202": 5, "answers_409_not_open": 10, "answers_409_sold_out": 5,
		"goodput_per_s": 5 / 0.51, "first_sold_out_s": 0.602, "last_admitted_s": 0.51, "max_ms": 60, "admitted_p99_ms": 60} {
		if v, ok := number(s.Extra[k]); !ok || !approx(v, want) {
			t.Errorf("extra %s = %v, want %v", k, s.Extra[k], want)
		}
	}
	// 20 answers from the first send (0.1 s) to the last answer (2.002 s).
	if !approx(s.ThroughputPS, 20/1.902) || s.P99ms != 60 {
		t.Errorf("throughput %.3f, p99 %v", s.ThroughputPS, s.P99ms)
	}
}

// Without an open (the trivial handler, a sold-out prize) no figure is timed from one, and
// a figure that does not exist is left out rather than written as 0.
func TestFiguresWithoutAnOpen(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var hs []hit
	for seq := range 4 {
		hs = append(hs, hit{seq: uint64(seq), code: 409, kind: kindSoldOut, sent: t0.Add(time.Duration(seq+1) * 250 * time.Millisecond), latency: time.Millisecond})
	}
	f := figuresOf(hs, 4, time.Time{})
	if f.hasOpen || f.hasAdmitted || f.hasSoldOut {
		t.Fatalf("figures timed from no open: %+v", f)
	}
	// Four sold_outs from 0.25 s to 1.001 s.
	if !approx(f.ratePS(kindSoldOut), 4/0.751) || f.ratePS("202") != 0 {
		t.Fatalf("sold_out %.3f/s, 202 %.3f/s", f.ratePS(kindSoldOut), f.ratePS("202"))
	}
	s := sampleOf(f)
	for _, k := range []string{"goodput_per_s", "first_sold_out_s", "last_admitted_s", "admitted_p99_ms", "open_after_attack_start_s"} {
		if _, ok := s.Extra[k]; ok {
			t.Errorf("extra %s set without an open or a 202", k)
		}
	}
	if f := figuresOf(nil, 4, time.Time{}); f.requests != 0 || f.answered != 0 {
		t.Fatalf("no hits: %+v", f)
	}
}

func TestAnswerCheck(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	if err := answerCheck(figuresOf(sale(t0), 10, t0.Add(time.Second)), 20); err != nil {
		t.Fatalf("a clean sale: %v", err)
	}
	for _, tc := range []struct {
		name    string
		change  func(hs []hit) []hit
		targets int
		want    string
	}{
		{"a transport error", func(hs []hit) []hit {
			hs[3] = hit{seq: 3, sent: hs[3].sent, transport: "read: connection reset by peer"}
			return hs
		}, 20, "1 of 20 requests got no answer (first: read: connection reset by peer)"},
		{"a 500", func(hs []hit) []hit { hs[4].code, hs[4].kind = 500, "500 internal"; return hs }, 20, "1 answers were a 5xx other than 503"},
		{"a 503 without Retry-After", func(hs []hit) []hit { hs[5].code, hs[5].kind = 503, "503 overloaded"; return hs }, 20, "1 answers 503 without Retry-After"},
		{"a 503 with Retry-After is an answer", func(hs []hit) []hit {
			hs[5].code, hs[5].kind, hs[5].retryAfter = 503, "503 overloaded", true
			return hs
		}, 20, ""},
		{"users repeated", func(hs []hit) []hit { return hs }, 19, "20 requests from 19 targets"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := answerCheck(figuresOf(tc.change(sale(t0)), 10, t0.Add(time.Second)), tc.targets)
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	if err := trivialCheck(figuresOf(sale(t0), 10, time.Time{}), 20); err == nil || !strings.Contains(err.Error(), "15 requests with something else than 202") {
		t.Fatalf("a trivial handler answering 409s: %v", err)
	}
}

func TestStockCheck(t *testing.T) {
	for _, tc := range []struct {
		name            string
		admitted, stock int64
		sellOut         bool
		readErr         error
		want            string
	}{
		{"sold out exactly", 300, 300, true, nil, ""},
		{"oversold", 301, 300, true, nil, "oversold: 301 admitted of a stock of 300"},
		{"not sold out", 299, 300, true, nil, "not sold out: 299 admitted"},
		{"a stock the crowd need not sell out", 120, 900, false, nil, ""},
		{"oversold without a sell-out to reach", 901, 900, false, nil, "oversold"},
		{"a count that cannot be read is not a 0", 0, 0, false, errors.New("i/o timeout"), "cannot be read: i/o timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := stockCheck(tc.admitted, tc.stock, tc.sellOut, tc.readErr)
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestOrdersCheck(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	f := figuresOf(sale(t0), 10, t0.Add(time.Second))
	all := map[string]bool{"r10": true, "r11": true, "r12": true, "r13": true, "r14": true}
	if err := ordersCheck(f, all, 5, 5, nil); err != nil {
		t.Fatalf("every 202 an order: %v", err)
	}
	lost := map[string]bool{"r10": true, "r11": true, "r13": true, "r14": true, "other": true}
	if err := ordersCheck(f, lost, 5, 5, nil); err == nil || !strings.Contains(err.Error(), "1 of 5 202s are no order in MySQL (first: r12)") {
		t.Fatalf("a 202 without its order: %v", err)
	}
	if err := ordersCheck(f, all, 5, 6, nil); err == nil || !strings.Contains(err.Error(), "5 orders for 6 admitted grabs") {
		t.Fatalf("an admitted grab without an order: %v", err)
	}
	if err := ordersCheck(f, nil, 0, 0, errors.New("too many connections")); err == nil || !strings.Contains(err.Error(), "cannot be read") {
		t.Fatalf("orders that cannot be read: %v", err)
	}
	hs := sale(t0)
	hs[11].requestID = ""
	if err := ordersCheck(figuresOf(hs, 10, t0.Add(time.Second)), all, 5, 5, nil); err == nil || !strings.Contains(err.Error(), "1 202s carried no request_id") {
		t.Fatalf("a 202 without a request id: %v", err)
	}
}

// trivialRunOf is a hand-made trivial run: n 202s at rate, sent on time, transport errors
// among them.
func trivialRunOf(rate, n, transport int) openFigures {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	interval := time.Second / time.Duration(rate)
	var hs []hit
	for seq := range n {
		h := hit{seq: uint64(seq), code: 202, kind: "202", sent: t0.Add(time.Duration(seq+1) * interval), latency: time.Millisecond}
		if seq < transport {
			h = hit{seq: uint64(seq), sent: h.sent, transport: "dial tcp: i/o timeout"}
		}
		hs = append(hs, h)
	}
	return figuresOf(hs, rate, time.Time{})
}

func TestCrowdVerdict(t *testing.T) {
	const d = 2 * time.Second
	if v := crowdVerdict(trivialRunOf(1000, 2000, 0), 1000, d); v != nil {
		t.Fatalf("every request sent on time and answered: %v", v)
	}
	for _, tc := range []struct {
		name string
		f    openFigures
		want string
	}{
		{"a transport error", trivialRunOf(1000, 2000, 1), "1 requests got no answer"},
		{"too few requests sent", trivialRunOf(1000, 1900, 0), "sent 1900 of 2000 requests"},
		// All 2,000 sent, but over 2.5 s: 800/s.
		{"the rate not kept", trivialRunOf(800, 2000, 0), "achieved 800/s"},
	} {
		if v := crowdVerdict(tc.f, 1000, d); v == nil || !strings.Contains(v.Error(), tc.want) {
			t.Errorf("%s: verdict %v, want %q", tc.name, v, tc.want)
		}
	}
	refused := trivialRunOf(1000, 2000, 0)
	refused.mix["503"], refused.answered = 1, refused.answered+1
	if v := crowdVerdict(refused, 1000, d); v == nil || !strings.Contains(v.Error(), "answers other than 202") {
		t.Errorf("a 503 from the trivial handler: %v", v)
	}
}

// The crowd rate is the highest rate sustained, tried from the top; a try that cannot run
// stops the search, and no rate sustained is an error, not a rate of 0.
func TestCrowdSearch(t *testing.T) {
	rates := []int{4000, 3000, 2000, 1000}
	var asked []int
	got, tried, err := crowdSearch(rates, time.Second, func(rate int) (openFigures, error) {
		asked = append(asked, rate)
		if rate > 2000 {
			return trivialRunOf(rate, rate*9/10, 0), nil // a tenth short
		}
		return trivialRunOf(rate, rate, 0), nil
	})
	if err != nil || got != 2000 || fmt.Sprint(asked) != "[4000 3000 2000]" || len(tried) != 3 ||
		!strings.Contains(tried[0], "4000/s not sustained: sent 3600 of 4000") || tried[2] != "2000/s sustained" {
		t.Fatalf("crowdSearch = %d, %q, %v (asked %v)", got, tried, err, asked)
	}
	_, _, err = crowdSearch(rates, time.Second, func(rate int) (openFigures, error) { return trivialRunOf(rate, rate, 1), nil })
	if err == nil || !strings.Contains(err.Error(), "sustained none of [4000 3000 2000 1000]") {
		t.Fatalf("nothing sustained: %v", err)
	}
	_, _, err = crowdSearch(rates, time.Second, func(int) (openFigures, error) { return openFigures{}, errors.New("vegeta: exit status 1") })
	if err == nil || !strings.Contains(err.Error(), "crowd rate 4000/s: vegeta: exit status 1") {
		t.Fatalf("a try that could not run: %v", err)
	}
}

func TestOpenRates(t *testing.T) {
	d := openDuration
	got := openRates(8000, 20_000, d)
	want := "half 4000 30001 false; max 8000 12000 true; crowd 20000 12000 true; double 16000 12000 true"
	var parts []string
	for _, r := range got {
		parts = append(parts, fmt.Sprintf("%s %d %d %v", r.label, r.rate, r.stock, r.sellOut))
	}
	if strings.Join(parts, "; ") != want {
		t.Fatalf("openRates = %s\nwant          %s", strings.Join(parts, "; "), want)
	}
	// Half the max cannot sell out its stock within the attack.
	if got[0].stock <= int(float64(got[0].rate)*d.Seconds()) {
		t.Fatalf("the 0.5× stock %d could sell out at %d/s in %s", got[0].stock, got[0].rate, d)
	}
	// 2× is not run at or above the crowd rate.
	if got := openRates(8000, 16_000, d); len(got) != 3 {
		t.Fatalf("2× at the crowd rate was run: %+v", got)
	}
	if openDuration != 7500*time.Millisecond {
		t.Fatalf("openDuration = %s: 1 s before the open, 4.5 s to sell out, 2 s after", openDuration)
	}
}

func TestOpenRatios(t *testing.T) {
	gw := &sample{P50ms: 4, P99ms: 300, Extra: map[string]any{"max_ms": 900.0, "achieved_per_s": 9000.0, "admitted_p99_ms": 600.0,
		"cpu_us_per_admitted_gateway": 150.0, "goodput_per_s": 6000.0, "sold_out_after_per_s": 5000.0, "gateway_peak_rss_mb": 160.0}}
	triv := &sample{ThroughputPS: 10000, P50ms: 2, P99ms: 30, Extra: map[string]any{"max_ms": 90.0, "achieved_per_s": 10000.0,
		"cpu_us_per_request_trivial": 50.0, "trivial_peak_rss_mb": 40.0}}
	setOpenRatios(gw, triv, 8000)
	want := map[string]float64{"p50_over_trivial": 2, "p99_over_trivial": 10, "max_over_trivial": 10, "achieved_over_trivial": 0.9,
		"admitted_p99_over_trivial": 20, "cpu_per_admitted_over_trivial": 3, "goodput_over_closed_max": 0.75,
		"goodput_over_trivial": 0.6, "sold_out_after_over_trivial": 0.5, "peak_rss_over_trivial": 4}
	if len(gw.Ratios) != len(want) {
		t.Fatalf("ratios %v, want %v", gw.Ratios, want)
	}
	for k, v := range want {
		if !approx(gw.Ratios[k], v) {
			t.Errorf("%s = %v, want %v", k, gw.Ratios[k], v)
		}
	}
	// A figure the trivial run lacks, or a zero, leaves the ratio out.
	bare := &sample{P50ms: 1, P99ms: 2, Extra: map[string]any{"max_ms": 3.0, "cpu_us_per_admitted_gateway": 10.0}}
	setOpenRatios(bare, &sample{P99ms: 0, Extra: map[string]any{}}, 0)
	if len(bare.Ratios) != 0 {
		t.Fatalf("ratios from missing figures: %v", bare.Ratios)
	}
	so := &sample{ThroughputPS: 8000, P99ms: 50, Extra: map[string]any{}}
	setSoldOutRatios(so, &sample{ThroughputPS: 10000, P99ms: 25, Extra: map[string]any{}})
	if !approx(so.Ratios["rate_over_trivial"], 0.8) || !approx(so.Ratios["p99_over_trivial"], 2) {
		t.Fatalf("sold-out ratios %v", so.Ratios)
	}
}

// The step's rows over three repetitions: its targets judged on the medians (met and
// missed, ≤ included), its tables in results.md.
func TestOpenSectionAndTargets(t *testing.T) {
	var c collector
	for rep := 1; rep <= 3; rep++ {
		f := float64(rep)
		ms := []measured{
			{keyOpenClosedMax, "closed max", &sample{ThroughputPS: 8000}},
			{keyOpenCrowd, "crowd", &sample{ThroughputPS: 20000, Extra: map[string]any{"tried": []string{"20000/s sustained"}}}},
			{keyOpenSoldOutTrivial, "sold-out trivial", &sample{ThroughputPS: 20000, P99ms: 20, Extra: map[string]any{"answers_202": 40000}}},
			{keyOpenSoldOutUnkeyed, "unkeyed", &sample{ThroughputPS: 17000, P99ms: 40, Extra: map[string]any{"answers_409_sold_out": 40000},
				Ratios: map[string]float64{"rate_over_trivial": 0.85, "p99_over_trivial": 2}}},
			{keyOpenSoldOutKeyed, "keyed", &sample{ThroughputPS: 9000, P99ms: 400, Ratios: map[string]float64{"rate_over_trivial": 0.45, "p99_over_trivial": 20}}},
		}
		for _, l := range openLoads {
			ms = append(ms,
				measured{keyOpenTrivial(l.label), "trivial", &sample{P50ms: 1, P99ms: 10, Extra: map[string]any{"offered_per_s": 4000, "cpu_us_per_request_trivial": 40.0}}},
				measured{keyOpenGateway(l.label), "gateway", &sample{P50ms: 3, P99ms: 40 + f, Extra: map[string]any{"offered_per_s": 4000,
					"goodput_per_s": 7500.0, "gateway_peak_rss_mb": 120 + f, "answers_202": 12000, "answers_409_sold_out": 10000 + rep,
					"cpu_s_gateway": 2.5, "cpu_s_redis": 0.4},
					Ratios: map[string]float64{"p99_over_trivial": 4 + f, "goodput_over_closed_max": 0.9 - f/100, "cpu_per_admitted_over_trivial": 1.5}}})
		}
		c.add(rep, ms)
	}
	rep := report{Reps: 3, Rows: c.summarise(), Order: interleave([]string{"open"}, 3)}
	dir := t.TempDir()
	if err := write(dir, rep, &strings.Builder{}); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| open at 1×: goodput ≥ 0.9× the pipeline's closed-loop max | 0.88 (0.87–0.89) × | **missed** |",
		"| open at the crowd rate: goodput ≥ 0.8× the pipeline's closed-loop max | 0.88 (0.87–0.89) × | **met** |",
		"| open at 2×: p99 of every answer ≤ 10× the trivial handler's p99 at the same rate | 6 (5–7) × | **met** |",
		"| open at 0.5× (no sell-out): p99 ≤ 5× the trivial handler's p99 at the same rate | 6 (5–7) × | **missed** |",
		"| sold-out answers (no key) at the crowd rate: p99 ≤ 2× the trivial handler's | 2 × | **met** |",
		"| sold-out answers with a fresh Idempotency-Key: p99 over the trivial handler's (no target) | 20 × | reported |",
		"| open at the crowd rate: gateway peak RSS < 150 MB (2,000 connections unless -open-connections) | 122 (121–123) MB | **met** |",
		"| open at 0.5×: gateway CPU per admitted grab ≤ 1.5× the trivial handler's CPU per request | 1.50 × | **met** |",
		"## The open of a sale under a crowd (vegeta, open loop)",
		"Closed-loop max of the whole pipeline (1×): 8,000 grabs/s. Crowd rate (the highest of 20,000, 15,000,",
		"| crowd rate | 4,000 | – | 7,500 [0.88× (0.87–0.89)] | 3 | 42 (41–43) [6× (5–7)] |",
		"| 2× | – | 202: 12,000; 409 sold_out: 10,002 (10,001–10,003) |",
		"| 1× | 2.50 | – | 0.40 | – | – | – | – |",
		"| 0.5× | 4,000 | – | 1 | 10 | – | – | 40 | – |",
		"| no Idempotency-Key | – | – | 17,000 [0.85×] | 0 | 40 [2×] | – | 409 sold_out: 40,000 |",
		"| trivial handler | – | – | 20,000 | 0 | 20 | – | 202: 40,000 |",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("results.md lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("results.md:\n%s", md)
	}
}
