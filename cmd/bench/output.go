package main

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// num formats a figure with as many digits as it deserves.
func num(v float64) string {
	switch a := math.Abs(v); {
	case math.IsNaN(v):
		return "–"
	case a >= 1000:
		return thousands(v)
	case a >= 100 || v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 0.1 || a == 0:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", math.Abs(v))
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if v < 0 {
		return "-" + b.String()
	}
	return b.String()
}

// spr is "median (min–max)", or the one value of a single repetition.
func spr(s spread) string {
	if s.N <= 1 || s.Min == s.Max {
		return num(s.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", num(s.Median), num(s.Min), num(s.Max))
}

// noteExtras are the numeric extras worth a note in the results table, in this order.
var noteExtras = []string{"concurrency", "cpu_us_per_grab_total", "gateway_peak_rss_mb", "consumer_peak_rss_mb",
	"reconciler_peak_rss_mb", extraPerOrder, "conflict_rate", "attempt_conflict_rate", "requests_failed_on_conflict_rate",
	"sold", "last_admission_to_last_order_s", "cpu_us_per_order_consumer", "cpu_us_per_order_mysql", "cpu_us_per_order_kafka", "buckets", "partitions", "bucket_start_skew_s",
	"primaries", "busiest_bucket_share", "errors"}

func (r report) markdown(charts []string) string {
	var b strings.Builder
	drawn := map[string]bool{}
	for _, c := range charts {
		drawn[c] = true
	}
	b.WriteString("# Bench results\n\n")
	steps := []string{}
	for _, o := range r.Order {
		if name, ok := strings.CutPrefix(o, "rep 1: "); ok {
			steps = append(steps, name)
		}
	}
	fmt.Fprintf(&b, "%d repetition(s), interleaved: repetition 1 of every step (%s), then repetition 2 of every step, and so on, "+
		"so drift over time hits every row alike. Figures are the median (min–max) over repetitions; every ratio is computed "+
		"within one repetition and then summarised the same way. Throughput counts every answered request (202, 409, …) per second.\n\n",
		r.Reps, strings.Join(steps, ", "))
	if r.Error != "" {
		fmt.Fprintf(&b, "**The run failed:** %s. The rows below are the repetitions that finished.\n\n", r.Error)
	}
	if len(r.Settings) > 0 {
		b.WriteString("**Settings tried in this run** (not the shipped or stock ones; the gateway and salecurve steps ran with them):")
		for _, k := range sortedKeys(r.Settings) {
			fmt.Fprintf(&b, " %s=%s;", k, r.Settings[k])
		}
		b.WriteString("\n\n")
	}

	b.WriteString("## Targets\n\nJudged on the median; a figure this run did not measure is *not measured*, never met.\n\n")
	b.WriteString("| target | median (min–max) | verdict |\n|---|---:|---|\n")
	for _, t := range r.Targets {
		v := "–"
		if t.Value != nil {
			v = spr(*t.Value) + " " + t.Unit
		}
		verdict := t.Verdict
		if verdict == "met" || verdict == "missed" {
			verdict = "**" + verdict + "**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", t.Name, v, verdict)
	}

	b.WriteString(r.compareSection())
	b.WriteString("\n## Results\n\n| # | scenario | throughput/s | p50 ms | p99 ms | p99.9 ms | oversold (max) | ratios | notes |\n" +
		"|---:|---|---:|---:|---:|---:|---:|---|---|\n")
	for i, x := range r.Rows {
		var ratios, notes []string
		for _, k := range sortedKeys(x.Ratios) {
			ratios = append(ratios, fmt.Sprintf("%s = %s", k, spr(x.Ratios[k])))
		}
		for _, k := range noteExtras {
			if v, ok := x.Extra[k]; ok {
				notes = append(notes, fmt.Sprintf("%s = %s", k, spr(v)))
			}
		}
		// Rows that measured no latency (persistence) leave those cells empty rather than
		// print a 0.00 that reads as "instant".
		p50, p99, p999 := "", "", ""
		if x.P50ms.Max != 0 || x.P99ms.Max != 0 || x.P999ms.Max != 0 {
			p50, p99, p999 = spr(x.P50ms), spr(x.P99ms), spr(x.P999ms)
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s | %d | %s | %s |\n", i+1, x.Name, spr(x.ThroughputPS), p50, p99, p999,
			x.Oversold, strings.Join(ratios, "; "), strings.Join(notes, "; "))
	}

	if lv := r.levels(); len(lv) > 0 {
		b.WriteString("\n## Gateway: latency against offered load\n\n")
		if drawn["latency.png"] {
			b.WriteString("![latency against offered load](latency.png)\n\n")
		}
		b.WriteString("Open loop: each request is due at start + i/rate and timed from then, so a stalled generator or server " +
			"shows as latency (no coordinated omission). *Started late*: sent more than 1 ms after due; *not sent*: the " +
			"generator had 4,096 in flight, so the offered rate was not kept (counted as errors).\n\n")
		b.WriteString("| load | offered/s | served/s | p50 ms | p99 ms | p99.9 ms | started late | not sent (saturated) |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, l := range lv {
			fmt.Fprintf(&b, "| %d%% | %s | %s | %s | %s | %s | %s | %s |\n", l.pct, spr(l.row.Extra["offered_per_s"]), spr(l.row.ThroughputPS),
				spr(l.row.P50ms), spr(l.row.P99ms), spr(l.row.P999ms), spr(l.row.Extra["late"]), spr(l.row.Extra["saturated"]))
		}
	}
	b.WriteString(r.cpuSection())
	b.WriteString(r.curveSection())
	b.WriteString(r.openSection())
	if drawn["strategies.png"] {
		b.WriteString("\n## Strategies on one hot item\n\n![strategies on one hot item](strategies.png)\n")
	}
	if drawn["persistence.png"] {
		b.WriteString("\n## Persistence into one hot row\n\n![persistence](persistence.png)\n")
	}
	if s := r.bucketsSection(); s != "" {
		b.WriteString(s)
		if drawn["buckets.png"] {
			b.WriteString("\n![one hot prize split into stock buckets](buckets.png)\n")
		}
	}

	b.WriteString("\n## Per-stage latency\n\n")
	if drawn["stages.png"] {
		b.WriteString("![per-stage latency](stages.png)\n\n")
	}
	b.WriteString("From the services' own Prometheus histograms, scraped before and after the window, quantiles of the bucket " +
		"deltas interpolated inside the bucket (as histogram_quantile): no finer than the buckets (gateway: 0.2, 0.5, 1, 2, 5, " +
		"10, 20, 50, 100 ms, …).\n\n| stage | measured during | source | p50 ms | p99 ms | p99.9 ms | samples |\n|---|---|---|---:|---:|---:|---:|\n")
	for _, s := range r.Stages {
		src := s.Metric
		if src == "" {
			src = "load generator"
		}
		if s.P50ms == nil {
			fmt.Fprintf(&b, "| %s | %s | `%s` | %s | | | |\n", s.Name, s.MeasuredAt, src, s.Note)
			continue
		}
		n := ""
		if s.Samples != nil {
			n = spr(*s.Samples)
		}
		fmt.Fprintf(&b, "| %s | %s | `%s` | %s | %s | %s | %s |\n", s.Name, s.MeasuredAt, src, spr(*s.P50ms), spr(*s.P99ms), spr(*s.P999ms), n)
	}
	b.WriteString("\nNot measured by any histogram (so not shown):\n\n")
	for _, s := range notMeasured {
		fmt.Fprintf(&b, "- %s\n", s)
	}

	b.WriteString("\n## Per repetition\n\n| scenario | rep | throughput/s | p50 ms | p99 ms | p99.9 ms | oversold | codes |\n|---|---:|---:|---:|---:|---:|---:|---|\n")
	for _, x := range r.Rows {
		for _, s := range x.Runs {
			codes := ""
			if c, ok := s.Extra["codes"]; ok {
				codes = fmt.Sprint(c)
			}
			p50, p99, p999 := "", "", "" // a row without latency (persistence) leaves them empty, not 0
			if s.P50ms != 0 || s.P99ms != 0 || s.P999ms != 0 {
				p50, p99, p999 = num(s.P50ms), num(s.P99ms), num(s.P999ms)
			}
			fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %d | %s |\n", x.Name, s.Rep, num(s.ThroughputPS), p50, p99, p999,
				s.Oversold, codes)
		}
	}

	b.WriteString("\nMachine:")
	for _, k := range sortedKeys(r.Machine) {
		fmt.Fprintf(&b, " %s: %s;", k, r.Machine[k])
	}
	fmt.Fprintf(&b, " bench took %.0f s.\n", r.DurationS)
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

type level struct {
	pct int
	row *row
}

func (r report) levels() []level { return r.levelsOf(keyOpen) }

// curveLevels are the whole pipeline's open-loop levels (salecurve.go).
func (r report) curveLevels() []level { return r.levelsOf(keySaleOpen) }

func (r report) levelsOf(key func(int) string) []level {
	var out []level
	for _, p := range openLevels {
		if x := r.find(key(p)); x != nil {
			out = append(out, level{p, x})
		}
	}
	return out
}

// curveSection is the whole pipeline's latency curve beside the gateway alone's, with the
// stages at every level, and the pipeline's CPU per grab per process; empty when the
// salecurve step did not run.
func (r report) curveSection() string {
	lv := r.curveLevels()
	if len(lv) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n## Whole pipeline: latency against offered load while every grab is persisted\n\n" +
		"Gateway, consumer and reconciler on their shipped settings, persisting every admitted grab on the same machine " +
		"(a stock no window sells out). The load is a percentage of the pipeline's own closed-loop max, measured in the " +
		"same repetition with all of them running. **The p99 < 10 ms target is judged on this curve**: that is what a " +
		"sale is; the gateway-alone curve above is the component view. After each window the bench waits until every " +
		"admitted grab is an order (*persisted after*), so no window inherits the one before's backlog. Stage columns " +
		"are p99s from the services' histograms over the same window.\n\n")
	b.WriteString("| load | offered/s | served/s | p50 ms | p99 ms | p99.9 ms | gateway alone p99 ms | started late | not sent | " +
		"handler p99 | Redis p99 | Kafka ack p99 | admission → order p99 | persisted after s |\n" +
		"|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	gw := map[int]*row{}
	for _, l := range r.levels() {
		gw[l.pct] = l.row
	}
	ex := func(x *row, k string) string {
		if v, ok := x.Extra[k]; ok {
			return spr(v)
		}
		return "–"
	}
	for _, l := range lv {
		alone := "–"
		if g := gw[l.pct]; g != nil {
			alone = spr(g.P99ms)
		}
		x := l.row
		fmt.Fprintf(&b, "| %d%% | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", l.pct,
			ex(x, "offered_per_s"), spr(x.ThroughputPS), spr(x.P50ms), spr(x.P99ms), spr(x.P999ms), alone,
			ex(x, "late"), ex(x, "saturated"), ex(x, "stage_gateway_handler_p99_ms"), ex(x, "stage_redis_reserve_p99_ms"),
			ex(x, "stage_kafka_ack_p99_ms"), ex(x, "stage_admission_to_order_p99_ms"), ex(x, "persist_lag_s"))
	}
	if mx := r.find(keySaleMax); mx != nil {
		fmt.Fprintf(&b, "\nClosed-loop max with the whole pipeline: %s grabs/s (best of %s clients); admitted grabs without an "+
			"order at the end: %s.\n\nCPU per admitted grab at that max, per process (utime + stime from /proc over the "+
			"window and until its last order was committed; the cost model in docs/performance.md reads these):\n\n"+
			"| process | CPU µs per grab |\n|---|---:|\n", spr(mx.ThroughputPS), ex(mx, "concurrency"), ex(mx, "not_persisted"))
		for _, k := range sortedKeys(mx.Extra) {
			if name, ok := strings.CutPrefix(k, "cpu_us_per_grab_"); ok && name != "total" {
				fmt.Fprintf(&b, "| %s | %s |\n", name, spr(mx.Extra[k]))
			}
		}
		if v, ok := mx.Extra["cpu_us_per_grab_total"]; ok {
			fmt.Fprintf(&b, "| **total** | %s |\n", spr(v))
		}
	}
	return b.String()
}

// ---------------------------------------------------------------- charts

// drawCharts writes one PNG per question the run has data for and returns their names.
func drawCharts(dir string, r report) ([]string, error) {
	var written []string
	for _, c := range []struct {
		file string
		draw func(report) (*plot.Plot, error)
	}{
		{"strategies.png", strategiesChart},
		{"persistence.png", persistenceChart},
		{"latency.png", latencyChart},
		{"stages.png", stagesChart},
		{"buckets.png", bucketsChart},
	} {
		p, err := c.draw(r)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.file, err)
		}
		if p == nil {
			continue
		}
		if err := p.Save(vg.Points(900), vg.Points(560), filepath.Join(dir, c.file)); err != nil {
			return nil, fmt.Errorf("%s: %w", c.file, err)
		}
		written = append(written, c.file)
	}
	return written, nil
}

var (
	blue   = color.RGBA{R: 40, G: 110, B: 200, A: 255}
	orange = color.RGBA{R: 220, G: 110, B: 40, A: 255}
	green  = color.RGBA{R: 60, G: 160, B: 90, A: 255}
	grey   = color.RGBA{R: 110, G: 110, B: 110, A: 255}
	red    = color.RGBA{R: 200, G: 40, B: 40, A: 255}
)

// The charts draw on a linear axis of log10(value) with ticks labelled in values: gonum's
// LogScale places a centred axis label by the arithmetic midpoint of the data range, which
// on a log axis pushes the label (and so the whole plot) far down the canvas.

func lg(v float64) float64 { return math.Log10(v) }

// logTicks labels every power of ten in [lo, hi] (log10 units), with unlabelled ticks at
// 2..9 times each.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	for k := math.Floor(lo); k <= math.Ceil(hi); k++ {
		for m := 1; m < 10; m++ {
			v := lg(float64(m)) + k
			if v < lo-1e-9 || v > hi+1e-9 {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 {
				if t.Label = strconv.FormatFloat(math.Pow(10, k), 'f', -1, 64); k >= 3 {
					t.Label = thousands(math.Pow(10, k))
				}
			}
			out = append(out, t)
		}
	}
	return out
}

