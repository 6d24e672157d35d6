package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/retry"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
	"github.com/seckill-pipeline/seckill/pkg/tracing"
	"github.com/seckill-pipeline/seckill/pkg/writepath"
)

// feedbackStore applies reports to orders in one transaction per session×prize.
type feedbackStore interface {
	ApplyFeedback(ctx context.Context, f *lease.Fence, sessionID, prizeID int64, items []seckill.Feedback, now time.Time) (store.FeedbackBatch, error)
}

// unitReturner gives cancelled orders' units back in Redis: the stock gate.
type unitReturner interface {
	ReturnAll(ctx context.Context, items []stock.UnitReturn) (stock.ReturnReport, error)
}

// returnStamper records that a return's Redis step ran.
type returnStamper interface {
	MarkRedisDone(ctx context.Context, orderIDs []int64, at time.Time) error
}

// feedbackProcessor turns one fetched batch of the feedback topic (downstream's order.paid
// and order.cancelled) into order changes, with the grab consumer's care: undecodable
// messages go to the dead-letter topic, each session×prize's reports are applied in one
// transaction, and only then may the offsets be committed; a redelivered report is a
// duplicate and changes nothing. After the commit the cancelled orders' units go back into
// Redis; if that step fails (or the process dies first) the stock_returns row remembers it,
// and a redelivery or the reconciler's sweep completes it.
type feedbackProcessor struct {
	orders      feedbackStore
	gate        unitReturner
	returns     returnStamper
	deadLetters deadLetterer
	policy      retry.Policy
	metrics     *feedbackMetrics
	log         *slog.Logger
	now         func() time.Time
	onApplied   func()           // wakes the outbox relay (new order events)
	tr          *tracing.Tracing // nil: off
}

type feedbackGroup = writepath.Batch[seckill.Feedback]

func decodeFeedback(b []byte) (seckill.Feedback, seckill.SessionPrize, error) {
	f, err := event.DecodeFeedback(b)
	if err != nil {
		return f, seckill.SessionPrize{}, err
	}
	sid, pid, _, _ := seckill.ParseRequestID(f.RequestID) // DecodeFeedback checked it
	return f, seckill.SessionPrize{Session: sid, Prize: pid}, nil
}

// Process handles msgs, from one partition in offset order. It returns an error only when
// it must stop without everything accounted for (shutdown while MySQL or Kafka was down).
func (p *feedbackProcessor) Process(ctx context.Context, msgs []kafka.Message) error {
	groups, poison := writepath.Group(msgs, decodeFeedback)
	if len(poison) > 0 {
		if err := produce(ctx, p.log, func(wctx context.Context) error { return p.deadLetters.Write(wctx, poison...) }); err != nil {
			return err
		}
		p.log.Warn("feedback dead-lettered", "count", len(poison), "partition", poison[0].Msg.Partition,
			"first_offset", poison[0].Msg.Offset, "error", poison[0].Cause.Error())
	}
	var steps []store.StockReturn
	applied := false
	for _, g := range groups {
		start := time.Now()
		res, err := p.apply(ctx, g)
		if err != nil {
			return err
		}
		p.trace(ctx, g, res, start)
		if res == nil {
			continue // dead-lettered
		}
		p.count(*res)
		steps = append(steps, res.Returns...)
		applied = applied || res.Cancelled > 0 || res.Refunds > 0
	}
	if applied && p.onApplied != nil {
		p.onApplied()
	}
	// MySQL committed; Redis only follows. A failure here loses nothing: the returns stay
	// pending in MySQL until a redelivery or the reconciler's sweep completes them.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := returnUnits(sctx, p.gate, p.returns, steps, p.now, p.metrics.returned); err != nil {
		p.metrics.stepErrors.Inc()
		p.log.Warn("units not returned to redis yet; the reconciler will", "error", err.Error())
	}
	return nil
}

// apply runs one group's transaction with the shared retry policy. Contention and an
// unreachable MySQL are retried for as long as it takes (there is no compensation topic for
// feedback: a report is small and its offset must not move before it is applied); an error
// that retrying does not cure dead-letters the group after the policy's retries.
func (p *feedbackProcessor) apply(ctx context.Context, g *feedbackGroup) (*store.FeedbackBatch, error) {
	for failed := 1; ; failed++ {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		res, err := p.orders.ApplyFeedback(tctx, nil, g.Key.Session, g.Key.Prize, g.Items, p.now())
		cancel()
		if err == nil {
			return &res, nil
		}
		act, delay := p.policy.Decide(failed, err)
		if act == retry.Compensate || act == retry.DeadLetter {
			if store.IsTransient(err) {
				act, delay = retry.Later, p.policy.Delay(p.policy.Backoff)
			} else {
				dls := make([]event.Poison, len(g.Msgs))
				for i, m := range g.Msgs {
					dls[i] = event.Poison{Msg: m, Cause: err}
				}
				if err := produce(ctx, p.log, func(wctx context.Context) error { return p.deadLetters.Write(wctx, dls...) }); err != nil {
					return nil, err
				}
				p.log.Error("feedback could not be applied; dead-lettered", "session_id", g.Key.Session, "prize_id", g.Key.Prize,
					"count", len(dls), "error", err.Error())
				return nil, nil
			}
		}
		if act == retry.WaitForDB {
			p.log.Warn("mysql unavailable; waiting", "session_id", g.Key.Session, "prize_id", g.Key.Prize,
				"attempt", failed, "delay", delay.String(), "error", err.Error())
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("stopped while applying feedback of %s: %w", g.Key, err)
		case <-time.After(delay):
		}
	}
}

