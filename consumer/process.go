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
)

// persister writes one session×prize batch of grabs as orders in one transaction, and
// reads back orders that existed before (to settle a redelivery under its owner).
type persister interface {
	Persist(ctx context.Context, sessionID, prizeID int64, grabs []seckill.Grab, now time.Time) (store.PersistResult, error)
	Existing(ctx context.Context, requestIDs []string) (map[string]seckill.Order, error)
}

// settler records outcomes in the Redis gate.
type settler interface {
	Settle(ctx context.Context, batches []stock.SettleBatch) (int64, error)
}

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
	orders       persister
	gate         settler
	compensation producer
	deadLetters  deadLetterer
	policy       retry.Policy
	metrics      *metrics
	log          *slog.Logger
	now          func() time.Time
	onPersisted  func() // wakes the outbox relay
}

type prizeKey struct{ session, prize int64 }

// prizeBatch is the events of one session×prize in a partition's batch, in offset order,
// with the messages they came from (for dead letters and compensation).
type prizeBatch[T any] struct {
	key   prizeKey
	items []T
	msgs  []kafka.Message
}

// groupByPrize decodes msgs and groups them by session×prize in first-seen order; what
// does not decode is poison. Both the grab and the feedback consumers batch this way.
func groupByPrize[T any](msgs []kafka.Message, decode func([]byte) (T, prizeKey, error)) ([]*prizeBatch[T], []event.Poison) {
	var groups []*prizeBatch[T]
	var poison []event.Poison
	index := map[prizeKey]*prizeBatch[T]{}
	for _, m := range msgs {
		v, k, err := decode(m.Value)
		if err != nil {
			poison = append(poison, event.Poison{Msg: m, Cause: err})
			continue
		}
		if index[k] == nil {
			index[k] = &prizeBatch[T]{key: k}
			groups = append(groups, index[k])
		}
		index[k].items = append(index[k].items, v)
		index[k].msgs = append(index[k].msgs, m)
	}
	return groups, poison
}

type group = prizeBatch[seckill.Grab]

func decodeGrab(b []byte) (seckill.Grab, prizeKey, error) {
	g, err := event.DecodeGrab(b)
	return g, prizeKey{g.SessionID, g.PrizeID}, err
}

// Process handles msgs, which come from one partition in offset order.
func (p *processor) Process(ctx context.Context, msgs []kafka.Message) error {
	groups, poison := groupByPrize(msgs, decodeGrab)
	// Dead letters of the whole batch go out in one produce, before the offsets can be
	// committed: a flood of poison must not cost a Kafka round trip per message.
	if err := p.sendDeadLetters(ctx, poison); err != nil {
		return err
	}
	var settle []stock.SettleBatch
	for _, g := range groups {
		res, err := p.persist(ctx, g)
		if err != nil {
			return err
		}
		if res != nil {
			settle = append(settle, p.settlement(ctx, g.key, res))
		}
	}
	if len(settle) > 0 && p.onPersisted != nil {
		p.onPersisted()
	}
	// Orders are committed; Redis only learns the outcome. If it is down, polls answer
	// "queued" until the reconciler settles the reservations against MySQL.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if _, err := p.gate.Settle(sctx, settle); err != nil {
		p.metrics.settleErrors.Inc()
		p.log.Warn("settle outcomes in redis failed; the reconciler will", "error", err.Error())
	}
	return nil
}

// persist runs the tiered retry for one group. It returns the result, or nil when the
// group was compensated or dead-lettered instead, or an error when it must not be committed.
func (p *processor) persist(ctx context.Context, g *group) (*store.PersistResult, error) {
	for failed := 1; ; failed++ {
		// A transaction that started finishes even if shutdown began meanwhile.
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		start := time.Now()
		res, err := p.orders.Persist(tctx, g.key.session, g.key.prize, g.items, p.now())
		cancel()
		p.metrics.transactions.Inc()
		p.metrics.txLatency.Observe(time.Since(start).Seconds())
		if err == nil {
			p.metrics.batchSize.Observe(float64(len(g.items)))
			p.count(res, p.now())
			return &res, nil
		}
		act, delay := p.policy.Decide(failed, err)
		if act == retry.Now || act == retry.Later || act == retry.Compensate {
			p.metrics.conflicts.Inc()
		}
		switch act {
		case retry.DeadLetter:
			dls := make([]event.Poison, len(g.msgs))
			for i, m := range g.msgs {
				dls[i] = event.Poison{Msg: m, Cause: err}
			}
			if err := p.sendDeadLetters(ctx, dls); err != nil {
				return nil, err
			}
			return nil, nil
		case retry.Compensate:
			if err := p.sendCompensation(ctx, err, failed, g); err != nil {
				return nil, err
			}
			return nil, nil
		}
		p.metrics.retries.WithLabelValues(act.String()).Inc()
		if act == retry.WaitForDB {
			p.log.Warn("mysql unavailable; waiting", "session_id", g.key.session, "prize_id", g.key.prize,
				"attempt", failed, "delay", delay.String(), "error", err.Error())
		}
		if delay > 0 {
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("stopped while retrying session %d prize %d: %w", g.key.session, g.key.prize, err)
			case <-time.After(delay):
			}
		} else if ctx.Err() != nil && act == retry.WaitForDB {
			return nil, ctx.Err()
		}
	}
}

