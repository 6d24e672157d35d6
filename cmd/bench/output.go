package main

import (
	"fmt"
	"image/color"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

func (r report) markdown() string {
	var b strings.Builder
	b.WriteString("| # | scenario | throughput/s | p50 ms | p99 ms | p99.9 ms | oversold | ratios and notes |\n|---:|---|---:|---:|---:|---:|---:|---|\n")
	for i, s := range r.Scenarios {
		var notes []string
		keys := make([]string, 0, len(s.Ratios))
		for k := range s.Ratios {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			notes = append(notes, fmt.Sprintf("%s = %.2f", k, s.Ratios[k]))
		}
		for _, k := range []string{"cpu_seconds_per_1000_grabs", "gateway_peak_rss_mb", "one_tx_per_order_per_s", "conflict_rate",
			"attempt_conflict_rate", "requests_failed_on_conflict_rate", "sold", "last_admission_to_last_order_s", "codes"} {
			if v, ok := s.Extra[k]; ok {
				switch x := v.(type) {
				case float64:
					notes = append(notes, fmt.Sprintf("%s = %.3g", k, x))
				default:
					notes = append(notes, fmt.Sprintf("%s = %v", k, x))
				}
			}
		}
		// Rows that measured no latency (persistence, hot row) leave those cells empty
		// rather than print a 0.00 that reads as "instant".
		p50, p99, p999 := "", "", ""
		if s.P50ms != 0 || s.P99ms != 0 || s.P999ms != 0 {
			p50, p99, p999 = fmt.Sprintf("%.2f", s.P50ms), fmt.Sprintf("%.2f", s.P99ms), fmt.Sprintf("%.2f", s.P999ms)
		}
		b.WriteString(fmt.Sprintf("| %d | %s | %.0f | %s | %s | %s | %d | %s |\n", i+1, s.Name, s.ThroughputPS, p50, p99, p999,
			s.Oversold, strings.Join(notes, "; ")))
	}
	keys := make([]string, 0, len(r.Machine))
	for k := range r.Machine {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b.WriteString("\nMachine:")
	for _, k := range keys {
		b.WriteString(fmt.Sprintf(" %s: %s;", k, r.Machine[k]))
	}
	b.WriteString(fmt.Sprintf(" bench took %.0f s.\n", r.DurationS))
	return b.String()
}

// chart draws throughput and p99 per scenario, one bar chart above the other.
func chart(path string, r report) error {
	var names []string
	var tput, p99 plotter.Values
	for i, s := range r.Scenarios {
		names = append(names, fmt.Sprintf("%d", i+1))
		tput = append(tput, s.ThroughputPS)
		p99 = append(p99, s.P99ms)
	}
	mk := func(title, ylabel string, v plotter.Values, c color.Color) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = title
		p.Y.Label.Text = ylabel
		p.X.Label.Text = "scenario (numbered as in results.md)"
		bars, err := plotter.NewBarChart(v, vg.Points(14))
		if err != nil {
			return nil, err
		}
		bars.Color = c
		p.Add(bars)
		p.NominalX(names...)
		return p, nil
	}
	top, err := mk("throughput per scenario", "per second", tput, color.RGBA{R: 40, G: 110, B: 200, A: 255})
	if err != nil {
		return err
	}
	bottom, err := mk("p99 latency per scenario", "ms", p99, color.RGBA{R: 210, G: 90, B: 40, A: 255})
	if err != nil {
		return err
	}
	img := vgimg.New(vg.Points(900), vg.Points(700))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6), PadX: vg.Points(6), PadY: vg.Points(12)}
	canvases := plot.Align([][]*plot.Plot{{top}, {bottom}}, tiles, dc)
	top.Draw(canvases[0][0])
	bottom.Draw(canvases[1][0])
	w, err := createFile(path)
	if err != nil {
		return err
	}
	defer w.Close()
	_, err = vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}
