package tracing

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Traceparent is sc as a W3C traceparent header value ("00-<trace id>-<span id>-<flags>"),
// the form a span context is stored in (an order's trace_context column), or "" when sc is
// not sampled: a span nobody exported is not worth a column, and a later span parented on
// it would be dropped anyway by a parent-based sampler.
func Traceparent(sc trace.SpanContext) string {
	if !sc.IsSampled() {
		return ""
	}
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// ParseTraceparent is the span context a stored traceparent names, as a remote one (a
// parent or a link for a later span); invalid for "" or anything malformed.
func ParseTraceparent(s string) trace.SpanContext {
	if s == "" {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": s})
	return trace.SpanContextFromContext(ctx)
}
