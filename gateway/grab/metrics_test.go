package grab

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seckill-pipeline/seckill/gateway/admission"
	"github.com/seckill-pipeline/seckill/gateway/jsonapi"
)

// testMetrics are the grab path's metrics on a registry of their own.
func testMetrics() *metrics {
	return newMetrics(prometheus.NewRegistry(), admission.New(admission.Config{Max: 1}))
}

func TestResponsesCountedByRouteAndCode(t *testing.T) {
	api := &API{inflight: make(chan struct{}, 1), metrics: testMetrics(), admission: admission.New(admission.Config{Max: 1})}
	h := api.guard("grab", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("fail") != "" {
			jsonapi.WriteError(w, http.StatusServiceUnavailable, "not_loaded", "retry")
			return
		}
		_, _ = w.Write([]byte("{}")) // an implicit 200
	}))
	for _, url := range []string{"/", "/?fail=1", "/?fail=1"} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, url, nil))
	}
	api.inflight <- struct{}{} // full: the overload refusal is counted too
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", nil))
	for code, want := range map[string]float64{"200": 1, "503": 3} {
		if got := testutil.ToFloat64(api.metrics.responses.WithLabelValues("grab", code)); got != want {
			t.Errorf("responses{code=%s} = %v, want %v", code, got, want)
		}
	}
}
