package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
	"github.com/seckill-pipeline/seckill/pkg/tracing"
)

func inMemory() (*tracing.Tracing, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	return tracing.With(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)), "reconciler"), exp
}

// funcJob is a job that runs f.
type funcJob struct {
	name string
	f    func(ctx context.Context) (result, error)
}

func (j funcJob) Name() string { return j.name }
func (j funcJob) Run(ctx context.Context, _ lease.Fence) (result, error) {
	return j.f(ctx)
}

// A run is a span, and each of its jobs a child span carrying the job's summary; a failed
// job's span says so.
func TestARunAndEachJobAreSpans(t *testing.T) {
	tr, exp := inMemory()
	var inJob trace.SpanContext
	r := &runner{lease: fakeLeaser{fence: 9}, metrics: newRunnerMetrics(prometheus.NewRegistry()), log: slog.New(slog.DiscardHandler),
		now: time.Now, tr: tr, jobs: []job{
			funcJob{"stale", func(ctx context.Context) (result, error) {
				inJob = trace.SpanContextFromContext(ctx)
				return result{Summary: map[string]int64{"republished": 2}}, nil
			}},
			funcJob{"payment", func(context.Context) (result, error) { return result{}, errors.New("broker down") }},
		}}
	if _, err := r.runOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 3", len(spans))
	}
	stale, payment, run := spans[0], spans[1], spans[2]
	if run.Name != spanRun || run.Parent.IsValid() || stale.Name != "reconcile stale" || payment.Name != "reconcile payment" {
		t.Fatalf("spans %q %q %q", run.Name, stale.Name, payment.Name)
	}
	for _, s := range []tracetest.SpanStub{stale, payment} {
		if s.Parent.SpanID() != run.SpanContext.SpanID() {
			t.Errorf("%s: not the run's child", s.Name)
		}
	}
	if inJob.SpanID() != stale.SpanContext.SpanID() {
		t.Errorf("the job ran in %s, want its span's context", inJob.SpanID())
	}
	found := false
	for _, kv := range stale.Attributes {
		found = found || (kv.Key == "seckill.republished" && kv.Value.AsInt64() == 2)
	}
	if !found || payment.Status.Code != codes.Error {
		t.Fatalf("stale attributes %v, payment status %v", stale.Attributes, payment.Status)
	}
	for _, kv := range run.Attributes {
		if kv.Key == "seckill.fence" && kv.Value.AsInt64() != 9 {
			t.Errorf("run fence %v", kv.Value)
		}
	}
}

// tracedOrders cancels every due order it is given; the orders stored trace contexts.
type tracedOrders struct {
	payOrders
	stored map[string]string
}

func (o *tracedOrders) ApplyFeedback(_ context.Context, _ *lease.Fence, _, _ int64, items []seckill.Feedback, _ time.Time) (store.FeedbackBatch, error) {
	var res store.FeedbackBatch
	for i, it := range items {
		res.Outcomes = append(res.Outcomes, store.FeedbackOutcome{Feedback: it, Result: seckill.FeedbackApplied, OrderID: int64(i + 1),
			TraceParent: o.stored[it.RequestID]})
		res.Cancelled++
	}
	return res, nil
}

// The payment timeout's cancellation of a batch of orders is a span linked to each traced
// order's stored context.
func TestThePaymentTimeoutLinksTheOrdersItCancels(t *testing.T) {
	tr, exp := inMemory()
	stored := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{7}, SpanID: trace.SpanID{7}, TraceFlags: trace.FlagsSampled})
	now := time.Now()
	orders := &tracedOrders{payOrders: payOrders{due: []store.DueOrder{{ID: 1, RequestID: "1-2-key-0001"}, {ID: 2, RequestID: "1-2-key-0002"}}},
		stored: map[string]string{"1-2-key-0001": tracing.Traceparent(stored)}}
	j := paymentJob{catalog: payCatalog{now: now}, orders: orders, returns: noReturns{}, gate: noReturns{}, grace: time.Hour,
		batch: 10, perRun: 10, sweep: 10, metrics: newPaymentMetrics(prometheus.NewRegistry()), log: slog.New(slog.DiscardHandler),
		now: func() time.Time { return now }, tr: tr,
		feedback: grabLag{reader: &payLag{lag: map[int]int64{}}, group: "feedback", topic: event.Topic{Name: "fb", Partitions: 6}}}
	ctx, job := tr.Start(context.Background(), "reconcile payment")
	if _, err := j.Run(ctx, lease.Fence{Name: "t", Number: 1}); err != nil {
		t.Fatal(err)
	}
	job.End()
	var cancel *tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == spanPaymentTimeout {
			cancel = &s
		}
	}
	if cancel == nil || cancel.Parent.SpanID() != job.SpanContext().SpanID() {
		t.Fatalf("no %q span under the job's: %+v", spanPaymentTimeout, exp.GetSpans())
	}
	if len(cancel.Links) != 1 || !cancel.Links[0].SpanContext.Equal(tracing.ParseTraceparent(tracing.Traceparent(stored))) {
		t.Fatalf("links %+v, want the one traced order's context", cancel.Links)
	}
}

