package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/retry"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
	"github.com/seckill-pipeline/seckill/pkg/writepath"
)

type producer interface {
	WriteMessages(ctx context.Context, msgs ...kafka.Message) error
}

// deadLetterer writes dead-letter envelopes (and counts them): an *event.DeadLetters.
type deadLetterer interface {
	Write(ctx context.Context, poison ...event.Poison) error
}

// processor turns one fetched batch of grab messages into orders. It returns nil when every
// message is accounted for (persisted, compensated or dead-lettered), so the caller may
// commit the offsets; an error means "do not commit" (shutdown while MySQL or Kafka was
// unreachable), and the batch is delivered again later.
type processor struct {
	write        *writepath.Writer // observed by metrics
	compensation producer
	deadLetters  deadLetterer
	metrics      *metrics
	log          *slog.Logger
	onPersisted  func() // wakes the outbox relay (orders written on its stamp path)
}

// Process handles msgs, which come from one partition in offset order, on the stamp path.
func (p *processor) Process(ctx context.Context, msgs []kafka.Message) error {
	_, err := p.ProcessFrom(ctx, msgs, nil)
	return err
}

// ProcessFrom is Process under a grab partition's claim (src, nil for none): it returns the
// creation events of the orders its transactions wrote under the claim, for the caller to
// publish.
func (p *processor) ProcessFrom(ctx context.Context, msgs []kafka.Message, src *store.GrabSource) ([]store.OutboxEvent, error) {
	var evs []store.OutboxEvent
	groups, poison := writepath.GroupGrabs(msgs)
	// Dead letters of the whole batch go out in one produce, before the offsets can be
	// committed: a flood of poison must not cost a Kafka round trip per message.
	if err := p.sendDeadLetters(ctx, poison); err != nil {
		return nil, err
	}
	var settle []stock.SettleBatch
	relayed := false // orders written on the stamp path, for the relay
	for _, g := range groups {
		res, err := p.write.PersistGroup(ctx, g, src)
		var giveUp *writepath.GiveUp
		switch {
		case errors.As(err, &giveUp) && giveUp.Action == retry.DeadLetter:
			dls := make([]event.Poison, len(g.Msgs))
			for i, m := range g.Msgs {
				dls[i] = event.Poison{Msg: m, Cause: giveUp.Err}
			}
			if err := p.sendDeadLetters(ctx, dls); err != nil {
				return nil, err
			}
		case errors.As(err, &giveUp):
			if err := p.sendCompensation(ctx, giveUp.Err, giveUp.Attempts, g); err != nil {
				return nil, err
			}
		case err != nil:
			return nil, err
		default:
			evs = append(evs, res.Events...)
			relayed = relayed || (res.Events == nil && res.Succeeded+res.Rejected > 0)
			writepath.ObserveAdmission(p.metrics.admitToOrder, g, res, writepath.PathGrab, time.Now())
			settle = append(settle, p.write.Settlement(ctx, g.Key, res))
		}
	}
	if relayed && p.onPersisted != nil {
		p.onPersisted()
	}
	// Orders are committed; Redis only learns the outcome. If it is down, polls answer
	// "queued" until the reconciler settles the reservations against MySQL.
	p.write.Settle(ctx, settle)
	return evs, nil
}

// sendDeadLetters publishes messages that can never be processed, each in the one
// dead-letter envelope (pkg/event), in one produce. It retries until Kafka acknowledges or
// ctx ends (then the batch is not committed and comes back).
func (p *processor) sendDeadLetters(ctx context.Context, dls []event.Poison) error {
	if len(dls) == 0 {
		return nil
	}
	if err := produce(ctx, p.log, func(wctx context.Context) error { return p.deadLetters.Write(wctx, dls...) }); err != nil {
		return err
	}
	p.log.Warn("dead-lettered", "count", len(dls), "partition", dls[0].Msg.Partition,
		"first_offset", dls[0].Msg.Offset, "error", dls[0].Cause.Error())
	return nil
}

// sendCompensation hands a group whose retries ran out to the compensation topic; the
// reconciler replays it. Only after Kafka acknowledged may the offsets be committed. Each
// message keeps its grab's trace context (event.Compensation), so the replay continues the
// purchase's trace.
func (p *processor) sendCompensation(ctx context.Context, cause error, attempts int, g *writepath.Batch[seckill.Grab]) error {
	out := make([]kafka.Message, len(g.Msgs))
	for i, m := range g.Msgs {
		out[i] = event.Compensation(m, cause, attempts)
	}
	err := produce(ctx, p.log, func(wctx context.Context) error { return p.compensation.WriteMessages(wctx, out...) })
	if err != nil {
		return fmt.Errorf("compensate %s: %w", g.Key, err)
	}
	p.metrics.compensated.Add(float64(len(out)))
	p.log.Warn("retries exhausted; compensating", "session_id", g.Key.Session, "prize_id", g.Key.Prize, "bucket", g.Bucket,
		"events", len(out), "attempts", attempts, "error", cause.Error())
	return nil
}

// produce runs a produce until Kafka acknowledges it or ctx ends (retry.Until: each attempt
// survives ctx's end, since a produce cut short may land anyway).
func produce(ctx context.Context, log *slog.Logger, write func(context.Context) error) error {
	return retry.Until(ctx, write, func(err error) { log.Warn("produce failed; retrying", "error", err.Error()) })
}
