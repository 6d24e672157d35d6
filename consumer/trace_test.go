package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/seckill-pipeline/seckill/internal/otlptest"
	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
	"github.com/seckill-pipeline/seckill/pkg/tracing"
	"github.com/seckill-pipeline/seckill/pkg/writepath"
)

// capturingWriter keeps what it was asked to produce.
type capturingWriter struct{ msgs []kafka.Message }

func (w *capturingWriter) WriteMessages(_ context.Context, msgs ...kafka.Message) error {
	w.msgs = append(w.msgs, msgs...)
	return nil
}

// sampledParent is a sampled remote span context of a fresh trace.
func sampledParent(t *testing.T) trace.SpanContext {
	t.Helper()
	var tid trace.TraceID
	var sid trace.SpanID
	if _, err := rand.Read(tid[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := rand.Read(sid[:]); err != nil {
		t.Fatal(err)
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
}

// The relay publishes an order event whose order stored its purchase's context with a
// produce span of its own, a child of that context; the message names the span. An order
// stored untraced goes out without trace headers and costs no span.
func TestRelayedOrderEventsCarryTheirProduceSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tr := tracing.With(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)), "consumer")
	stored := sampledParent(t)
	out := &recordingOutbox{events: []store.OutboxEvent{
		{ID: 1, EventID: "order:1-2-a:succeeded", Key: "1-2-a", Payload: []byte("{}"), Schema: "order.v1", TraceParent: tracing.Traceparent(stored)},
		{ID: 2, EventID: "order:1-2-b:succeeded", Key: "1-2-b", Payload: []byte("{}"), Schema: "order.v1"},
	}}
	w := &capturingWriter{}
	r := &outboxRelay{outbox: out, writer: w, topic: "orders", batch: 100, metrics: newMetrics(prometheus.NewRegistry()),
		log: slog.New(slog.DiscardHandler), now: time.Now, tr: tr}
	if n, err := r.publishBatch(context.Background(), func(context.Context) error { return nil }); err != nil || n != 2 {
		t.Fatalf("published %d: %v", n, err)
	}
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1 (the traced order's)", len(spans))
	}
	s := spans[0]
	if s.Name != spanOrderEvent || s.SpanKind != trace.SpanKindProducer || s.Parent.SpanID() != stored.SpanID() ||
		s.SpanContext.TraceID() != stored.TraceID() {
		t.Fatalf("span %s kind %v in trace %s under %s; want a producer span under the stored %s", s.Name, s.SpanKind,
			s.SpanContext.TraceID(), s.Parent.SpanID(), stored.SpanID())
	}
	if got := header(w.msgs[0], "traceparent"); got != tracing.Traceparent(s.SpanContext) {
		t.Fatalf("traceparent %q, want the produce span's %q", got, tracing.Traceparent(s.SpanContext))
	}
	if got := header(w.msgs[1], "traceparent"); got != "" {
		t.Fatalf("the untraced order's event carries traceparent %q", got)
	}
}

