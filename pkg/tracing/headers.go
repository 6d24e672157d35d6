package tracing

import (
	"context"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Headers carries a trace context in a Kafka message's headers (traceparent and tracestate,
// as W3C Trace Context says for HTTP): kafka-go has no instrumentation that
// is kept, so the carrier is ours. Set replaces a header of the same key instead of adding
// a second one, so a message re-published with a new context (the relay, the reconciler)
// carries one traceparent, not two.
type Headers struct{ H *[]kafka.Header }

var _ propagation.TextMapCarrier = Headers{}

// Get returns the value of key's first header ("" when absent).
func (c Headers) Get(key string) string {
	for _, h := range *c.H {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// Set replaces key's header, or adds it.
func (c Headers) Set(key, value string) {
	for i, h := range *c.H {
		if h.Key == key {
			(*c.H)[i].Value = []byte(value)
			return
		}
	}
	*c.H = append(*c.H, kafka.Header{Key: key, Value: []byte(value)})
}

// Keys lists the headers' keys.
func (c Headers) Keys() []string {
	out := make([]string, 0, len(*c.H))
	for _, h := range *c.H {
		out = append(out, h.Key)
	}
	return out
}

// Inject writes ctx's trace context into m's headers: nothing when tracing is off or ctx
// holds no sampled span context. An unsampled context is not carried: every reader of these
// messages follows only sampled ones (a persist-grab span, a batch link), and formatting it
// on each of the 99 grabs in 100 nobody traces cost the gateway 2 % of its CPU.
func (t *Tracing) Inject(ctx context.Context, m *kafka.Message) {
	if !t.On() || !trace.SpanContextFromContext(ctx).IsSampled() {
		return
	}
	t.prop.Inject(ctx, Headers{&m.Headers})
}

// Extract returns ctx with the trace context m's headers carry (as a remote span context);
// ctx unchanged when tracing is off or m carries none.
func (t *Tracing) Extract(ctx context.Context, m kafka.Message) context.Context {
	if !t.On() {
		return ctx
	}
	return t.prop.Extract(ctx, Headers{&m.Headers})
}

// SpanContextOf is the span context m's headers carry (invalid when none, or when tracing
// is off): what a batch span links to.
func (t *Tracing) SpanContextOf(m kafka.Message) trace.SpanContext {
	if !t.On() {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(t.prop.Extract(context.Background(), Headers{&m.Headers}))
}