// A re-published stale reservation carries the context of its own produce span, a child of
// the stale job's span: the consumer's spans of the grab hang under it.
func TestARepublishedGrabCarriesItsProduceSpan(t *testing.T) {
	op := stacktest.NewOpenPrize(t, 2, 2, 1)
	ctx := stacktest.Context(t, 30*time.Second)
	g := seckill.Grab{RequestID: seckill.RequestID(op.SessionID, op.PrizeID, "key-lost"), UserID: "u1", SessionID: op.SessionID,
		PrizeID: op.PrizeID, AdmittedAt: time.Now().UTC()}
	if v, err := op.Gate.Reserve(ctx, g); err != nil || v.Code != stock.Admitted {
		t.Fatalf("reserve: %v %v", v.Code, err)
	}
	l := lease.New(op.DB, "t-stale-"+stacktest.ID(t), time.Minute)
	h, ok, err := l.TryAcquire(ctx)
	if err != nil || !ok {
		t.Fatalf("lease: %v %v", ok, err)
	}
	tr, exp := inMemory()
	var sent sentMessages
	job := staleJob{catalog: store.NewCatalog(op.DB, time.Now), gate: op.Gate, orders: store.NewOrders(op.DB),
		lag: grabLag{reader: &payLag{lag: map[int]int64{}}, group: "g", topic: event.Topic{Name: "t", Partitions: 6}}, grabs: &sent, topic: "t",
		stale: time.Second, bound: time.Hour, grace: time.Hour,
		republished: prometheus.NewCounter(prometheus.CounterOpts{Name: "r"}), settled: prometheus.NewCounter(prometheus.CounterOpts{Name: "s"}),
		cases: &caseLog{}, caseAfter: time.Hour, log: slog.New(slog.DiscardHandler), tr: tr,
		now: func() time.Time { return time.Now().Add(time.Minute) }} // the reservation is a minute old
	jctx, span := tr.Start(ctx, "reconcile stale")
	res, err := job.Run(jctx, h.Fence)
	span.End()
	if err != nil || res.Summary["republished"] != 1 || len(sent) != 1 {
		t.Fatalf("%+v %v, %d sent; want the grab re-published", res.Summary, err, len(sent))
	}
	var produce *tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == spanRepublish {
			produce = &s
		}
	}
	if produce == nil || produce.Parent.SpanID() != span.SpanContext().SpanID() || produce.SpanKind != trace.SpanKindProducer {
		t.Fatalf("no producer span %q under the job's: %+v", spanRepublish, exp.GetSpans())
	}
	if got := headerOf(sent[0], "traceparent"); got != tracing.Traceparent(produce.SpanContext) {
		t.Fatalf("re-published traceparent %q, want the produce span's %q", got, tracing.Traceparent(produce.SpanContext))
	}
}

func headerOf(m kafka.Message, k string) string {
	for _, h := range m.Headers {
		if h.Key == k {
			return string(h.Value)
		}
	}
	return ""
}

// A tracing setting the reconciler cannot follow stops it at start-up, naming the variable.
func TestBadTracingSettingsStopTheReconcilerAtStart(t *testing.T) {
	var out, errs bytes.Buffer
	err := run(context.Background(), []string{"--once"}, stacktest.Getenv(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}), &out, &errs)
	if err == nil || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_ENDPOINT") {
		t.Fatalf("err %v, want one naming OTEL_EXPORTER_OTLP_ENDPOINT", err)
	}
}