// logAxis spans [lo, hi] (values) on p's Y axis in log10 units, with extra decades above
// for labels and a legend.
func logAxis(p *plot.Plot, lo, hi, roomDecades float64) {
	p.Y.Min, p.Y.Max = math.Floor(lg(lo)), lg(hi)+roomDecades
	p.Y.Tick.Marker = logTicks{}
}

// logBars draws bars from the bottom of a log axis to each median, a min–max whisker
// over several repetitions, and the median written above.
type logBars struct {
	vals   []spread
	offset float64 // x shift within a group, in category units
	width  float64 // in category units
	color  color.Color
	label  func(v float64) string
}

func (lb *logBars) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	line := draw.LineStyle{Color: color.Black, Width: vg.Points(1)}
	sty := p.X.Tick.Label
	sty.XAlign, sty.YAlign = draw.XCenter, draw.YBottom
	for i, v := range lb.vals {
		if !(v.Median > 0) {
			continue
		}
		x := float64(i) + lb.offset
		x0, x1, xm := trX(x-lb.width/2), trX(x+lb.width/2), trX(x)
		y0, y1 := trY(p.Y.Min), trY(lg(v.Median))
		c.FillPolygon(lb.color, c.ClipPolygonY([]vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}}))
		top := y1
		if v.N > 1 && v.Min > 0 && v.Max > v.Min {
			lo, hi := trY(lg(v.Min)), trY(lg(v.Max))
			capW := (x1 - x0) / 4
			c.StrokeLines(line, c.ClipLinesY([]vg.Point{{X: xm, Y: lo}, {X: xm, Y: hi}},
				[]vg.Point{{X: xm - capW, Y: lo}, {X: xm + capW, Y: lo}}, []vg.Point{{X: xm - capW, Y: hi}, {X: xm + capW, Y: hi}})...)
			top = max(top, hi)
		}
		if lb.label != nil {
			c.FillText(sty, vg.Point{X: xm, Y: top + vg.Points(3)}, lb.label(v.Median))
		}
	}
}

