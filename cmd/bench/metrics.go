package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Per-stage latency from the services' own Prometheus histograms: the bench scrapes
// /metrics before and after a measured window and takes quantiles of the bucket deltas,
// as histogram_quantile does (linear interpolation inside the bucket that holds the rank).
// A quantile is only as fine as the buckets: the gateway's are 0.2, 0.5, 1, 2, 5, 10, 20,
// 50, 100, 250 ms, ...; a quantile beyond the last finite bound reads as that bound.

// histogram is one series' cumulative bucket counts by upper bound, +Inf last.
type histogram struct {
	bounds []float64
	counts []float64
}

func (h histogram) total() float64 {
	if len(h.counts) == 0 {
		return 0
	}
	return h.counts[len(h.counts)-1]
}

// series is one histogram series of a scrape.
type series struct {
	name   string
	labels map[string]string
	h      histogram
}

// parseHistograms reads the histogram series (their _bucket lines) of a Prometheus text
// exposition.
func parseHistograms(r io.Reader) ([]series, error) {
	byID := map[string]*series{}
	var order []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels, value, err := parseSample(line)
		if err != nil {
			return nil, err
		}
		base, ok := strings.CutSuffix(name, "_bucket")
		if !ok {
			continue
		}
		le, ok := labels["le"]
		if !ok {
			return nil, fmt.Errorf("bucket without le: %q", line)
		}
		bound, err := strconv.ParseFloat(le, 64) // "+Inf" parses as +Inf
		if err != nil {
			return nil, fmt.Errorf("bucket bound %q: %w", le, err)
		}
		delete(labels, "le")
		id := seriesID(base, labels)
		s := byID[id]
		if s == nil {
			s = &series{name: base, labels: labels}
			byID[id] = s
			order = append(order, id)
		}
		s.h.bounds = append(s.h.bounds, bound)
		s.h.counts = append(s.h.counts, value)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	out := make([]series, 0, len(order))
	for _, id := range order {
		s := byID[id]
		if !sort.SliceIsSorted(s.h.bounds, func(i, j int) bool { return s.h.bounds[i] < s.h.bounds[j] }) ||
			len(s.h.bounds) == 0 || !math.IsInf(s.h.bounds[len(s.h.bounds)-1], 1) {
			return nil, fmt.Errorf("histogram %s: buckets not ascending or no +Inf bucket", id)
		}
		out = append(out, *s)
	}
	return out, nil
}

func seriesID(name string, labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(name)
	for _, k := range keys {
		fmt.Fprintf(&b, ",%s=%q", k, labels[k])
	}
	return b.String()
}

// parseSample splits `name{a="x",b="y"} value [timestamp]`.
func parseSample(line string) (string, map[string]string, float64, error) {
	labels := map[string]string{}
	i := strings.IndexAny(line, "{ ")
	if i < 0 {
		return "", nil, 0, fmt.Errorf("metric line without value: %q", line)
	}
	name, rest := line[:i], line[i:]
	if rest[0] == '{' {
		rest = rest[1:]
		for {
			rest = strings.TrimLeft(rest, " ,")
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.IndexByte(rest, '=')
			if eq < 0 || len(rest) < eq+2 || rest[eq+1] != '"' {
				return "", nil, 0, fmt.Errorf("bad labels in %q", line)
			}
			key := strings.TrimSpace(rest[:eq])
			rest = rest[eq+2:]
			var val strings.Builder
			closed := false
			for j := 0; j < len(rest); j++ {
				c := rest[j]
				if c == '\\' && j+1 < len(rest) {
					j++
					switch rest[j] {
					case 'n':
						val.WriteByte('\n')
					default:
						val.WriteByte(rest[j])
					}
					continue
				}
				if c == '"' {
					rest, closed = rest[j+1:], true
					break
				}
				val.WriteByte(c)
			}
			if !closed {
				return "", nil, 0, fmt.Errorf("unterminated label value in %q", line)
			}
			labels[key] = val.String()
		}
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return "", nil, 0, fmt.Errorf("metric line without value: %q", line)
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return "", nil, 0, fmt.Errorf("value in %q: %w", line, err)
	}
	return name, labels, v, nil
}

