package tracing

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

// Observe records v in o, with the trace id of ctx's span as the observation's exemplar
// when that span is sampled (a trace one can open); a plain observation otherwise. The
// exemplars are exposed only in the OpenMetrics format (promhttp's EnableOpenMetrics),
// which Prometheus asks for when its exemplar storage is on.
func Observe(ctx context.Context, o prometheus.Observer, v float64) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsSampled() {
		o.Observe(v)
		return
	}
	if e, ok := o.(prometheus.ExemplarObserver); ok {
		e.ObserveWithExemplar(v, prometheus.Labels{"trace_id": sc.TraceID().String()})
		return
	}
	o.Observe(v)
}