// valueRange is the smallest and largest positive value the bars show (values, not logs).
func (lb *logBars) valueRange() (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, v := range lb.vals {
		for _, y := range []float64{v.Median, v.Min, v.Max} {
			if y > 0 {
				lo, hi = min(lo, y), max(hi, y)
			}
		}
	}
	return lo, hi
}

func (lb *logBars) DataRange() (xmin, xmax, ymin, ymax float64) {
	lo, hi := lb.valueRange()
	return -0.5, float64(len(lb.vals)) - 0.5, lg(lo), lg(hi)
}

func (lb *logBars) Thumbnail(c *draw.Canvas) {
	pts := []vg.Point{{X: c.Min.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Max.Y}, {X: c.Min.X, Y: c.Max.Y}}
	c.FillPolygon(lb.color, pts)
}

// logY puts p's Y axis on a log scale spanning the bars, roomDecades above them.
func logY(p *plot.Plot, roomDecades float64, bars ...*logBars) bool {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, b := range bars {
		l, h := b.valueRange()
		lo, hi = min(lo, l), max(hi, h)
	}
	if math.IsInf(lo, 0) || math.IsInf(hi, 0) {
		return false
	}
	logAxis(p, lo, hi, roomDecades)
	return true
}

func rowsOf(r report, keys ...string) []*row {
	var out []*row
	for _, k := range keys {
		out = append(out, r.find(k))
	}
	return out
}