// pick sums every series called name whose labels include match (several processes'
// scrapes concatenated sum up the same way). ok is false when no series matched: a
// labelled series appears only after its first observation.
func pick(ss []series, name string, match map[string]string) (histogram, bool, error) {
	var sum histogram
	found := false
	for _, s := range ss {
		if s.name != name || !includes(s.labels, match) {
			continue
		}
		if !found {
			sum = histogram{bounds: append([]float64(nil), s.h.bounds...), counts: append([]float64(nil), s.h.counts...)}
			found = true
			continue
		}
		if !sameBounds(sum.bounds, s.h.bounds) {
			return histogram{}, false, fmt.Errorf("%s: series with different buckets", name)
		}
		for i := range sum.counts {
			sum.counts[i] += s.h.counts[i]
		}
	}
	return sum, found, nil
}

func includes(labels, match map[string]string) bool {
	for k, v := range match {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func sameBounds(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// delta is after minus before, bucket by bucket. A before without the series (not yet
// observed) counts as empty; a count that went down means the process restarted between
// the scrapes, and the window cannot be read.
func delta(after, before histogram, hadBefore bool) (histogram, error) {
	d := histogram{bounds: append([]float64(nil), after.bounds...), counts: append([]float64(nil), after.counts...)}
	if !hadBefore {
		return d, nil
	}
	if !sameBounds(after.bounds, before.bounds) {
		return histogram{}, fmt.Errorf("buckets changed between scrapes")
	}
	for i := range d.counts {
		d.counts[i] -= before.counts[i]
		if d.counts[i] < 0 {
			return histogram{}, fmt.Errorf("bucket le=%g went down between scrapes (process restarted?)", d.bounds[i])
		}
	}
	return d, nil
}

// quantile is histogram_quantile(q, h): NaN for an empty histogram; a rank in the +Inf
// bucket reads as the last finite bound.
func quantile(q float64, h histogram) float64 {
	n := h.total()
	if n == 0 || len(h.bounds) < 2 {
		return math.NaN()
	}
	rank := q * n
	i := sort.Search(len(h.counts), func(i int) bool { return h.counts[i] >= rank })
	if i >= len(h.counts)-1 {
		return h.bounds[len(h.bounds)-2]
	}
	lower, below := 0.0, 0.0
	if i > 0 {
		lower, below = h.bounds[i-1], h.counts[i-1]
	}
	upper := h.bounds[i]
	if h.counts[i] == below {
		return upper
	}
	return lower + (upper-lower)*(rank-below)/(h.counts[i]-below)
}

// scrape fetches one /metrics page (bearer token optional) and parses its histograms.
func scrape(ctx context.Context, url, token string) ([]series, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	body, err := getOK(ctx, url, token)
	if err != nil {
		return nil, fmt.Errorf("scrape %w", err)
	}
	defer body.Close()
	ss, err := parseHistograms(body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	return ss, nil
}

// getOK GETs url (with the bearer token unless it is "") and returns the body of a 200;
// any other answer is an error naming url.
func getOK(ctx context.Context, url, token string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return resp.Body, nil
}

// stageDef is one stage of a grab's way, read from one histogram around one row's run.
type stageDef struct {
	name   string
	row    string
	prefix string // extras <prefix>_p50_ms, _p99_ms, _p999_ms, _samples; "" = the row's own client-side latency
	metric string
	match  map[string]string
	where  string
}

func gatewayStages() []stageDef {
	return []stageDef{
		{name: "gateway grab handler (HTTP, in process)", row: keyOpen(50), prefix: "stage_gateway_handler",
			metric: "seckill_gateway_request_duration_seconds", match: map[string]string{"route": "grab"}},
		{name: "Redis admission script", row: keyOpen(50), prefix: "stage_redis_reserve",
			metric: "seckill_gateway_redis_duration_seconds", match: map[string]string{"op": "reserve"}},
		{name: "Kafka acknowledgement (acks=all)", row: keyOpen(50), prefix: "stage_kafka_ack",
			metric: "seckill_gateway_kafka_produce_duration_seconds"},
	}
}

func consumerStages() []stageDef {
	return []stageDef{
		{name: "consumer persistence transaction (one batch)", row: keySale, prefix: "stage_consumer_tx",
			metric: "seckill_consumer_tx_duration_seconds"},
		{name: "consumer order events of one batch published, progress recorded", row: keySale, prefix: "stage_consumer_publish",
			metric: "seckill_consumer_order_events_publish_duration_seconds"},
		{name: "admission → order committed", row: keySale, prefix: "stage_admission_to_order",
			metric: "seckill_consumer_admission_to_order_seconds", match: map[string]string{"path": "grab"}},
	}
}

func stageDefs() []stageDef {
	out := []stageDef{{name: "client-observed grab (load generator, timed from the schedule)", row: keyOpen(50),
		where: "gateway open loop at 50% of max, no consumers"}}
	for _, d := range gatewayStages() {
		d.where = "gateway open loop at 50% of max, no consumers"
		out = append(out, d)
	}
	for _, d := range consumerStages() {
		d.where = "the whole sale (closed loop, consumers running)"
		out = append(out, d)
	}
	// The same stages with the whole pipeline up at half its own max (salecurve.go).
	pipeline := "pipeline open loop at 50% of max, consumers and reconciler persisting"
	out = append(out, stageDef{name: "client-observed grab, whole pipeline", row: keySaleOpen(50), where: pipeline})
	for _, d := range append(gatewayStages(), consumerStages()...) {
		d.name, d.row, d.where = d.name+", whole pipeline", keySaleOpen(50), pipeline
		out = append(out, d)
	}
	return out
}

// notMeasured are the stages no histogram covers; the report says so instead of guessing.
var notMeasured = []string{
	"JWT verification: no histogram of its own (inside the gateway handler's time; the JWT ceiling row bounds it)",
	"time before the gateway's handler runs (accept, read, kernel and scheduler queueing): no histogram; client-observed minus handler bounds it",
	"Kafka acknowledged → fetched by the consumer: no histogram (inside admission → order committed)",
	"order committed → order event published by the outbox relay: no histogram",
}

// stageExtras reads defs' histograms from the before/after scrapes into extras (ms).
// A histogram absent from both scrapes leaves its stage out (reported as not measured);
// a scrape that cannot be read was already an error.
func stageExtras(defs []stageDef, before, after []series, extra map[string]any) error {
	for _, d := range defs {
		a, okA, err := pick(after, d.metric, d.match)
		if err != nil {
			return err
		}
		if !okA {
			continue
		}
		b, okB, err := pick(before, d.metric, d.match)
		if err != nil {
			return err
		}
		h, err := delta(a, b, okB)
		if err != nil {
			return fmt.Errorf("%s: %w", d.metric, err)
		}
		if h.total() == 0 {
			continue
		}
		extra[d.prefix+"_p50_ms"] = quantile(0.5, h) * 1000
		extra[d.prefix+"_p99_ms"] = quantile(0.99, h) * 1000
		extra[d.prefix+"_p999_ms"] = quantile(0.999, h) * 1000
		extra[d.prefix+"_samples"] = h.total()
	}
	return nil
}

// stageResult is one stage's quantiles across repetitions (ms).
type stageResult struct {
	Name       string  `json:"name"`
	Metric     string  `json:"metric,omitempty"`
	MeasuredAt string  `json:"measured_at"`
	P50ms      *spread `json:"p50_ms,omitempty"`
	P99ms      *spread `json:"p99_ms,omitempty"`
	P999ms     *spread `json:"p999_ms,omitempty"`
	Samples    *spread `json:"samples,omitempty"`
	Note       string  `json:"note,omitempty"`
}

func stages(rows []*row) []stageResult {
	byKey := map[string]*row{}
	for _, r := range rows {
		byKey[r.Key] = r
	}
	var out []stageResult
	for _, d := range stageDefs() {
		sr := stageResult{Name: d.name, Metric: d.metric, MeasuredAt: d.where}
		r := byKey[d.row]
		switch {
		case r == nil:
			sr.Note = "not measured in this run (its step did not run)"
		case d.prefix == "":
			p50, p99, p999 := r.P50ms, r.P99ms, r.P999ms
			sr.P50ms, sr.P99ms, sr.P999ms = &p50, &p99, &p999
		default:
			p50, ok1 := r.Extra[d.prefix+"_p50_ms"]
			p99, ok2 := r.Extra[d.prefix+"_p99_ms"]
			p999, ok3 := r.Extra[d.prefix+"_p999_ms"]
			n := r.Extra[d.prefix+"_samples"]
			if !ok1 || !ok2 || !ok3 {
				sr.Note = "not measured: the histogram had no observations in the window"
				break
			}
			sr.P50ms, sr.P99ms, sr.P999ms, sr.Samples = &p50, &p99, &p999, &n
			sr.Note = "bucket-interpolated"
		}
		out = append(out, sr)
	}
	return out
}
