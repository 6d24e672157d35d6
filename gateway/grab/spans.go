package grab

import (
	"context"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/tracing"
)

// The grab's child spans, under the request's server span (tracing.Handler, which also
// covers the public answers and the admission refusals: they do no work worth a span of
// its own). Every helper here tests On first and returns the no-op span of an empty
// context: with tracing off the grab path allocates nothing more, builds no attribute and
// reads no context for them (TestSpansCostNothingWhenOff). On, a grab whose server span
// is not recorded (not sampled: 99 in 100 by default) makes no child span either: with
// every sampler tracing.Setup offers, a child is sampled exactly when its parent is (the
// parent's decision, or the same trace id's), so those spans would be built to be dropped.
//
// The admission script's span is ours, not go-redis's (redisotel): the gate's coalescer
// sends the scripts of many concurrent grabs in one pipeline under the first caller's
// context, so a library span would sit in one grab's trace only and time everyone's batch.
// stock.reserve is what this grab waited for, batch included.

var noSpan = trace.SpanFromContext(context.Background())

// recorded says whether a child of ctx's span would be recorded (see above).
func (a *API) recorded(ctx context.Context) bool {
	return a.tracing.On() && trace.SpanFromContext(ctx).IsRecording()
}

// startReserve starts the admission script's span, a child of ctx's.
func (a *API) startReserve(ctx context.Context, g seckill.Grab) (context.Context, trace.Span) {
	if !a.recorded(ctx) {
		return ctx, noSpan
	}
	return a.tracing.Start(ctx, "stock.reserve", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(append(grabAttrs(g), semconv.DBSystemNameRedis, semconv.DBOperationName("EVALSHA"))...))
}

// endReserve ends the admission script's span with its outcome: the verdict (admitted,
// seen, limit, sold_out, not_loaded, foreign), or unknown with the error.
func endReserve(span trace.Span, v stock.Verdict, err error) {
	if !span.IsRecording() {
		return
	}
	if err != nil {
		span.SetAttributes(attribute.String("outcome", "unknown"))
		span.RecordError(err)
		span.SetStatus(codes.Error, "admission outcome unknown")
	} else {
		span.SetAttributes(attribute.String("outcome", v.Code.String()))
		if v.Code == stock.Seen {
			span.SetAttributes(attribute.String("state", v.State.State))
		}
	}
	span.End()
}

// startProduce starts the grab event's produce span, a child of ctx's, and writes its
// context into m's headers: the consumer's spans are its children, and the relay, which
// keeps the message, headers and all, republishes it in the same trace. An unsampled
// grab's event carries no context (Inject writes sampled ones only): the consumer follows
// only sampled grabs, so it starts no trace of its own for it either way.
func (a *API) startProduce(ctx context.Context, g seckill.Grab, m *kafka.Message) (context.Context, trace.Span) {
	if !a.tracing.On() {
		return ctx, noSpan
	}
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, noSpan
	}
	ctx, span := a.tracing.Start(ctx, "kafka.produce grab", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(append(grabAttrs(g), semconv.MessagingSystemKafka, semconv.MessagingOperationTypeSend,
			semconv.MessagingOperationName("produce"), semconv.MessagingDestinationName(a.topic),
			semconv.MessagingKafkaMessageKey(string(m.Key)), semconv.MessagingMessageBodySize(len(m.Value)))...))
	a.tracing.Inject(ctx, m)
	return ctx, span
}

// endProduce ends the produce span; an event Kafka did not acknowledge is its error, and
// relay_queued says whether the relay took the event (else the reconciler re-publishes it).
// kafka-go does not tell a synchronous writer which partition it wrote to, so the span
// names the key the partition is hashed from.
func endProduce(span trace.Span, err error, queued bool) {
	if !span.IsRecording() {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "not acknowledged; relayed")
		span.SetAttributes(attribute.Bool("relay_queued", queued))
	}
	span.End()
}

// startReplica starts the span of the wait for a Redis replica's copy of a reservation
// (after a failed produce; see onReplica).
func (a *API) startReplica(ctx context.Context, g seckill.Grab) (context.Context, trace.Span) {
	if !a.recorded(ctx) {
		return ctx, noSpan
	}
	return a.tracing.Start(ctx, "stock.await_replica", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(append(grabAttrs(g), semconv.DBSystemNameRedis, semconv.DBOperationName("WAIT"))...))
}

// endReplica ends the replica wait's span with its result (confirmed, timeout, gone, error).
func endReplica(span trace.Span, result string, err error) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.String("result", result))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "reservation not confirmed on a replica")
	}
	span.End()
}

// grabAttrs are the keys of the logs' (session_id, prize_id, request_id) on a grab's spans,
// so a trace and its log lines are searched by the same names.
func grabAttrs(g seckill.Grab) []attribute.KeyValue {
	as := make([]attribute.KeyValue, 0, 12) // room for the produce span's own
	as = append(as, attribute.Int64("session_id", g.SessionID), attribute.Int64("prize_id", g.PrizeID),
		attribute.String("request_id", g.RequestID))
	if g.Buckets > 1 {
		as = append(as, attribute.String("bucket", strconv.Itoa(g.Bucket)+"/"+strconv.Itoa(g.Buckets)))
	}
	return as
}

// observe records v in o, with the request's trace id as the exemplar when its span is
// sampled (tracing.Observe); off, it is o.Observe and reads no context.
func (a *API) observe(ctx context.Context, o prometheus.Observer, v float64) {
	if a.tracing.On() {
		tracing.Observe(ctx, o, v)
		return
	}
	o.Observe(v)
}