// strategiesChart: the four strategies side by side, log scale.
func strategiesChart(r report) (*plot.Plot, error) {
	rows := rowsOf(r, keyPipeline, keyLock, keyOptimistic, keyPessimistic)
	if rows[0] == nil {
		return nil, nil
	}
	names := []string{"(a) this pipeline\nLua + Kafka + batched consumer", "(b) Redis lock\naround read-check-decrement",
		"(c) DB optimistic lock\nper request, tiered retries", "(d) DB pessimistic\nSELECT … FOR UPDATE"}
	ratios := []string{"", "pipeline_over_redis_lock", "pipeline_over_db_optimistic", "pipeline_over_db_pessimistic"}
	var vals []spread
	var labels []string
	for i, x := range rows {
		if x == nil {
			continue
		}
		name := names[i]
		if s, ok := rows[0].Ratios[ratios[i]]; ok {
			name += fmt.Sprintf("\n(a) is %s× this", num(s.Median))
		}
		vals, labels = append(vals, x.ThroughputPS), append(labels, name)
	}
	return rateBars("Four strategies on one hot item: same stock (2,000), crowd and HTTP front",
		"requests answered per second (log scale; whiskers: min–max over repetitions)", vals, labels, blue), nil
}

// rateBars is one bar per label on a log scale, each median written above it as a rate;
// nil when no bar has a positive value.
func rateBars(title, yLabel string, vals []spread, labels []string, c color.Color) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = yLabel
	bars := &logBars{vals: vals, width: 0.6, color: c, label: func(v float64) string { return num(v) + "/s" }}
	p.Add(plotter.NewGrid(), bars)
	if !logY(p, 0.3, bars) {
		return nil
	}
	p.NominalX(labels...)
	return p
}

