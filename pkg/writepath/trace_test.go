package writepath_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/retry"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
	"github.com/seckill-pipeline/seckill/pkg/tracing"
	"github.com/seckill-pipeline/seckill/pkg/writepath"
)

// fakeOrders persists every grab as a new succeeded order (id 100+i), except the request ids
// in existing (earlier orders), or fails with err; it keeps the grabs it was given.
type fakeOrders struct {
	existing map[string]bool
	err      error
	got      []seckill.Grab
}

func (f *fakeOrders) PersistFrom(_ context.Context, _, _ int64, grabs []seckill.Grab, _ time.Time, _ *store.GrabSource) (store.PersistResult, error) {
	f.got = grabs
	if f.err != nil {
		return store.PersistResult{}, f.err
	}
	var res store.PersistResult
	for i, g := range grabs {
		o := store.Outcome{Grab: g, OrderID: int64(100 + i), Status: seckill.OrderSucceeded, Before: f.existing[g.RequestID]}
		res.Outcomes = append(res.Outcomes, o)
		if o.Before {
			res.Existing++
		} else {
			res.Succeeded++
		}
	}
	return res, nil
}

func (f *fakeOrders) Existing(context.Context, []string) (map[string]seckill.Order, error) {
	return nil, nil
}

// spanContext is a remote span context of trace t, span s, sampled or not.
func spanContext(t, s byte, sampled bool) trace.SpanContext {
	var flags trace.TraceFlags
	if sampled {
		flags = trace.FlagsSampled
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{t, 1}, SpanID: trace.SpanID{s, 1}, TraceFlags: flags, Remote: true})
}

// grabMessages encodes one grab per context (invalid: no trace headers) of one prize.
func grabMessages(t *testing.T, tr *tracing.Tracing, scs ...trace.SpanContext) []kafka.Message {
	t.Helper()
	var msgs []kafka.Message
	for i, sc := range scs {
		m, err := event.EncodeGrab(seckill.Grab{RequestID: seckill.RequestID(7, 3, fmt.Sprintf("key-%08d", i)), UserID: fmt.Sprintf("u%d", i),
			SessionID: 7, PrizeID: 3, AdmittedAt: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		tr.Inject(trace.ContextWithRemoteSpanContext(context.Background(), sc), &m)
		msgs = append(msgs, m)
	}
	return msgs
}

func attr(s sdktrace.ReadOnlySpan, k attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value
		}
	}
	return attribute.Value{}
}

