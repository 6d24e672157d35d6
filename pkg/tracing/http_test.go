package tracing

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func TestHandlerIsTheHandlerItselfWhenOff(t *testing.T) {
	mux := http.NewServeMux()
	for name, tr := range map[string]*Tracing{"off": Off(), "nil": nil} {
		if got := tr.Handler(mux, "/healthz"); got != http.Handler(mux) {
			t.Errorf("%s: Handler wrapped the mux in %T", name, got)
		}
	}
}

func TestHandlerSpansAreNamedAfterTheRouteAndFollowTheCaller(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tr := With(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)), "test")
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/sessions/{session}/prizes/{prize}/grab", func(w http.ResponseWriter, r *http.Request) {
		if !trace.SpanContextFromContext(r.Context()).IsValid() {
			t.Error("the handler's context holds no span")
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	mux.HandleFunc("/legacy", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /healthz", func(http.ResponseWriter, *http.Request) {})
	h := tr.Handler(mux, "/healthz", "/metrics")

	serve := func(method, url, traceparent string) {
		r := httptest.NewRequest(method, url, nil)
		if traceparent != "" {
			r.Header.Set("traceparent", traceparent)
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	serve("POST", "/api/v1/sessions/12/prizes/34/grab", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	serve("GET", "/legacy", "")
	serve("GET", "/healthz", "")
	serve("GET", "/nowhere/12", "")

	spans := exp.GetSpans()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 3 (none for /healthz): %v", len(spans), spans.Snapshots())
	}
	grab := spans[0]
	if grab.Name != "POST /api/v1/sessions/{session}/prizes/{prize}/grab" || grab.SpanKind != trace.SpanKindServer {
		t.Fatalf("grab span %q kind %v", grab.Name, grab.SpanKind)
	}
	if !hasAttr(grab.Attributes, attribute.String("http.route", "/api/v1/sessions/{session}/prizes/{prize}/grab")) {
		t.Errorf("grab span without http.route: %v", grab.Attributes)
	}
	if grab.Status.Code != codes.Error {
		t.Errorf("a 503 left the span's status %v", grab.Status)
	}
	if grab.SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" ||
		grab.Parent.SpanID().String() != "00f067aa0ba902b7" || !grab.Parent.IsRemote() {
		t.Errorf("the caller's traceparent was not the parent: trace %s parent %s", grab.SpanContext.TraceID(), grab.Parent.SpanID())
	}
	if spans[1].Name != "GET /legacy" {
		t.Errorf("a method-less route's span is %q", spans[1].Name)
	}
	if spans[2].Name != "GET" {
		t.Errorf("an unrouted request's span is %q, want the method alone", spans[2].Name)
	}
}

func hasAttr(as []attribute.KeyValue, want attribute.KeyValue) bool {
	for _, a := range as {
		if a == want {
			return true
		}
	}
	return false
}
