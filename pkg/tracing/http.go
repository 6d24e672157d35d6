package tracing

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Handler wraps h so every request it serves is a server span (otelhttp), the child of the
// W3C traceparent the request carries when it carries one (an edge proxy's or a client's:
// the parent-based sampler keeps what the caller sampled), named after the route the mux
// matched ("POST /api/v1/sessions/{session}/prizes/{prize}/grab": one name per route, not
// one per URL; the method alone for a request no route matched, otelhttp's naming) with
// http.route set; a 5xx answer is the span's error status. Requests for
// the paths in untraced (probes, scrapes) make no span. Off, Handler returns h itself: no
// wrapper at all, so a service without tracing serves exactly what it served before.
//
// The provider and propagator are this Tracing's, never otel's globals; otelhttp's own
// metrics go to a no-op meter (the services' metrics are Prometheus's).
func (t *Tracing) Handler(h http.Handler, untraced ...string) http.Handler {
	if !t.On() {
		return h
	}
	skip := make(map[string]bool, len(untraced))
	for _, p := range untraced {
		skip[p] = true
	}
	return otelhttp.NewHandler(routed{h}, "",
		otelhttp.WithTracerProvider(t.provider),
		otelhttp.WithPropagators(t.prop),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelhttp.WithFilter(func(r *http.Request) bool { return !skip[r.URL.Path] }))
}

// routed sets http.route on the server span once the mux has matched the request:
// otelhttp reads r.Pattern when the span starts, before any mux has routed it. The mux
// sets Pattern on the very request it is given, so it is read here after ServeHTTP.
type routed struct{ h http.Handler }

func (rt routed) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt.h.ServeHTTP(w, r)
	p := r.Pattern
	if p == "" {
		return
	}
	if i := strings.IndexByte(p, '/'); i >= 0 { // the path of "[METHOD ][HOST]/PATH"
		trace.SpanFromContext(r.Context()).SetAttributes(semconv.HTTPRoute(p[i:]))
	}
}
