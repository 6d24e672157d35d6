// Package otlptest is an OTLP/HTTP trace receiver for tests: it takes the protobuf exports a
// service's tracing sends (gzip or not) on /v1/traces, refuses anything else, and keeps the
// spans, so a test can check what a process exported without a collector. Tests that need
// a real one use the stack's Jaeger (internal/jaegertest).
package otlptest

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Collector is the receiver; URL is what OTEL_EXPORTER_OTLP_ENDPOINT takes.
type Collector struct {
	*httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
}

// New starts a Collector, closed when the test ends.
func New(tb testing.TB) *Collector {
	tb.Helper()
	c := &Collector{}
	c.Server = httptest.NewServer(http.HandlerFunc(c.receive))
	tb.Cleanup(c.Close)
	return c
}

func (c *Collector) receive(w http.ResponseWriter, r *http.Request) {
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = gz
	}
	b, err := io.ReadAll(body)
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(b, &req)
	}
	if err != nil || r.URL.Path != "/v1/traces" {
		http.Error(w, "want an OTLP/HTTP protobuf export on /v1/traces", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			c.spans = append(c.spans, ss.GetSpans()...)
		}
	}
	c.mu.Unlock()
	resp, err := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(resp) // a client gone is the client's failure to see
}

// Spans are the spans received so far.
func (c *Collector) Spans() []*tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*tracepb.Span(nil), c.spans...)
}

// Span is the received span of id, or nil.
func (c *Collector) Span(id []byte) *tracepb.Span {
	for _, s := range c.Spans() {
		if bytes.Equal(s.GetSpanId(), id) {
			return s
		}
	}
	return nil
}

// Named are the received spans called name.
func (c *Collector) Named(name string) []*tracepb.Span {
	var out []*tracepb.Span
	for _, s := range c.Spans() {
		if s.GetName() == name {
			out = append(out, s)
		}
	}
	return out
}