// A feedback report's span is in the purchase's trace: it continues the message's context
// when that is the order's trace (linking the order's stored context), is the order's child
// linked to the message's context when downstream sent another trace, is the order's child
// when the message carries none, and is not made when neither is traced.
func TestFeedbackSpansContinueThePurchasesTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tr := tracing.With(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)), "consumer")
	order1, order2, order3 := sampledParent(t), sampledParent(t), sampledParent(t)
	downstream1 := trace.NewSpanContext(trace.SpanContextConfig{TraceID: order1.TraceID(), SpanID: trace.SpanID{1, 2, 3},
		TraceFlags: trace.FlagsSampled, Remote: true}) // propagated the order event's trace
	foreign := sampledParent(t) // downstream's own trace
	rids := []string{seckill.RequestID(1, 2, "key-00000001"), seckill.RequestID(1, 2, "key-00000002"),
		seckill.RequestID(1, 2, "key-00000003"), seckill.RequestID(1, 2, "key-00000004")}
	storedOf := map[string]string{rids[0]: tracing.Traceparent(order1), rids[1]: tracing.Traceparent(order2), rids[2]: tracing.Traceparent(order3)}
	var msgs []kafka.Message
	for i, sc := range []trace.SpanContext{downstream1, foreign, {}, {}} {
		m, err := event.EncodeFeedback(seckill.Feedback{RequestID: rids[i], Kind: seckill.FeedbackPaid, At: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		tr.Inject(trace.ContextWithRemoteSpanContext(context.Background(), sc), &m)
		msgs = append(msgs, m)
	}
	p := &feedbackProcessor{orders: storedFeedback(storedOf), metrics: newFeedbackMetrics(prometheus.NewRegistry()),
		log: slog.New(slog.DiscardHandler), now: time.Now, tr: tr}
	if err := p.Process(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 3 (the fourth report is not traced)", len(spans))
	}
	for i, want := range []struct{ parent, link trace.SpanContext }{{downstream1, order1}, {order2, foreign}, {order3, trace.SpanContext{}}} {
		s := spans[i]
		if s.Name != spanFeedback || s.Parent.SpanID() != want.parent.SpanID() || s.SpanContext.TraceID() != want.parent.TraceID() {
			t.Errorf("report %d: span %s under %s in trace %s, want under %s", i, s.Name, s.Parent.SpanID(), s.SpanContext.TraceID(), want.parent.SpanID())
		}
		switch {
		case want.link.IsValid() && (len(s.Links) != 1 || s.Links[0].SpanContext.SpanID() != want.link.SpanID()):
			t.Errorf("report %d: links %+v, want %s", i, s.Links, want.link.SpanID())
		case !want.link.IsValid() && len(s.Links) != 0:
			t.Errorf("report %d: links %+v, want none", i, s.Links)
		}
		if got := attrOf(s, writepath.AttrRequestID); got != rids[i] {
			t.Errorf("report %d: request id %q", i, got)
		}
		if got := attrOf(s, writepath.AttrOutcome); got != string(seckill.FeedbackApplied) {
			t.Errorf("report %d: outcome %q", i, got)
		}
	}
}

// attrOf is s's attribute k as text ("" when absent).
func attrOf(s tracetest.SpanStub, k attribute.Key) string {
	for _, kv := range s.Attributes {
		if kv.Key == k {
			return kv.Value.String()
		}
	}
	return ""
}

// storedFeedback applies every report as a payment of an order that stored the trace
// context storedOf names ("" when none).
type storedFeedback map[string]string

func (s storedFeedback) ApplyFeedback(_ context.Context, _ *lease.Fence, _, _ int64, items []seckill.Feedback, _ time.Time) (store.FeedbackBatch, error) {
	var res store.FeedbackBatch
	for i, it := range items {
		res.Outcomes = append(res.Outcomes, store.FeedbackOutcome{Feedback: it, Result: seckill.FeedbackApplied, OrderID: int64(i + 1),
			TraceParent: s[it.RequestID]})
		res.Paid++
	}
	return res, nil
}

// spanIDOf is the span id a traceparent names, and checks it is in trace tid.
func spanIDOf(t *testing.T, traceparent string, tid trace.TraceID) []byte {
	t.Helper()
	sc := tracing.ParseTraceparent(traceparent)
	if !sc.IsValid() || sc.TraceID() != tid {
		t.Fatalf("traceparent %q is not in trace %s", traceparent, tid)
	}
	id := sc.SpanID()
	return id[:]
}

// The consumer process, traced from OTEL_* settings like in production (default sampler):
// a grab that reaches the grab topic with the gateway's traceparent becomes an order that
// stores the context of the span that persisted it, and an order event that names its own
// produce span; all three spans are in the grab's trace (gateway ← persist grab ← produce),
// the batch span links to the grab, and everything was flushed when the consumer stopped.
// A grab without a context next to it stores nothing and its event carries no trace.
func TestATracedGrabIsOneTraceFromTheGatewayToTheOrderEvent(t *testing.T) {
	e := newEnv(t, 10, 10, 1)
	admitted := e.admit(t, 2)
	gateway := sampledParent(t)
	tr := tracing.With(sdktrace.NewTracerProvider(), "gateway") // only to write the header as the gateway does
	traced := kafka.Message{Key: admitted[0].Key, Value: admitted[0].Value, Headers: admitted[0].Headers}
	tr.Inject(trace.ContextWithRemoteSpanContext(context.Background(), gateway), &traced)
	plain := kafka.Message{Key: admitted[1].Key, Value: admitted[1].Value, Headers: admitted[1].Headers}
	if err := e.writer(t, e.topics.Grab.Name).WriteMessages(e.ctx, traced, plain); err != nil {
		t.Fatal(err)
	}
	col := otlptest.New(t)
	stop, logs := runConsumerWith(t, e, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": col.URL})

	tracedRID := seckill.RequestID(e.session, e.prize, "key-00000000")
	var events []kafka.Message
	deadline := time.Now().Add(30 * time.Second)
	for len(events) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d order events in 30s; log:\n%s", len(events), logs.String())
		}
		time.Sleep(100 * time.Millisecond)
		events = readAll(t, e.brokers, e.topics.Order)
	}
	stop() // flushes the spans

	stored := map[string]*string{}
	rows, err := e.db.WithContext(e.ctx).Raw("SELECT request_id, trace_context FROM orders").Rows()
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var rid string
		var tc *string
		if err := rows.Scan(&rid, &tc); err != nil {
			t.Fatal(err)
		}
		stored[rid] = tc
	}
	rows.Close()
	if len(stored) != 2 || stored[tracedRID] == nil {
		t.Fatalf("orders' trace contexts %v, want two orders, %s traced", stored, tracedRID)
	}
	for rid, tc := range stored {
		if rid != tracedRID && tc != nil {
			t.Fatalf("the untraced grab's order stores %q", *tc)
		}
	}
	persistID := spanIDOf(t, *stored[tracedRID], gateway.TraceID())
	var produceID []byte
	for _, m := range events {
		ev, err := event.DecodeOrderEvent(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		tp := header(m, "traceparent")
		switch {
		case ev.RequestID == tracedRID:
			produceID = spanIDOf(t, tp, gateway.TraceID())
		case tp != "":
			t.Fatalf("the untraced order's event carries traceparent %q", tp)
		}
	}
	if produceID == nil {
		t.Fatal("no order event of the traced grab")
	}

	persist, produce := col.Span(persistID), col.Span(produceID)
	if persist == nil || produce == nil {
		t.Fatalf("spans not exported: persist grab %v, order event %v; log:\n%s", persist, produce, logs.String())
	}
	gid := gateway.SpanID()
	if persist.GetName() != writepath.SpanGrab || !bytes.Equal(persist.GetParentSpanId(), gid[:]) {
		t.Fatalf("persist span %q under %s, want %q under the gateway's %s", persist.GetName(),
			hex.EncodeToString(persist.GetParentSpanId()), writepath.SpanGrab, gid)
	}
	if produce.GetName() != spanOrderEvent || !bytes.Equal(produce.GetParentSpanId(), persistID) ||
		produce.GetKind() != tracepb.Span_SPAN_KIND_PRODUCER {
		t.Fatalf("order event span %q (kind %v) under %s, want %q under the persist span", produce.GetName(), produce.GetKind(),
			hex.EncodeToString(produce.GetParentSpanId()), spanOrderEvent)
	}
	if len(persist.GetLinks()) != 1 {
		t.Fatalf("persist span links %v, want the batch span", persist.GetLinks())
	}
	batch := col.Span(persist.GetLinks()[0].GetSpanId())
	if batch == nil || batch.GetName() != writepath.SpanBatch {
		t.Fatalf("the persist span's link names %v, want the exported batch span", batch)
	}
	linked := false
	gtid := gateway.TraceID()
	for _, l := range batch.GetLinks() {
		linked = linked || (bytes.Equal(l.GetTraceId(), gtid[:]) && bytes.Equal(l.GetSpanId(), gid[:]))
	}
	if !linked || len(batch.GetParentSpanId()) != 0 {
		t.Fatalf("batch span links %v (parent %x), want a root linking to the gateway's span", batch.GetLinks(), batch.GetParentSpanId())
	}
}

// A tracing setting the consumer cannot follow stops it at start-up, naming the variable,
// before it connects to anything.
func TestBadTracingSettingsStopTheConsumerAtStart(t *testing.T) {
	for _, c := range []struct {
		vars map[string]string
		want string
	}{
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_SAMPLER": "sometimes"}, "OTEL_TRACES_SAMPLER"},
	} {
		var logs bytes.Buffer
		if err := run(context.Background(), stacktest.Getenv(c.vars), &logs); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v, want one naming %s", c.vars, err, c.want)
		}
	}
}
