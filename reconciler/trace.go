package main

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckill-pipeline/seckill/pkg/tracing"
	"github.com/seckill-pipeline/seckill/pkg/writepath"
)

// Span names of the reconciler's actions on orders. Each action on a batch of orders is
// one span, a child of its job's, linked to the stored trace context (orders.trace_context)
// of every traced order it acted on: the purchase's trace and the reconciler's meet there.
const (
	spanPaymentTimeout = "cancel unpaid orders" // the payment timeout
	spanReturnUnits    = "return units"         // cancelled orders' units given back in Redis
	spanSettleStale    = "settle stale reservations"
)

// startAction starts an action's span for a session×prize (ctx's child); off, a span that
// records nothing, without allocating.
func startAction(ctx context.Context, tr *tracing.Tracing, name string, sessionID, prizeID int64) (context.Context, trace.Span) {
	if !tr.On() {
		return tr.Start(ctx, name)
	}
	return tr.Start(ctx, name, trace.WithAttributes(writepath.AttrSessionID.Int64(sessionID), writepath.AttrPrizeID.Int64(prizeID)))
}

// linkOrders links span to the stored trace context of each of n orders (traceParent(i),
// "" for an order not traced) and counts them; nothing when span records nothing.
func linkOrders(span trace.Span, n int, traceParent func(i int) string) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.Int("seckill.orders", n))
	for i := range n {
		if sc := tracing.ParseTraceparent(traceParent(i)); sc.IsValid() {
			span.AddLink(trace.Link{SpanContext: sc})
		}
	}
}
