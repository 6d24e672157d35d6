package main

import (
	"fmt"
	"math"
	"slices"
)

// The bench runs every step once per repetition, interleaved (repetition 1 of every step,
// then repetition 2 of every step, ...), so drift over time (a JVM warming up, a neighbour
// on the shared cores) hits every row alike. Each step returns samples; ratios are derived
// within one repetition (a ratio of two figures measured minutes apart would carry the
// drift it is meant to cancel) and then summarised across repetitions as median (min–max).

// sample is one repetition's measurement of one row.
type sample struct {
	Rep          int                `json:"rep"`
	ThroughputPS float64            `json:"throughput_per_s"`
	P50ms        float64            `json:"p50_ms"`
	P99ms        float64            `json:"p99_ms"`
	P999ms       float64            `json:"p999_ms"`
	Oversold     int64              `json:"oversold"`
	Ratios       map[string]float64 `json:"ratios,omitempty"`
	Extra        map[string]any     `json:"extra,omitempty"`
}

// measured is what a step returns: a sample for the row named key.
type measured struct {
	key, name string
	s         *sample
}

// spread summarises one figure across repetitions.
type spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
}

// row is one line of results.md: every repetition's sample and their spreads.
type row struct {
	Key          string            `json:"key"`
	Name         string            `json:"name"`
	ThroughputPS spread            `json:"throughput_per_s"`
	P50ms        spread            `json:"p50_ms"`
	P99ms        spread            `json:"p99_ms"`
	P999ms       spread            `json:"p999_ms"`
	Oversold     int64             `json:"oversold"` // the largest over repetitions: one oversell is one too many
	Ratios       map[string]spread `json:"ratios,omitempty"`
	Extra        map[string]spread `json:"extra,omitempty"` // numeric extras only; the rest stays in runs
	Runs         []*sample         `json:"runs"`
}

type report struct {
	Machine   map[string]string `json:"machine"`
	Reps      int               `json:"repetitions"` // finished
	Order     []string          `json:"order"`       // the steps in the order they were to run
	Rows      []*row            `json:"rows"`
	Stages    []stageResult     `json:"stages"`
	Targets   []target          `json:"targets"`
	DurationS float64           `json:"duration_s"`
	Error     string            `json:"error,omitempty"` // the run failed after these repetitions
	// Settings tried with -gateway-env and -kafka-config (kafkatune.go); empty for a run on
	// the shipped and stock settings.
	Settings map[string]string `json:"settings,omitempty"`
	// -compare's baseline (compare.go) and every figure measured on both sides.
	Compare     string       `json:"compare,omitempty"`
	Comparisons []comparison `json:"comparisons,omitempty"`
}

// find returns the row called key, or nil when that step did not run.
func (r *report) find(key string) *row {
	for _, x := range r.Rows {
		if x.Key == key {
			return x
		}
	}
	return nil
}

// median of xs (the mean of the middle two for an even count); NaN for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func spreadOf(xs []float64) spread {
	if len(xs) == 0 {
		return spread{Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	return spread{Median: median(xs), Min: slices.Min(xs), Max: slices.Max(xs), N: len(xs)}
}

// interleave is the order the steps run in: every step of repetition 1, then of 2, ...
func interleave(steps []string, reps int) []string {
	var out []string
	for r := 1; r <= reps; r++ {
		for _, s := range steps {
			out = append(out, fmt.Sprintf("rep %d: %s", r, s))
		}
	}
	return out
}

// collector gathers samples into rows, in the order rows first appear.
type collector struct {
	rows  []*row
	byKey map[string]*row
}

func (c *collector) add(rep int, ms []measured) {
	if c.byKey == nil {
		c.byKey = map[string]*row{}
	}
	for _, m := range ms {
		r := c.byKey[m.key]
		if r == nil {
			r = &row{Key: m.key, Name: m.name}
			c.byKey[m.key] = r
			c.rows = append(c.rows, r)
		}
		m.s.Rep = rep
		r.Runs = append(r.Runs, m.s)
	}
}

// summarise fills every row's spreads from its runs.
func (c *collector) summarise() []*row {
	for _, r := range c.rows {
		var tput, p50, p99, p999 []float64
		ratios, extra := map[string][]float64{}, map[string][]float64{}
		r.Oversold = 0
		for _, s := range r.Runs {
			tput = append(tput, s.ThroughputPS)
			p50, p99, p999 = append(p50, s.P50ms), append(p99, s.P99ms), append(p999, s.P999ms)
			r.Oversold = max(r.Oversold, s.Oversold)
			for k, v := range s.Ratios {
				ratios[k] = append(ratios[k], v)
			}
			for k, v := range s.Extra {
				if f, ok := number(v); ok {
					extra[k] = append(extra[k], f)
				}
			}
		}
		r.ThroughputPS, r.P50ms, r.P99ms, r.P999ms = spreadOf(tput), spreadOf(p50), spreadOf(p99), spreadOf(p999)
		r.Ratios, r.Extra = map[string]spread{}, map[string]spread{}
		for k, v := range ratios {
			r.Ratios[k] = spreadOf(v)
		}
		for k, v := range extra {
			r.Extra[k] = spreadOf(v)
		}
	}
	return c.rows
}

func number(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	}
	return 0, false
}

