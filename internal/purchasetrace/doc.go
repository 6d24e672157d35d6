// Package purchasetrace holds the end-to-end check of issue 43's promise: one purchase, from
// the click to the order event, is one trace in a real Jaeger. The gateway, the consumer and
// the reconciler run as processes on the local stack (internal/harness) with tracing on, a
// buyer grabs once with a traceparent of its own, and the test reads the trace back through
// Jaeger's query API (internal/jaegertest). It has no code of its own: only its test.
package purchasetrace