// spanFeedback is the span of one applied report.
const spanFeedback = "apply feedback"

// trace records a span for each report of g (applied by res, or dead-lettered when res is
// nil; started at start) whose message carries a sampled trace context (a downstream system
// that propagated the order event's) or whose order stored one. The span belongs to the
// purchase's trace: it continues the message's context when that is the order's trace (or
// the order's is unknown), and otherwise is a child of the order's stored context, linked to
// the message's; the order's context, when known, is linked too. It is made after the
// transaction, with the group's start as its own, since only the transaction reads the
// order's context.
func (p *feedbackProcessor) trace(ctx context.Context, g *feedbackGroup, res *store.FeedbackBatch, start time.Time) {
	if !p.tr.On() {
		return
	}
	end := time.Now()
	for i, m := range g.Msgs {
		msg := p.tr.SpanContextOf(m)
		var order trace.SpanContext
		attrs := []attribute.KeyValue{writepath.AttrRequestID.String(g.Items[i].RequestID),
			attribute.String("seckill.feedback_kind", string(g.Items[i].Kind))}
		if res != nil && i < len(res.Outcomes) {
			o := res.Outcomes[i]
			order = tracing.ParseTraceparent(o.TraceParent)
			attrs = append(attrs, writepath.AttrOutcome.String(string(o.Result)), writepath.AttrOrderID.Int64(o.OrderID))
			if o.Case != "" {
				attrs = append(attrs, attribute.String("seckill.case", o.Case))
			}
		} else {
			attrs = append(attrs, writepath.AttrOutcome.String(writepath.OutcomeDeadLetter))
		}
		parent, link := msg, order
		switch {
		case !msg.IsSampled() && !order.IsSampled():
			continue
		case !msg.IsSampled():
			parent, link = order, trace.SpanContext{}
		case order.IsValid() && order.TraceID() != msg.TraceID():
			parent, link = order, msg
		}
		opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithTimestamp(start), trace.WithAttributes(attrs...)}
		if link.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: link}))
		}
		_, span := p.tr.Start(trace.ContextWithRemoteSpanContext(ctx, parent), spanFeedback, opts...)
		span.End(trace.WithTimestamp(end))
	}
}

func (p *feedbackProcessor) count(res store.FeedbackBatch) {
	for _, o := range res.Outcomes {
		p.metrics.reports.WithLabelValues(string(o.Feedback.Kind), string(o.Result)).Inc()
		if o.Case != "" {
			p.metrics.exceptions.WithLabelValues(o.Case).Inc()
		}
		if o.Result == seckill.FeedbackException || o.Result == seckill.FeedbackRefund {
			p.log.Warn("order feedback recorded as an exception case", "request_id", o.Feedback.RequestID,
				"kind", string(o.Feedback.Kind), "case", o.Case, "order_id", o.OrderID)
		}
	}
}

// returnUnits runs the Redis step of cancellations (one script per session×prize) and
// stamps the ones it completed. Steps whose prize has no keys in Redis stay pending: after a
// Redis loss the rebuild counts those units from MySQL, and the sweep then finds them done.
func returnUnits(ctx context.Context, gate unitReturner, stamps returnStamper, steps []store.StockReturn, now func() time.Time, counted *prometheus.CounterVec) error {
	if len(steps) == 0 {
		return nil
	}
	rep, err := writepath.ReturnUnits(ctx, gate, steps)
	counted.WithLabelValues("returned").Add(float64(rep.Returned))
	counted.WithLabelValues("already").Add(float64(rep.Already))
	counted.WithLabelValues("marked").Add(float64(rep.Marked))
	errs := []error{err}
	if len(rep.Waiting) > 0 {
		errs = append(errs, fmt.Errorf("%d returns wait for their prize's keys: %w", len(rep.Waiting), seckill.ErrNotLoaded))
	}
	errs = append(errs, stamps.MarkRedisDone(ctx, rep.Done, now()))
	return errors.Join(errs...)
}