// figure names one number of a sample: its throughput, or a numeric extra.
type figure struct {
	row   string
	extra string // "" = throughput
}

func (f figure) of(rep map[string]*sample) (float64, bool) {
	s := rep[f.row]
	if s == nil {
		return 0, false
	}
	if f.extra == "" {
		return s.ThroughputPS, true
	}
	return number(s.Extra[f.extra])
}

// ratioDef is a ratio computed within one repetition and stored on row.
type ratioDef struct {
	row, name string
	num, den  figure
}

const (
	keyRedisCeiling = "ceiling_redis"
	keyTrivial      = "ceiling_trivial"
	keyJWT          = "ceiling_jwt"
	keyJWTES256     = "ceiling_jwt_es256"
	keyGatewayMax   = "gateway_max"
	keyPipeline     = "strategy_a_pipeline"
	keyLock         = "strategy_b_redis_lock"
	keyOptimistic   = "strategy_c_db_optimistic"
	keyPessimistic  = "strategy_d_db_pessimistic"
	keySale         = "sale"
	extraPerOrder   = "one_tx_per_order_per_s"
)

// Persistence rows exist per MariaDB mode.
const (
	modeConfigured = "as configured"
	modeBinlog     = "binlog + sync_binlog=1"
)

func keyHotRow(mode string) string     { return "hotrow_" + modeKey(mode) }
func keyKafkaMySQL(mode string) string { return "kafka_mysql_" + modeKey(mode) }
func keyOpen(pct int) string           { return fmt.Sprintf("gateway_open_%d", pct) }

func modeKey(mode string) string {
	if mode == modeBinlog {
		return "binlog"
	}
	return "configured"
}

// openLevels are the open-loop load levels, in percent of the closed-loop max.
var openLevels = []int{10, 25, 50, 75, 90}

func ratioDefs() []ratioDef {
	defs := []ratioDef{
		{keyGatewayMax, "gateway_over_trivial_handler", figure{row: keyGatewayMax}, figure{row: keyTrivial}},
		{keyGatewayMax, "gateway_over_jwt_handler", figure{row: keyGatewayMax}, figure{row: keyJWT}},
		{keyJWTES256, "es256_over_hs256_handler", figure{row: keyJWTES256}, figure{row: keyJWT}},
		{keyGatewayMax, "gateway_over_redis_ceiling", figure{row: keyGatewayMax}, figure{row: keyRedisCeiling}},
		{keyPipeline, "pipeline_over_redis_lock", figure{row: keyPipeline}, figure{row: keyLock}},
		{keyPipeline, "pipeline_over_db_optimistic", figure{row: keyPipeline}, figure{row: keyOptimistic}},
		{keyPipeline, "pipeline_over_db_pessimistic", figure{row: keyPipeline}, figure{row: keyPessimistic}},
	}
	for _, n := range bucketCounts[1:] {
		defs = append(defs, ratioDef{keyBucketsKafkaMySQL(n), "over_one_bucket", figure{row: keyBucketsKafkaMySQL(n)}, figure{row: keyBucketsKafkaMySQL(1)}})
	}
	defs = append(defs, ratioDef{keyBucketsGateway(clusterSpread), "over_one_bucket", figure{row: keyBucketsGateway(clusterSpread)}, figure{row: keyBucketsGateway(1)}})
	for _, m := range []string{modeConfigured, modeBinlog} {
		defs = append(defs,
			ratioDef{keyHotRow(m), "batched_over_one_tx_per_order", figure{row: keyHotRow(m)}, figure{keyHotRow(m), extraPerOrder}},
			ratioDef{keyKafkaMySQL(m), "kafka_mysql_over_one_tx_per_order", figure{row: keyKafkaMySQL(m)}, figure{keyHotRow(m), extraPerOrder}})
	}
	return defs
}

// deriveRatios sets every ratio whose two figures this repetition measured. A zero
// denominator leaves the ratio out rather than print an infinity.
func deriveRatios(rep map[string]*sample) {
	for _, d := range ratioDefs() {
		s := rep[d.row]
		num, ok1 := d.num.of(rep)
		den, ok2 := d.den.of(rep)
		if s == nil || !ok1 || !ok2 || den <= 0 {
			continue
		}
		if s.Ratios == nil {
			s.Ratios = map[string]float64{}
		}
		s.Ratios[d.name] = num / den
	}
}

// target is one of issue 16's targets, judged on the median over repetitions.
type target struct {
	Name      string  `json:"name"`
	Row       string  `json:"row"`
	Figure    string  `json:"figure"` // "throughput_per_s", "p99_ms", "ratio:<name>" or "extra:<name>"
	Op        string  `json:"op"`     // ">=", "<", "<=", or "" for a figure reported without a target
	Threshold float64 `json:"threshold,omitempty"`
	Unit      string  `json:"unit"`
	Value     *spread `json:"value,omitempty"`
	Verdict   string  `json:"verdict"` // met, missed, reported, not measured
}