// count records a committed batch; committed is when its transaction committed.
func (p *processor) count(res store.PersistResult, committed time.Time) {
	p.metrics.redeliveries.Add(float64(res.Existing))
	for _, o := range res.Outcomes {
		if !o.Before {
			p.metrics.orders.WithLabelValues(string(o.Status), string(o.Reason)).Inc()
			// Clocks of two hosts: a gateway ahead of this one must not make a negative wait.
			p.metrics.admitToOrder.Observe(max(0, committed.Sub(o.Grab.AdmittedAt).Seconds()))
		}
	}
}

// settlement is what Redis learns of a persisted group. A request id that already had an
// order is settled under the order's owner, read from MySQL, never under the event's user:
// a forged or mismatched event (same request id, another user) must not make Redis say
// that user owns the order. Such an event is logged and counted. When the owners cannot be
// read, the earlier orders are left out: Redis keeps what it has, and the reconciler's
// stale job settles leftover reservations against MySQL.
func (p *processor) settlement(ctx context.Context, k prizeKey, res *store.PersistResult) stock.SettleBatch {
	var before map[string]seckill.Order
	if res.Existing > 0 {
		var rids []string
		for _, o := range res.Outcomes {
			if o.Before {
				rids = append(rids, o.Grab.RequestID)
			}
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		var err error
		before, err = p.orders.Existing(rctx, rids)
		cancel()
		if err != nil {
			p.metrics.settleErrors.Inc()
			p.log.Warn("owners of redelivered orders unreadable; not settling them in redis", "session_id", k.session,
				"prize_id", k.prize, "count", len(rids), "error", err.Error())
		}
	}
	b := stock.SettleBatch{SessionID: k.session, PrizeID: k.prize, Items: make([]stock.Settlement, 0, len(res.Outcomes))}
	for _, o := range res.Outcomes {
		it := stock.Settlement{RequestID: o.Grab.RequestID, UserID: o.Grab.UserID, OrderID: o.OrderID, Reason: string(o.Reason)}
		if o.Before {
			order, ok := before[o.Grab.RequestID]
			if !ok {
				continue
			}
			if order.UserID != o.Grab.UserID {
				p.metrics.mismatched.Inc()
				p.log.Warn("grab event's user differs from its order's; settled under the order's owner",
					"request_id", o.Grab.RequestID, "event_user_id", o.Grab.UserID, "order_user_id", order.UserID,
					"order_id", order.ID)
			}
			it = stock.SettlementOf(order) // a cancelled order stays cancelled in Redis
		}
		b.Items = append(b.Items, it)
	}
	return b
}

// sendDeadLetters publishes messages that can never be processed, each in the one
// dead-letter envelope (pkg/event), in one produce. It retries until Kafka acknowledges or
// ctx ends (then the batch is not committed and comes back).
func (p *processor) sendDeadLetters(ctx context.Context, dls []event.Poison) error {
	if len(dls) == 0 {
		return nil
	}
	if err := p.retry(ctx, func(wctx context.Context) error { return p.deadLetters.Write(wctx, dls...) }); err != nil {
		return err
	}
	p.log.Warn("dead-lettered", "count", len(dls), "partition", dls[0].Msg.Partition,
		"first_offset", dls[0].Msg.Offset, "error", dls[0].Cause.Error())
	return nil
}

// sendCompensation hands a group whose retries ran out to the compensation topic; the
// reconciler replays it. Only after Kafka acknowledged may the offsets be committed.
func (p *processor) sendCompensation(ctx context.Context, cause error, attempts int, g *group) error {
	out := make([]kafka.Message, len(g.msgs))
	for i, m := range g.msgs {
		out[i] = event.Compensation(m, cause, attempts)
	}
	err := p.retry(ctx, func(wctx context.Context) error { return p.compensation.WriteMessages(wctx, out...) })
	if err != nil {
		return fmt.Errorf("compensate session %d prize %d: %w", g.key.session, g.key.prize, err)
	}
	p.metrics.compensated.Add(float64(len(out)))
	p.log.Warn("retries exhausted; compensating", "session_id", g.key.session, "prize_id", g.key.prize,
		"events", len(out), "attempts", attempts, "error", cause.Error())
	return nil
}

// retry runs a produce until Kafka acknowledges it or ctx ends. Each attempt gets its own
// timeout and survives ctx's end: a produce cut short would be ambiguous (it may land).
func (p *processor) retry(ctx context.Context, produce func(context.Context) error) error {
	backoff := 100 * time.Millisecond
	for {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		err := produce(wctx)
		cancel()
		if err == nil {
			return nil
		}
		p.log.Warn("produce failed; retrying", "error", err.Error())
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}
