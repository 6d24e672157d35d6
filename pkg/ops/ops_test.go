package ops

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// /metrics speaks OpenMetrics, with the exemplars, to a scraper that asks for it, and the
// text format, without them, to every other one.
func TestMetricsServeExemplarsToWhoAsksForOpenMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "x_seconds", Help: "x", Buckets: []float64{1}})
	reg.MustRegister(h)
	h.(prometheus.ExemplarObserver).ObserveWithExemplar(0.5, prometheus.Labels{"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"})
	mux := http.NewServeMux()
	Register(mux, reg, nil)
	scrape := func(accept string) (string, string) {
		r := httptest.NewRequest("GET", "/metrics", nil)
		if accept != "" {
			r.Header.Set("Accept", accept)
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		b, _ := io.ReadAll(w.Result().Body)
		return w.Result().Header.Get("Content-Type"), string(b)
	}
	ct, body := scrape("")
	if !strings.HasPrefix(ct, "text/plain") || strings.Contains(body, "trace_id") || !strings.Contains(body, "x_seconds_count 1") {
		t.Fatalf("plain scrape: %s\n%s", ct, body)
	}
	ct, body = scrape("application/openmetrics-text;version=1.0.0;q=0.9,text/plain;q=0.5")
	if !strings.HasPrefix(ct, "application/openmetrics-text") || !strings.Contains(body, `# {trace_id="4bf92f3577b34da6a3ce929d0e0e4736"} 0.5`) {
		t.Fatalf("OpenMetrics scrape: %s\n%s", ct, body)
	}
}