// persistenceChart: per MariaDB mode, batched vs one transaction per order vs the consumer.
func persistenceChart(r report) (*plot.Plot, error) {
	var groups []string
	var batched, perOrder, consumer []spread
	for _, m := range []string{modeConfigured, modeBinlog} {
		h, k := r.find(keyHotRow(m)), r.find(keyKafkaMySQL(m))
		if h == nil && k == nil {
			continue
		}
		groups = append(groups, "MariaDB "+m)
		var b, o, c spread
		if h != nil {
			b, o = h.ThroughputPS, h.Extra[extraPerOrder]
		}
		if k != nil {
			c = k.ThroughputPS
		}
		batched, perOrder, consumer = append(batched, b), append(perOrder, o), append(consumer, c)
	}
	if len(groups) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = "Persistence into one hot stock row: orders per second"
	p.Y.Label.Text = "orders committed per second (log scale; whiskers: min–max)"
	label := func(v float64) string { return num(v) }
	bs := []*logBars{
		{vals: batched, offset: -0.27, width: 0.25, color: blue, label: label},
		{vals: perOrder, offset: 0, width: 0.25, color: orange, label: label},
		{vals: consumer, offset: 0.27, width: 0.25, color: green, label: label},
	}
	p.Add(plotter.NewGrid())
	for _, b := range bs {
		p.Add(b)
	}
	p.Legend.Add("batched, 500 orders per transaction (cmd/hotrow)", bs[0])
	p.Legend.Add("one transaction per order (cmd/hotrow)", bs[1])
	p.Legend.Add("Kafka → MySQL: the consumer draining one hot prize", bs[2])
	p.Legend.Top, p.Legend.Left, p.Legend.YOffs = true, true, -vg.Points(12)
	if !logY(p, 1, bs...) { // a decade of room for the legend
		return nil, nil
	}
	p.Y.Max = max(p.Y.Max, lg(20_000)+1)
	target, err := hline(lg(20_000), float64(len(groups)), red)
	if err != nil {
		return nil, err
	}
	p.Add(target)
	p.Legend.Add("target: Kafka → MySQL ≥ 20,000 orders/s", target)
	p.NominalX(groups...)
	return p, nil
}

