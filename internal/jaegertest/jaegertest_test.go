package jaegertest_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckill-pipeline/seckill/internal/jaegertest"
	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/tracing"
)

// A trace sent through pkg/tracing to the stack's Jaeger comes back with its parent and its
// link: a publish span in one trace whose context travels in a Kafka message's headers, and
// a batch span in another trace, child of its own root, linking to the message's span, as
// the consumer's batch spans do.
func TestALinkedTraceComesBack(t *testing.T) {
	t.Parallel()
	otlp, query := jaegertest.Stack(t)
	service := "jaegertest-" + stacktest.ID(t)
	env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": otlp, "OTEL_TRACES_SAMPLER": "always_on"}
	ctx := stacktest.Context(t, 30*time.Second)
	tr, err := tracing.Setup(ctx, service, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if !tr.On() || tr.Sampler() != "always_on" {
		t.Fatalf("tracing %s (on %v), want always_on", tr.Sampler(), tr.On())
	}

	pubCtx, publish := tr.Start(ctx, "publish", trace.WithSpanKind(trace.SpanKindProducer))
	var msg kafka.Message
	tr.Inject(pubCtx, &msg)
	publish.End()

	rootCtx, root := tr.Start(ctx, "poll")
	linked := tr.SpanContextOf(msg)
	if !linked.IsValid() {
		t.Fatalf("the message's headers %v carry no span context", msg.Headers)
	}
	_, batch := tr.Start(rootCtx, "persist batch", trace.WithLinks(trace.Link{SpanContext: linked}))
	batch.End()
	root.End()
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatalf("flush the spans to %s: %v", otlp, err)
	}

	rootSC, batchSC := root.SpanContext(), batch.SpanContext()
	jaeger := jaegertest.New(query)
	got, err := jaeger.Await(ctx, rootSC.TraceID().String(), func(t jaegertest.Trace) bool { return len(t.Spans) >= 2 })
	if err != nil {
		t.Fatalf("the batch's trace from %s: %v", query, err)
	}
	if len(got.Spans) != 2 {
		t.Errorf("trace %s has %d spans, want 2: %+v", got.ID, len(got.Spans), got.Spans)
	}
	p, ok := got.Span(service, "poll")
	if !ok {
		t.Fatalf("no single %s/poll span in %+v", service, got.Spans)
	}
	b, ok := got.Span(service, "persist batch")
	if !ok {
		t.Fatalf("no single %s/persist batch span in %+v", service, got.Spans)
	}
	if p.SpanID != rootSC.SpanID().String() || p.ParentSpanID != "" {
		t.Errorf("poll span %s parent %q, want %s with no parent", p.SpanID, p.ParentSpanID, rootSC.SpanID())
	}
	if b.SpanID != batchSC.SpanID().String() || b.ParentSpanID != p.SpanID {
		t.Errorf("batch span %s parent %q, want %s child of %s", b.SpanID, b.ParentSpanID, batchSC.SpanID(), p.SpanID)
	}
	want := jaegertest.Link{TraceID: linked.TraceID().String(), SpanID: linked.SpanID().String()}
	if !slices.Equal(b.Links, []jaegertest.Link{want}) {
		t.Errorf("batch span links %+v, want [%+v] (the message's publish span)", b.Links, want)
	}
	if want.TraceID == got.ID {
		t.Errorf("the publish span is in the batch's trace %s: the link proves nothing", got.ID)
	}

	// The linked span is there too, in its own trace.
	pub, err := jaeger.Await(ctx, want.TraceID, func(t jaegertest.Trace) bool { return len(t.Spans) >= 1 })
	if err != nil {
		t.Fatalf("the publish span's trace: %v", err)
	}
	if s, ok := pub.Span(service, "publish"); !ok || s.SpanID != want.SpanID {
		t.Errorf("publish trace %+v, want one %s/publish span %s", pub.Spans, service, want.SpanID)
	}
}

// A trace Jaeger never got is ErrNotFound, and Await gives up at its context's end.
func TestAnUnknownTraceIsNotFound(t *testing.T) {
	t.Parallel()
	_, query := jaegertest.Stack(t)
	jaeger := jaegertest.New(query)
	id := trace.TraceID{0xde, 0xad, 0xbe, 0xef}
	ctx := stacktest.Context(t, 10*time.Second)
	if _, err := jaeger.Trace(ctx, id.String()); !errors.Is(err, jaegertest.ErrNotFound) {
		t.Fatalf("trace %s: err %v, want ErrNotFound", id, err)
	}
	short, cancel := context.WithTimeout(ctx, 700*time.Millisecond)
	defer cancel()
	if _, err := jaeger.Await(short, id.String(), func(jaegertest.Trace) bool { return true }); err == nil {
		t.Fatalf("Await of a missing trace returned no error")
	}
}
