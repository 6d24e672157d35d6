package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
)

// fakeProm answers every query with one series, except those naming "absent" (no series) and
// "broken" (a query error).
func fakeProm() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query().Get("query")
		switch {
		case strings.Contains(q, "broken"):
			_, _ = io.WriteString(w, `{"status":"error","error":"parse error"}`)
		case strings.Contains(q, "absent"):
			_, _ = io.WriteString(w, `{"status":"success","data":{"resultType":"vector","result":[]}}`)
		default:
			_, _ = io.WriteString(w, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"1"]}]}}`)
		}
	}))
}

func panelOf(t *testing.T, exprs ...string) dashboard.Dashboard {
	t.Helper()
	var targets []*prometheus.DataqueryBuilder
	for _, e := range exprs {
		targets = append(targets, q(e, e))
	}
	d, err := dashboard.NewDashboardBuilder("t").WithPanel(series("p", "short", "", targets...)).Build()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestCheckRequireData(t *testing.T) {
	srv := fakeProm()
	defer srv.Close()
	quiet := map[string]string{"absent_when_healthy": "why"}

	d := panelOf(t, "up", "absent_when_healthy", "absent_metric")
	if err := checkQueries(d, srv.URL, false, nil, io.Discard); err != nil {
		t.Errorf("without -require-data an empty query only gets listed: %v", err)
	}
	err := checkQueries(d, srv.URL, true, quiet, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "absent_metric: no data") || strings.Contains(err.Error(), "absent_when_healthy") {
		t.Errorf("with -require-data: err = %v, want absent_metric failing and the quiet query let be", err)
	}
	if err := checkQueries(panelOf(t, "up", "absent_when_healthy"), srv.URL, true, quiet, io.Discard); err != nil {
		t.Errorf("only a quiet query empty: %v", err)
	}
	for _, require := range []bool{false, true} {
		if err := checkQueries(panelOf(t, "up", "broken"), srv.URL, require, nil, io.Discard); err == nil {
			t.Errorf("requireData=%v: a query error passed", require)
		}
	}
}

// Every query marked quiet is one of the dashboard's: a marker left behind by a removed or
// reworded query would let nothing through and hide that it is stale.
func TestQuietQueriesAreOnTheDashboard(t *testing.T) {
	b, quiet := build()
	d, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	on := map[string]bool{}
	for _, p := range d.Panels {
		if p.Panel == nil {
			continue
		}
		for _, tg := range p.Panel.Targets {
			if pq, ok := tg.(prometheus.Dataquery); ok {
				on[pq.Expr] = true
			}
		}
	}
	if len(quiet) == 0 {
		t.Fatal("no query marked quiet")
	}
	for expr, why := range quiet {
		if !on[expr] {
			t.Errorf("quiet %q (%s) is on no panel", expr, why)
		}
		if why == "" {
			t.Errorf("quiet %q says not why", expr)
		}
	}
}

// The grab path's latency panels mark the sampled grabs' exemplars, on one query each (each
// query would mark the same exemplars again); other panels ask for none.
func TestGrabLatencyPanelsShowExemplarsOnce(t *testing.T) {
	b, _ := build()
	d, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"HTTP grab latency": true, "Redis admission script latency": true, "Kafka ack (acks=all) latency": true}
	seen := 0
	for _, p := range d.Panels {
		if p.Panel == nil || p.Panel.Title == nil {
			continue
		}
		n := 0
		for _, tg := range p.Panel.Targets {
			if pq, ok := tg.(prometheus.Dataquery); ok && pq.Exemplar != nil && *pq.Exemplar {
				n++
			}
		}
		title := *p.Panel.Title
		switch {
		case want[title] && n != 1:
			t.Errorf("%s: %d queries with exemplars, want 1", title, n)
		case !want[title] && n != 0:
			t.Errorf("%s: %d queries with exemplars, want none", title, n)
		}
		if want[title] {
			seen++
		}
	}
	if seen != len(want) {
		t.Fatalf("%d of the %d grab latency panels found", seen, len(want))
	}
}
