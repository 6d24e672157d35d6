package tracing

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func TestAStoredTraceparentNamesTheSampledSpanItCameFrom(t *testing.T) {
	sc := trace.SpanContextFromContext(sampledContext())
	s := Traceparent(sc)
	if s != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Fatalf("traceparent %q", s)
	}
	back := ParseTraceparent(s)
	if !back.IsValid() || !back.IsRemote() || back.TraceID() != sc.TraceID() || back.SpanID() != sc.SpanID() || !back.IsSampled() {
		t.Fatalf("parsed %+v, want %+v as remote", back, sc)
	}
	unsampled := sc.WithTraceFlags(0)
	if got := Traceparent(unsampled); got != "" {
		t.Fatalf("an unsampled context stored as %q", got)
	}
	for _, bad := range []string{"", "00-xyz", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", strings.Repeat("a", 300)} {
		if ParseTraceparent(bad).IsValid() {
			t.Errorf("%q parsed as a valid context", bad)
		}
	}
}

func TestSetupRefusesAnEndpointThatIsNoURL(t *testing.T) {
	for _, c := range []struct{ key, value string }{
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "127.0.0.1:4318"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "grpc://collector:4317"},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://"},
	} {
		_, err := Setup(context.Background(), "test", envOf(map[string]string{c.key: c.value}))
		if err == nil || !strings.Contains(err.Error(), c.key) || !strings.Contains(err.Error(), "want an http:// or https:// URL") {
			t.Errorf("%s=%s: err %v, want one naming the variable", c.key, c.value, err)
		}
	}
	for _, c := range []struct{ env map[string]string }{
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector.example/otlp/"}},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}},
	} {
		tr, err := Setup(context.Background(), "test", envOf(c.env))
		if err != nil || !tr.On() {
			t.Errorf("%v: %v, on %v", c.env, err, tr.On())
			continue
		}
		_ = tr.Shutdown(canceled())
	}
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, "http://collector:4318/v1/traces"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector.example/otlp/"}, "https://collector.example/otlp/v1/traces"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:2/spans"}, "http://b:2/spans"},
	} {
		if got, err := tracesEndpoint(envOf(c.env)); err != nil || got != c.want {
			t.Errorf("%v: %q %v, want %q", c.env, got, err, c.want)
		}
	}
}

// The parent-based samplers follow a sampled link of a root span as they follow a sampled
// parent: a batch span linking to a sampled purchase is kept, whatever the ratio says.
func TestARootLinkingToASampledSpanIsSampled(t *testing.T) {
	sampler, _, err := samplerFrom(envOf(map[string]string{"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0"}))
	if err != nil {
		t.Fatal(err)
	}
	tr := With(sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler)), "test")
	sampled := trace.SpanContextFromContext(sampledContext())
	_, plain := tr.Start(context.Background(), "root")
	_, linked := tr.Start(context.Background(), "batch", trace.WithLinks(trace.Link{SpanContext: sampled}))
	_, unsampledLink := tr.Start(context.Background(), "batch", trace.WithLinks(trace.Link{SpanContext: sampled.WithTraceFlags(0)}))
	_, child := tr.Start(trace.ContextWithRemoteSpanContext(context.Background(), sampled.WithTraceFlags(0)), "child",
		trace.WithLinks(trace.Link{SpanContext: sampled}))
	for name, c := range map[string]struct {
		span trace.Span
		want bool
	}{
		"a root at ratio 0": {plain, false}, "a root linking to a sampled span": {linked, true},
		"a root linking to an unsampled span": {unsampledLink, false}, "a child of an unsampled parent": {child, false},
	} {
		if got := c.span.SpanContext().IsSampled(); got != c.want {
			t.Errorf("%s: sampled %v, want %v", name, got, c.want)
		}
	}
	if !strings.HasPrefix(sampler.Description(), "LinkedSampled{ParentBased{") {
		t.Errorf("description %q", sampler.Description())
	}
}

func TestProduceSpansAreInTheirParentsTraceAndInTheirMessages(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tr := With(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)), "test")
	parent := trace.SpanContextFromContext(sampledContext())
	msgs := []kafka.Message{{Key: []byte("a")}, {Key: []byte("b")}}
	p := tr.StartProduce(context.Background(), "kafka.produce x", "topic-x", msgs, func(i int) trace.SpanContext {
		if i == 1 {
			return trace.SpanContext{} // not traced: no span, no headers
		}
		return parent
	})
	p.End(errors.New("broker down"))
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	s := spans[0]
	if s.Name != "kafka.produce x" || s.SpanKind != trace.SpanKindProducer || s.Parent.SpanID() != parent.SpanID() ||
		s.SpanContext.TraceID() != parent.TraceID() || s.Status.Code != codes.Error {
		t.Fatalf("span %+v", s)
	}
	if got := (Headers{&msgs[0].Headers}).Get("traceparent"); got != Traceparent(s.SpanContext) {
		t.Fatalf("message traceparent %q, want the produce span's %q", got, Traceparent(s.SpanContext))
	}
	if len(msgs[1].Headers) != 0 {
		t.Fatalf("an untraced message got headers %v", msgs[1].Headers)
	}

	// Without a parent function the messages continue ctx's span.
	exp.Reset()
	ctx, job := tr.Start(context.Background(), "job")
	m := []kafka.Message{{Key: []byte("c")}}
	tr.StartProduce(ctx, "kafka.produce y", "topic-y", m, nil).End(nil)
	job.End()
	if spans := exp.GetSpans(); len(spans) != 2 || spans[0].Parent.SpanID() != job.SpanContext().SpanID() {
		t.Fatalf("spans %+v, want the produce span under the job's", spans)
	}
	if Off().StartProduce(ctx, "x", "t", m, nil) != nil {
		t.Fatal("an off tracing started produce spans")
	}
	(*Produce)(nil).End(nil)
}

func TestStartProduceOffAllocatesNothing(t *testing.T) {
	tr := Off()
	msgs := []kafka.Message{{Key: []byte("a")}}
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() { tr.StartProduce(ctx, "x", "t", msgs, nil).End(nil) }); n != 0 {
		t.Fatalf("%v allocations per produce with tracing off", n)
	}
}
