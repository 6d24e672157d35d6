package tracing

import (
	"context"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// Produce is the producer spans of one write of messages to a topic: one per message, each
// injected into its message's headers, so whoever consumes the message continues its trace.
type Produce struct{ spans []trace.Span }

// StartProduce starts a producer span named name for each of msgs about to be written to
// topic and writes its context into the message (traceparent, tracestate). A message's
// span is a child of parent(i), the span context it continues (an order's stored trace
// context), or, with parent nil, of ctx's span; a message whose parent is not valid gets
// no span and keeps its headers. Off, it returns nil without looking at msgs; a nil
// *Produce ends nothing.
func (t *Tracing) StartProduce(ctx context.Context, name, topic string, msgs []kafka.Message, parent func(i int) trace.SpanContext) *Produce {
	if !t.On() {
		return nil
	}
	p := &Produce{}
	for i := range msgs {
		pctx := ctx
		if parent != nil {
			sc := parent(i)
			if !sc.IsValid() {
				continue
			}
			pctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		} else if !trace.SpanContextFromContext(ctx).IsValid() {
			continue
		}
		sctx, span := t.tracer.Start(pctx, name, trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(semconv.MessagingSystemKafka, semconv.MessagingOperationTypeSend,
				semconv.MessagingDestinationName(topic), semconv.MessagingKafkaMessageKey(string(msgs[i].Key))))
		t.Inject(sctx, &msgs[i])
		p.spans = append(p.spans, span)
	}
	return p
}

// End ends the spans with the write's outcome (err, nil when Kafka acknowledged).
func (p *Produce) End(err error) {
	if p == nil {
		return
	}
	for _, s := range p.spans {
		if err != nil {
			s.RecordError(err)
			s.SetStatus(codes.Error, "produce failed")
		}
		s.End()
	}
}