func hline(y, n float64, c color.Color) (*plotter.Line, error) {
	l, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: y}, {X: n - 0.5, Y: y}})
	if err != nil {
		return nil, err
	}
	l.Color, l.Dashes, l.Width = c, []vg.Length{vg.Points(5), vg.Points(3)}, vg.Points(1.2)
	return l, nil
}

// errPoints are medians with min–max as Y errors.
type errPoints struct {
	xs []float64
	ys []spread
}

// They plot in log10 units (see logAxis).
func (e errPoints) Len() int                    { return len(e.xs) }
func (e errPoints) XY(i int) (float64, float64) { return e.xs[i], lg(e.ys[i].Median) }
func (e errPoints) YError(i int) (float64, float64) {
	return lg(e.ys[i].Median) - lg(e.ys[i].Min), lg(e.ys[i].Max) - lg(e.ys[i].Median)
}

// latencyChart: client-observed p50, p99, p99.9 against the offered load, for the whole
// pipeline (solid) when the salecurve step ran, and the gateway alone (dashed).
func latencyChart(r report) (*plot.Plot, error) {
	gw, pipe := r.levels(), r.curveLevels()
	if len(gw) == 0 && len(pipe) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = "Latency against offered load (open loop, timed from each request's due time)"
	if len(pipe) > 0 {
		p.Title.Text = "Latency against offered load: whole pipeline persisting (solid), gateway alone (dashed)"
	}
	p.X.Label.Text = "offered load, % of the closed-loop max measured in the same repetition (grabs/s offered, median)"
	p.Y.Label.Text = "client-observed latency, ms (log scale; whiskers: min–max)"
	// Tick labels name the offered rate of the curve the target is judged on.
	tickLevels := gw
	if len(pipe) > 0 {
		tickLevels = pipe
	}
	var ticks []plot.Tick
	for _, l := range tickLevels {
		label := fmt.Sprintf("%d%%\n%s/s", l.pct, num(l.row.Extra["offered_per_s"].Median))
		if s := l.row.Extra["saturated"]; s.Max > 0 {
			label += fmt.Sprintf("\nnot sent: %s", num(s.Median))
		}
		ticks = append(ticks, plot.Tick{Value: float64(l.pct), Label: label})
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, l := range append(append([]level{}, gw...), pipe...) {
		for _, s := range []spread{l.row.P50ms, l.row.P999ms} {
			for _, v := range []float64{s.Min, s.Max} {
				if v > 0 {
					lo, hi = min(lo, v), max(hi, v)
				}
			}
		}
	}
	if math.IsInf(lo, 0) {
		return nil, nil
	}
	p.Add(plotter.NewGrid())
	quantiles := []struct {
		name string
		get  func(*row) spread
		c    color.Color
	}{
		{"p50", func(x *row) spread { return x.P50ms }, blue},
		{"p99", func(x *row) spread { return x.P99ms }, orange},
		{"p99.9", func(x *row) spread { return x.P999ms }, red},
	}
	for _, curve := range []struct {
		name   string
		lv     []level
		dashed bool
	}{{"whole pipeline", pipe, false}, {"gateway alone", gw, len(pipe) > 0}} {
		for _, q := range quantiles {
			var pts errPoints
			for _, l := range curve.lv {
				if v := q.get(l.row); v.Median > 0 && v.Min > 0 {
					pts.xs, pts.ys = append(pts.xs, float64(l.pct)), append(pts.ys, v)
				}
			}
			if pts.Len() == 0 {
				continue
			}
			line, scatter, err := plotter.NewLinePoints(pts)
			if err != nil {
				return nil, err
			}
			line.Color, scatter.Color = q.c, q.c
			if curve.dashed {
				line.Dashes = []vg.Length{vg.Points(2), vg.Points(3)}
			}
			eb, err := plotter.NewYErrorBars(pts)
			if err != nil {
				return nil, err
			}
			eb.Color = q.c
			p.Add(line, scatter, eb)
			name := q.name
			if len(pipe) > 0 {
				name = curve.name + " " + q.name
			}
			p.Legend.Add(name, line, scatter)
		}
	}
	target, err := plotter.NewLine(plotter.XYs{{X: 0, Y: lg(10)}, {X: 100, Y: lg(10)}})
	if err != nil {
		return nil, err
	}
	target.Color, target.Dashes = grey, []vg.Length{vg.Points(5), vg.Points(3)}
	p.Add(target)
	p.Legend.Add("target: p99 < 10 ms at 50%", target)
	p.Legend.Top, p.Legend.Left, p.Legend.YOffs = true, true, -vg.Points(12)
	p.X.Min, p.X.Max = 0, 100
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	logAxis(p, min(lo, 10), max(hi, 10), 1.3)
	return p, nil
}

// stagesChart: p50, p99 and p99.9 of each stage a histogram measures.
func stagesChart(r report) (*plot.Plot, error) {
	var names []string
	var p50, p99, p999 []spread
	for _, s := range r.Stages {
		if s.P50ms == nil {
			continue
		}
		names = append(names, wrap(s.Name, 15)) // up to a dozen stages share the axis
		p50, p99, p999 = append(p50, *s.P50ms), append(p99, *s.P99ms), append(p999, *s.P999ms)
	}
	if len(names) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = "Where a grab's time goes: per-stage latency (gateway alone and whole pipeline at 50% of their max; consumer during the whole sale)"
	p.X.Label.Text = "stage (from the services' histograms, bucket-interpolated; stages no histogram covers are listed in results.md)"
	p.Y.Label.Text = "latency, ms (log scale; whiskers: min–max)"
	label := func(v float64) string { return num(v) }
	bs := []*logBars{
		{vals: p50, offset: -0.27, width: 0.25, color: blue, label: label},
		{vals: p99, offset: 0, width: 0.25, color: orange, label: label},
		{vals: p999, offset: 0.27, width: 0.25, color: red, label: label},
	}
	p.Add(plotter.NewGrid())
	for i, b := range bs {
		p.Add(b)
		p.Legend.Add([]string{"p50", "p99", "p99.9"}[i], b)
	}
	p.Legend.Top, p.Legend.Left, p.Legend.YOffs = true, true, -vg.Points(12)
	if !logY(p, 1, bs...) {
		return nil, nil
	}
	p.NominalX(names...)
	return p, nil
}

// wrap breaks s into lines of about n characters at spaces.
func wrap(s string, n int) string {
	var lines []string
	cur := ""
	for _, w := range strings.Fields(s) {
		if cur != "" && len(cur)+1+len(w) > n {
			lines = append(lines, cur)
			cur = w
			continue
		}
		if cur != "" {
			cur += " "
		}
		cur += w
	}
	return strings.Join(append(lines, cur), "\n")
}