func targetDefs() []target {
	ts := []target{
		{Name: "gateway ≥ 0.6× a trivial net/http handler", Row: keyGatewayMax, Figure: "ratio:gateway_over_trivial_handler", Op: ">=", Threshold: 0.6, Unit: "×"},
		{Name: "gateway vs a handler that verifies the same JWT (ceiling, no target)", Row: keyGatewayMax, Figure: "ratio:gateway_over_jwt_handler", Unit: "×"},
		// The latency target is judged on the whole pipeline (consumers and reconciler
		// persisting every grab on the same machine): that is what a sale is. The gateway
		// alone is the component view, reported beside it.
		{Name: "p99 < 10 ms at 50% of max, whole pipeline persisting (open loop)", Row: keySaleOpen(50), Figure: "p99_ms", Op: "<", Threshold: 10, Unit: "ms"},
		{Name: "gateway alone (no consumers): p99 at 50% of its max (component view, no target)", Row: keyOpen(50), Figure: "p99_ms", Unit: "ms"},
		{Name: "admitted grabs without an order after the sale curve (must be 0)", Row: keySaleMax, Figure: "extra:not_persisted", Op: "<", Threshold: 1, Unit: ""},
		{Name: "pipeline ≥ 10× Redis lock, one hot item", Row: keyPipeline, Figure: "ratio:pipeline_over_redis_lock", Op: ">=", Threshold: 10, Unit: "×"},
		{Name: "pipeline ≥ 50× DB optimistic locking, one hot item", Row: keyPipeline, Figure: "ratio:pipeline_over_db_optimistic", Op: ">=", Threshold: 50, Unit: "×"},
	}
	for _, m := range []string{modeConfigured, modeBinlog} {
		ts = append(ts,
			target{Name: "Kafka → MySQL, one hot prize ≥ 20,000 orders/s (" + m + ")", Row: keyKafkaMySQL(m), Figure: "throughput_per_s", Op: ">=", Threshold: 20_000, Unit: "orders/s"},
			target{Name: "Kafka → MySQL, one hot prize ≥ 20× one transaction per order (" + m + ")", Row: keyKafkaMySQL(m), Figure: "ratio:kafka_mysql_over_one_tx_per_order", Op: ">=", Threshold: 20, Unit: "×"})
	}
	// Stock buckets (buckets.go): reported, no target yet.
	for _, n := range bucketCounts[1:] {
		ts = append(ts, target{Name: fmt.Sprintf("Kafka → MySQL, one hot prize in %d buckets over 1 bucket (no target)", n),
			Row: keyBucketsKafkaMySQL(n), Figure: "ratio:over_one_bucket", Unit: "×"})
	}
	ts = append(ts, target{Name: fmt.Sprintf("cluster: gateway admissions, one hot prize in %d buckets on %d primaries over 1 bucket (no target)", clusterSpread, clusterSpread),
		Row: keyBucketsGateway(clusterSpread), Figure: "ratio:over_one_bucket", Unit: "×"})
	ts = append(ts, openTargets()...) // the open of a sale (open.go)
	return append(ts,
		target{Name: "gateway peak RSS < 150 MB at max rate", Row: keyGatewayMax, Figure: "extra:gateway_peak_rss_mb", Op: "<", Threshold: 150, Unit: "MB"},
		target{Name: "consumer peak RSS during the whole sale (largest consumer; no target)", Row: keySale, Figure: "extra:consumer_peak_rss_mb", Unit: "MB"},
		target{Name: "reconciler peak RSS during the whole sale (no target)", Row: keySale, Figure: "extra:reconciler_peak_rss_mb", Unit: "MB"},
	)
}

// evaluate judges every target on the rows' medians; a figure the run did not measure
// (a step left out with -only) is "not measured", never met.
func evaluate(rows []*row) []target {
	byKey := map[string]*row{}
	for _, r := range rows {
		byKey[r.Key] = r
	}
	var out []target
	for _, t := range targetDefs() {
		t.Verdict = "not measured"
		if r := byKey[t.Row]; r != nil {
			if v, ok := r.figure(t.Figure); ok && !math.IsNaN(v.Median) {
				t.Value = &v
				switch {
				case t.Op == "":
					t.Verdict = "reported"
				case t.Op == ">=" && v.Median >= t.Threshold, t.Op == "<" && v.Median < t.Threshold,
					t.Op == "<=" && v.Median <= t.Threshold:
					t.Verdict = "met"
				default:
					t.Verdict = "missed"
				}
			}
		}
		out = append(out, t)
	}
	return out
}

func (r *row) figure(name string) (spread, bool) {
	switch {
	case name == "throughput_per_s":
		return r.ThroughputPS, len(r.Runs) > 0
	case name == "p99_ms":
		return r.P99ms, len(r.Runs) > 0
	case len(name) > 6 && name[:6] == "ratio:":
		s, ok := r.Ratios[name[6:]]
		return s, ok
	case len(name) > 6 && name[:6] == "extra:":
		s, ok := r.Extra[name[6:]]
		return s, ok
	}
	return spread{}, false
}