func byName(spans tracetest.SpanStubs, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans.Snapshots() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// One span per group, linked to each sampled grab; one span per sampled grab, a child of the
// grab's own context (its purchase's trace) linked back to the group's; the order stores the
// grab's span. Unsampled and untraced grabs get neither a link nor a span nor a context.
func TestAGroupsSpanLinksItsGrabsAndEachGrabsSpanIsInItsTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tr := tracing.With(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)), "test")
	a, b := spanContext(0xa, 0xa, true), spanContext(0xb, 0xb, true)
	msgs := grabMessages(t, tr, a, spanContext(0xc, 0xc, false), trace.SpanContext{}, b)
	groups, poison := writepath.GroupGrabs(msgs)
	if len(groups) != 1 || len(poison) != 0 {
		t.Fatalf("%d groups, %d poison", len(groups), len(poison))
	}
	g := groups[0]
	orders := &fakeOrders{existing: map[string]bool{g.Items[3].RequestID: true}}
	w := writepath.New(orders, nil, retry.Default(), nil, slog.New(slog.DiscardHandler), time.Now).WithTracing(tr)
	if _, err := w.PersistGroup(context.Background(), g, nil); err != nil {
		t.Fatal(err)
	}

	batches, grabs := byName(exp.GetSpans(), writepath.SpanBatch), byName(exp.GetSpans(), writepath.SpanGrab)
	if len(batches) != 1 || len(grabs) != 2 {
		t.Fatalf("%d batch spans and %d grab spans, want 1 and 2 (the sampled grabs)", len(batches), len(grabs))
	}
	batch := batches[0]
	if batch.SpanKind() != trace.SpanKindConsumer || batch.Parent().IsValid() ||
		attr(batch, writepath.AttrPrizeID).AsInt64() != 3 || attr(batch, "messaging.batch.message_count").AsInt64() != 4 ||
		attr(batch, writepath.AttrOutcome).AsString() != writepath.OutcomePersisted {
		t.Fatalf("batch span %s kind %v parent %v attributes %v", batch.Name(), batch.SpanKind(), batch.Parent(), batch.Attributes())
	}
	links := batch.Links()
	if len(links) != 2 || !links[0].SpanContext.Equal(a) || !links[1].SpanContext.Equal(b) {
		t.Fatalf("batch links %+v, want the two sampled grabs' contexts", links)
	}
	for i, want := range []struct {
		parent    trace.SpanContext
		item      int
		outcome   string
		requestID string
	}{{a, 0, writepath.OutcomePersisted, g.Items[0].RequestID}, {b, 3, writepath.OutcomeDuplicate, g.Items[3].RequestID}} {
		s := grabs[i]
		if s.SpanContext().TraceID() != want.parent.TraceID() || s.Parent().SpanID() != want.parent.SpanID() {
			t.Errorf("grab span %d in trace %s under %s, want under %s", i, s.SpanContext().TraceID(), s.Parent().SpanID(), want.parent.SpanID())
		}
		if l := s.Links(); len(l) != 1 || !l[0].SpanContext.Equal(batch.SpanContext()) {
			t.Errorf("grab span %d links %+v, want the batch span", i, l)
		}
		if attr(s, writepath.AttrRequestID).AsString() != want.requestID || attr(s, writepath.AttrOutcome).AsString() != want.outcome ||
			attr(s, writepath.AttrOrderID).AsInt64() != int64(100+want.item) {
			t.Errorf("grab span %d attributes %v", i, s.Attributes())
		}
		if got := orders.got[want.item].TraceParent; got != tracing.Traceparent(s.SpanContext()) {
			t.Errorf("grab %d stores %q, want its span %q", want.item, got, tracing.Traceparent(s.SpanContext()))
		}
	}
	for _, i := range []int{1, 2} {
		if orders.got[i].TraceParent != "" {
			t.Errorf("grab %d (unsampled or untraced) stores %q", i, orders.got[i].TraceParent)
		}
	}
	for i, it := range g.Items {
		if it.TraceParent != "" {
			t.Errorf("the caller's item %d was changed: %q", i, it.TraceParent)
		}
	}
}

// A group the policy gives up on ends its spans with where the grabs go.
func TestAGroupGivenUpOnSaysWhereItsGrabsGo(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tr := tracing.With(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)), "test")
	groups, _ := writepath.GroupGrabs(grabMessages(t, tr, spanContext(0xa, 0xa, true)))
	w := writepath.New(&fakeOrders{err: fmt.Errorf("persist: %w", store.ErrNoStockRow)}, nil, retry.Default(), nil,
		slog.New(slog.DiscardHandler), time.Now).WithTracing(tr)
	if _, err := w.PersistGroup(context.Background(), groups[0], nil); err == nil {
		t.Fatal("no error")
	}
	spans := exp.GetSpans().Snapshots()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	for _, s := range spans {
		if attr(s, writepath.AttrOutcome).AsString() != writepath.OutcomeDeadLetter || s.Status().Code != codes.Error {
			t.Errorf("%s: outcome %v status %v", s.Name(), attr(s, writepath.AttrOutcome), s.Status())
		}
	}
	batch := byName(exp.GetSpans(), writepath.SpanBatch)[0]
	if ev := batch.Events(); len(ev) == 0 || ev[0].Name != "attempt failed" {
		t.Errorf("batch events %+v, want the failed attempt", ev)
	}
}

// Off, PersistGroup is PersistFrom: the caller's grabs as they are, nothing allocated for
// tracing.
func TestAnUntracedGroupCostsNothing(t *testing.T) {
	off := tracing.Off()
	groups, _ := writepath.GroupGrabs(grabMessages(t, off, trace.SpanContext{}, trace.SpanContext{}))
	g := groups[0]
	orders := &fakeOrders{}
	w := writepath.New(orders, nil, retry.Default(), nil, slog.New(slog.DiscardHandler), time.Now)
	ctx := context.Background()
	plain := testing.AllocsPerRun(50, func() { _, _ = w.PersistFrom(ctx, g.Key, g.Items, nil) })
	grouped := testing.AllocsPerRun(50, func() { _, _ = w.PersistGroup(ctx, g, nil) })
	if grouped != plain {
		t.Fatalf("PersistGroup off: %v allocations, PersistFrom %v", grouped, plain)
	}
	w.WithTracing(off)
	if _, err := w.PersistGroup(ctx, g, nil); err != nil || &orders.got[0] != &g.Items[0] {
		t.Fatalf("off: err %v, grabs copied", err)
	}
}
