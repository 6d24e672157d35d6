package writepath

import (
	"context"
	"errors"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckill-pipeline/seckill/pkg/retry"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
	"github.com/seckill-pipeline/seckill/pkg/tracing"
)

// Span names and attributes of the write path. A group is persisted in one transaction for
// many purchases, each in a trace of its own: the group's span links to every sampled grab it
// persisted, and each such grab gets a short span of its own in its purchase's trace, linked
// back to the group's. The grab's span is what its order stores (trace_context): the order
// event's produce span, sent now or by the relay after a crash, and later actions on the
// order continue or link to it.
const (
	SpanBatch = "persist batch"
	SpanGrab  = "persist grab"

	AttrSessionID = attribute.Key("seckill.session_id")
	AttrPrizeID   = attribute.Key("seckill.prize_id")
	AttrBucket    = attribute.Key("seckill.bucket")
	AttrRequestID = attribute.Key("seckill.request_id")
	AttrOrderID   = attribute.Key("seckill.order_id")
	AttrStatus    = attribute.Key("seckill.order_status")
	AttrOutcome   = attribute.Key("seckill.outcome")
	AttrTraced    = attribute.Key("seckill.traced_grabs")
)

// What became of a group, or of one grab in it (AttrOutcome).
const (
	OutcomePersisted    = "persisted"    // a new order (succeeded or rejected)
	OutcomeDuplicate    = "duplicate"    // the request id had its order already (a redelivery)
	OutcomeCompensation = "compensation" // contention outlasted the retries: the compensation topic (or its next replay)
	OutcomeDeadLetter   = "dead-letter"  // retrying cannot help: the dead-letter topic
	OutcomeRetried      = "retried"      // stopped before an outcome (shutdown while MySQL was down): delivered again
)

// WithTracing makes w trace the groups PersistGroup writes with tr (Off when nil) and
// returns w.
func (w *Writer) WithTracing(tr *tracing.Tracing) *Writer {
	w.tr = tr
	return w
}

// PersistGroup is PersistFrom for a grouped batch (GroupGrabs), traced: with tracing off it
// is PersistFrom of b's items and nothing more.
func (w *Writer) PersistGroup(ctx context.Context, b *Batch[seckill.Grab], src *store.GrabSource) (store.PersistResult, error) {
	if !w.tr.On() {
		return w.PersistFrom(ctx, b.Key, b.Items, src)
	}
	ctx, gt, grabs := w.startGroup(ctx, b)
	res, err := w.PersistFrom(ctx, b.Key, grabs, src)
	gt.end(res, err)
	return res, err
}

// groupTrace is one group's spans.
type groupTrace struct {
	batch trace.Span
	grabs []grabSpan
}

type grabSpan struct {
	requestID string
	span      trace.Span
}

// startGroup starts b's spans and returns the grabs to persist: b's items, with the trace
// context each sampled one's order stores (a copy, when there is one).
func (w *Writer) startGroup(ctx context.Context, b *Batch[seckill.Grab]) (context.Context, *groupTrace, []seckill.Grab) {
	// Only sampled grabs are linked and get a span: an unsampled one's trace is not
	// exported, and a span of its own would be dropped by the parent-based sampler anyway.
	var links []trace.Link
	var traced []int
	for i, m := range b.Msgs {
		if sc := w.tr.SpanContextOf(m); sc.IsSampled() {
			links = append(links, trace.Link{SpanContext: sc})
			traced = append(traced, i)
		}
	}
	ctx, batch := w.tr.Start(ctx, SpanBatch, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(links...),
		trace.WithAttributes(AttrSessionID.Int64(b.Key.Session), AttrPrizeID.Int64(b.Key.Prize), AttrBucket.Int(b.Bucket),
			attribute.Int("messaging.batch.message_count", len(b.Msgs)), AttrTraced.Int(len(traced))))
	gt := &groupTrace{batch: batch}
	if len(traced) == 0 {
		return ctx, gt, b.Items
	}
	grabs := slices.Clone(b.Items)
	back := trace.WithLinks(trace.Link{SpanContext: batch.SpanContext()})
	gt.grabs = make([]grabSpan, 0, len(traced))
	for k, i := range traced {
		// A child of the grab's own context (the gateway's produce span, or the reconciler's
		// re-publish), not of the batch span: the grab's trace is the purchase's.
		_, s := w.tr.Start(trace.ContextWithRemoteSpanContext(ctx, links[k].SpanContext), SpanGrab,
			trace.WithSpanKind(trace.SpanKindConsumer), back, trace.WithAttributes(AttrRequestID.String(grabs[i].RequestID)))
		stored := tracing.Traceparent(s.SpanContext())
		if stored == "" { // this service samples it out: the order keeps the grab's own context
			stored = tracing.Traceparent(links[k].SpanContext)
		}
		grabs[i].TraceParent = stored
		gt.grabs = append(gt.grabs, grabSpan{requestID: grabs[i].RequestID, span: s})
	}
	return ctx, gt, grabs
}

// end ends the spans with what became of the group (err: PersistFrom's).
func (gt *groupTrace) end(res store.PersistResult, err error) {
	outcome := groupOutcome(err)
	var byRID map[string]store.Outcome
	if err == nil && len(gt.grabs) > 0 {
		byRID = make(map[string]store.Outcome, len(res.Outcomes))
		for _, o := range res.Outcomes {
			byRID[o.Grab.RequestID] = o
		}
	}
	for _, g := range gt.grabs {
		o, ok := byRID[g.requestID]
		switch {
		case err != nil:
			g.span.SetAttributes(AttrOutcome.String(outcome))
			g.span.SetStatus(codes.Error, outcome)
		case !ok: // cannot happen: every grab of a persisted group has an outcome
			g.span.SetAttributes(AttrOutcome.String(OutcomeRetried))
		default:
			out := OutcomePersisted
			if o.Before {
				out = OutcomeDuplicate
			}
			g.span.SetAttributes(AttrOutcome.String(out), AttrOrderID.Int64(o.OrderID), AttrStatus.String(string(o.Status)))
		}
		g.span.End()
	}
	gt.batch.SetAttributes(AttrOutcome.String(outcome))
	if err != nil {
		gt.batch.RecordError(err)
		gt.batch.SetStatus(codes.Error, outcome)
	} else {
		gt.batch.SetAttributes(attribute.Int("seckill.succeeded", res.Succeeded), attribute.Int("seckill.rejected", res.Rejected),
			attribute.Int("seckill.existing", res.Existing))
	}
	gt.batch.End()
}

// groupOutcome names what follows PersistFrom's error for the group (persisted for none).
func groupOutcome(err error) string {
	var giveUp *GiveUp
	switch {
	case err == nil:
		return OutcomePersisted
	case errors.As(err, &giveUp) && giveUp.Action == retry.DeadLetter:
		return OutcomeDeadLetter
	case errors.As(err, &giveUp):
		return OutcomeCompensation
	}
	return OutcomeRetried
}
