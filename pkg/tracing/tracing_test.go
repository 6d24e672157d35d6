package tracing

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/segmentio/kafka-go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestSetupIsOffWithoutAnEndpointOrWhenDisabled(t *testing.T) {
	for name, env := range map[string]map[string]string{
		"nothing set":       {},
		"sdk disabled":      {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"},
		"exporter none":     {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"},
		"sampler only, off": {"OTEL_TRACES_SAMPLER": "always_on"},
	} {
		tr, err := Setup(context.Background(), "test", envOf(env))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if tr.On() || tr.Sampler() != "off" {
			t.Errorf("%s: tracing on (%s), want off", name, tr.Sampler())
		}
		ctx, span := tr.Start(context.Background(), "x")
		if span.IsRecording() || trace.SpanContextFromContext(ctx).IsValid() {
			t.Errorf("%s: an off tracing made a span", name)
		}
		m := kafka.Message{}
		tr.Inject(ctx, &m)
		if len(m.Headers) != 0 {
			t.Errorf("%s: an off tracing wrote headers %v", name, m.Headers)
		}
	}
}

func TestSetupRefusesWhatItDoesNotSupport(t *testing.T) {
	base := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
	for _, c := range []struct{ key, value, want string }{
		{"OTEL_TRACES_EXPORTER", "zipkin", "only otlp"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "only http/protobuf"},
		{"OTEL_TRACES_SAMPLER", "sometimes", "want always_on"},
		{"OTEL_TRACES_SAMPLER_ARG", "1.5", "ratio from 0 to 1"},
		{"OTEL_TRACES_SAMPLER_ARG", "half", "ratio from 0 to 1"},
	} {
		env := map[string]string{c.key: c.value}
		for k, v := range base {
			env[k] = v
		}
		_, err := Setup(context.Background(), "test", envOf(env))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s=%s: err %v, want one saying %q", c.key, c.value, err, c.want)
		}
	}
}

func TestTheSamplerFollowsTheStandardVariables(t *testing.T) {
	for _, c := range []struct {
		sampler, arg, want string
	}{
		{"", "", "parentbased_traceidratio 0.01 (default)"},
		{"", "0.5", "parentbased_traceidratio 0.5 (default)"},
		{"parentbased_traceidratio", "0.25", "parentbased_traceidratio 0.25"},
		{"always_on", "", "always_on"},
		{"traceidratio", "", "traceidratio 1"},
	} {
		tr, err := Setup(context.Background(), "test", envOf(map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_TRACES_SAMPLER": c.sampler, "OTEL_TRACES_SAMPLER_ARG": c.arg}))
		if err != nil {
			t.Fatal(err)
		}
		if got := tr.Sampler(); got != c.want {
			t.Errorf("sampler %q arg %q: %q, want %q", c.sampler, c.arg, got, c.want)
		}
		_ = tr.Shutdown(canceled())
	}
}

// canceled is a context already done: Shutdown must not wait for an exporter nobody runs.
func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func sampledContext() context.Context {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled, TraceState: mustState("vendor=x")})
	return trace.ContextWithSpanContext(context.Background(), sc)
}

func mustState(s string) trace.TraceState {
	ts, err := trace.ParseTraceState(s)
	if err != nil {
		panic(err)
	}
	return ts
}

func TestHeadersCarryTheW3CContextThroughAMessage(t *testing.T) {
	tr := With(sdktrace.NewTracerProvider(), "test")
	m := kafka.Message{Headers: []kafka.Header{{Key: "schema", Value: []byte("grab.v1")}, {Key: "traceparent", Value: []byte("stale")}}}
	tr.Inject(sampledContext(), &m)
	h := Headers{&m.Headers}
	if got := h.Get("traceparent"); got != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Fatalf("traceparent %q", got)
	}
	n := 0
	for _, h := range m.Headers {
		if h.Key == "traceparent" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d traceparent headers, want the stale one replaced", n)
	}
	if got := h.Get("tracestate"); got != "vendor=x" {
		t.Fatalf("tracestate %q", got)
	}
	if got := h.Get("schema"); got != "grab.v1" {
		t.Fatalf("the message's own header changed: %q", got)
	}
	back := trace.SpanContextFromContext(tr.Extract(context.Background(), m))
	want := trace.SpanContextFromContext(sampledContext())
	if back.TraceID() != want.TraceID() || back.SpanID() != want.SpanID() || !back.IsSampled() || !back.IsRemote() {
		t.Fatalf("extracted %+v, want %+v as remote", back, want)
	}
	if keys := h.Keys(); len(keys) != 3 {
		t.Fatalf("keys %v", keys)
	}
	if linked := tr.SpanContextOf(m); !linked.Equal(back) {
		t.Fatalf("SpanContextOf %+v, want %+v", linked, back)
	}
	if Off().SpanContextOf(m).IsValid() || Off().Extract(context.Background(), m) != context.Background() {
		t.Fatal("an off tracing read the headers")
	}
}

func TestLogLinesInsideASpanCarryItsIDs(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(LogHandler(slog.NewJSONHandler(&buf, nil))).With("service", "test")
	log.InfoContext(sampledContext(), "inside")
	log.InfoContext(context.Background(), "outside")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines", len(lines))
	}
	var in, out map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &in); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &out); err != nil {
		t.Fatal(err)
	}
	if in["trace_id"] != "4bf92f3577b34da6a3ce929d0e0e4736" || in["span_id"] != "00f067aa0ba902b7" || in["service"] != "test" {
		t.Fatalf("inside a span: %v", in)
	}
	if _, ok := out["trace_id"]; ok {
		t.Fatalf("outside any span: %v", out)
	}
}

func TestSampledObservationsCarryTheTraceAsExemplar(t *testing.T) {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "x_seconds", Buckets: []float64{0.1, 1}})
	Observe(sampledContext(), h, 0.05)
	Observe(context.Background(), h, 0.5)
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	b := m.GetHistogram().GetBucket()
	if m.GetHistogram().GetSampleCount() != 2 {
		t.Fatalf("%d samples", m.GetHistogram().GetSampleCount())
	}
	ex := b[0].GetExemplar()
	if ex == nil || len(ex.GetLabel()) != 1 || ex.GetLabel()[0].GetValue() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("first bucket's exemplar %v", ex)
	}
	if b[1].GetExemplar() != nil {
		t.Fatalf("an unsampled observation left an exemplar: %v", b[1].GetExemplar())
	}
}
