// Package writepath is the one way grab events become orders, shared by the consumer (the
// grab topic) and the reconciler (the compensation replay): a batch grouped by
// session×prize and stock bucket (docs/design.md), each group persisted in one transaction under retry.Policy, the outcome
// mirrored into the Redis gate with each earlier order settled under its owner, and
// cancelled orders' units given back. The callers keep what differs: what to do with a group
// the policy gives up on (compensate, dead-letter, record a case) and their own counts.
package writepath

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/retry"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
	"github.com/seckill-pipeline/seckill/pkg/tracing"
)

// Timeouts of the steps, each detached from the caller's context: a transaction or Redis
// call that started finishes even if shutdown began meanwhile (cut short, its outcome would
// be unknown), and only the waits between attempts end with ctx.
const (
	persistTimeout = 30 * time.Second
	ownersTimeout  = 5 * time.Second
	settleTimeout  = 2 * time.Second
)

// Batch is the events of one session×prize (and, for grabs, one stock bucket) in a fetched
// batch, in offset order, with the messages they came from (for dead letters and
// compensation).
type Batch[T any] struct {
	Key seckill.SessionPrize
	// Bucket is the grabs' stock bucket (docs/design.md): each bucket has its own stock row
	// and Redis keys, so it is its own transaction. 0 for a prize without buckets, and for
	// order feedback.
	Bucket int
	Items  []T
	Msgs   []kafka.Message
}

// Group decodes msgs and groups them by session×prize in first-seen order; what does not
// decode is poison. Order feedback is batched this way; grabs by GroupGrabs.
func Group[T any](msgs []kafka.Message, decode func([]byte) (T, seckill.SessionPrize, error)) ([]*Batch[T], []event.Poison) {
	return group(msgs, func(b []byte) (T, groupKey, error) {
		v, k, err := decode(b)
		return v, groupKey{SessionPrize: k}, err
	})
}

// GroupGrabs decodes grab events and groups them by session×prize×bucket in first-seen
// order; what does not decode is poison. A prize without buckets is one group, as before.
func GroupGrabs(msgs []kafka.Message) ([]*Batch[seckill.Grab], []event.Poison) {
	return group(msgs, func(b []byte) (seckill.Grab, groupKey, error) {
		g, k, err := DecodeGrab(b)
		return g, groupKey{SessionPrize: k, bucket: g.Bucket}, err
	})
}

type groupKey struct {
	seckill.SessionPrize
	bucket int
}

func group[T any](msgs []kafka.Message, decode func([]byte) (T, groupKey, error)) ([]*Batch[T], []event.Poison) {
	var groups []*Batch[T]
	var poison []event.Poison
	index := map[groupKey]*Batch[T]{}
	for _, m := range msgs {
		v, k, err := decode(m.Value)
		if err != nil {
			poison = append(poison, event.Poison{Msg: m, Cause: err})
			continue
		}
		if index[k] == nil {
			index[k] = &Batch[T]{Key: k.SessionPrize, Bucket: k.bucket}
			groups = append(groups, index[k])
		}
		index[k].Items = append(index[k].Items, v)
		index[k].Msgs = append(index[k].Msgs, m)
	}
	return groups, poison
}

// DecodeGrab decodes a grab event and returns its session×prize.
func DecodeGrab(b []byte) (seckill.Grab, seckill.SessionPrize, error) {
	g, err := event.DecodeGrab(b)
	return g, g.SessionPrize(), err
}

// Orders persists grabs as orders and reads back orders that existed before: *store.Orders.
type Orders interface {
	PersistFrom(ctx context.Context, sessionID, prizeID int64, grabs []seckill.Grab, now time.Time, src *store.GrabSource) (store.PersistResult, error)
	Existing(ctx context.Context, requestIDs []string) (map[string]seckill.Order, error)
}

// Gate records outcomes in Redis: *stock.Gate.
type Gate interface {
	Settle(ctx context.Context, batches []stock.SettleBatch) (int64, error)
}

// Observer is told what the write path did, for the caller's metrics. A nil Observer is
// allowed.
type Observer interface {
	Attempted(took time.Duration)                                                        // one transaction, committed or not
	Persisted(k seckill.SessionPrize, events int, res store.PersistResult, at time.Time) // a group committed at at
	Failed(act retry.Action)                                                             // an attempt failed; act is what follows
	Mismatched()                                                                         // an event's user differs from its order's
	SettleFailed()                                                                       // Redis did not learn (part of) an outcome
}

// Writer persists groups of grabs and settles their outcomes in Redis.
type Writer struct {
	orders Orders
	gate   Gate
	policy retry.Policy
	obs    Observer
	log    *slog.Logger
	now    func() time.Time
	tr     *tracing.Tracing // nil: off (WithTracing)
}

// New returns a Writer persisting to orders under policy and settling in gate.
func New(orders Orders, gate Gate, policy retry.Policy, obs Observer, log *slog.Logger, now func() time.Time) *Writer {
	if obs == nil {
		obs = nop{}
	}
	return &Writer{orders: orders, gate: gate, policy: policy, obs: obs, log: log, now: now}
}

// GiveUp is the error of a group the policy gave up on: Action is retry.DeadLetter (no such
// stock row or bucket: retrying cannot help) or retry.Compensate (contention outlasted the retries).
// The caller decides where the group goes.
type GiveUp struct {
	Action   retry.Action
	Attempts int
	Err      error // the last attempt's
}

func (g *GiveUp) Error() string {
	return fmt.Sprintf("gave up after %d attempts (%s): %v", g.Attempts, g.Action, g.Err)
}

func (g *GiveUp) Unwrap() error { return g.Err }

// Persist writes one group in one transaction, retried as the policy decides: contention in
// fresh transactions, an unreachable MySQL waited out for as long as ctx lasts. It returns
// the result, a *GiveUp, or, when ctx ended while waiting, an error wrapping ctx's cause and
// the last attempt's error (the group is not accounted for).
func (w *Writer) Persist(ctx context.Context, k seckill.SessionPrize, grabs []seckill.Grab) (store.PersistResult, error) {
	return w.PersistFrom(ctx, k, grabs, nil)
}

// PersistFrom is Persist for a grab partition's batch (store.Orders.PersistFrom): the
// consumer's path, whose result carries the events it publishes from memory.
func (w *Writer) PersistFrom(ctx context.Context, k seckill.SessionPrize, grabs []seckill.Grab, src *store.GrabSource) (store.PersistResult, error) {
	for failed := 1; ; failed++ {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), persistTimeout)
		start := time.Now()
		res, err := w.orders.PersistFrom(tctx, k.Session, k.Prize, grabs, w.now(), src)
		cancel()
		w.obs.Attempted(time.Since(start))
		if err == nil {
			w.obs.Persisted(k, len(grabs), res, w.now())
			return res, nil
		}
		act, delay := w.policy.Decide(failed, err)
		w.obs.Failed(act)
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			span.AddEvent("attempt failed", trace.WithAttributes(attribute.Int("seckill.attempt", failed),
				attribute.String("seckill.action", act.String()), attribute.String("error", err.Error())))
		}
		switch act {
		case retry.DeadLetter, retry.Compensate:
			return res, &GiveUp{Action: act, Attempts: failed, Err: err}
		case retry.WaitForDB:
			w.log.WarnContext(ctx, "mysql unavailable; waiting", "session_id", k.Session, "prize_id", k.Prize,
				"attempt", failed, "delay", delay.String(), "error", err.Error())
		}
		if delay > 0 {
			select {
			case <-ctx.Done():
				return res, fmt.Errorf("stopped while retrying %s: %w", k,
					errors.Join(context.Cause(ctx), err))
			case <-time.After(delay):
			}
		} else if ctx.Err() != nil && act == retry.WaitForDB {
			return res, fmt.Errorf("stopped while retrying %s: %w", k,
				errors.Join(context.Cause(ctx), err))
		}
	}
}

// Settlement is what Redis learns of a persisted group. A request id that already had an
// order is settled under the order's owner, read from MySQL, never under the event's user:
// a forged or mismatched event (same request id, another user) must not make Redis say that
// user owns the order; such an event is logged and counted. When the owners cannot be read,
// the earlier orders are left out: Redis keeps what it has, and the reconciler's stale job
// settles leftover reservations against MySQL.
func (w *Writer) Settlement(ctx context.Context, k seckill.SessionPrize, res store.PersistResult) stock.SettleBatch {
	var owners map[string]seckill.Order
	if rids := earlier(res); len(rids) > 0 {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ownersTimeout)
		var err error
		owners, err = w.orders.Existing(rctx, rids)
		cancel()
		if err != nil {
			w.obs.SettleFailed()
			w.log.Warn("owners of redelivered orders unreadable; not settling them in redis", "session_id", k.Session,
				"prize_id", k.Prize, "count", len(rids), "error", err.Error())
		}
	}
	b, mismatches := settlement(k, res, owners)
	for _, m := range mismatches {
		w.obs.Mismatched()
		w.log.Warn("grab event's user differs from its order's; settled under the order's owner",
			"request_id", m.RequestID, "event_user_id", m.EventUser, "order_user_id", m.Order.UserID, "order_id", m.Order.ID)
	}
	return b
}

// Settle mirrors committed outcomes into Redis. It is idempotent and right whoever does it,
// so it needs no fence; a failure is logged and counted, not returned: the orders are
// committed, polls answer "queued" meanwhile, and the reconciler's stale job settles the
// reservations against MySQL.
func (w *Writer) Settle(ctx context.Context, batches []stock.SettleBatch) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	if _, err := w.gate.Settle(sctx, batches); err != nil {
		w.obs.SettleFailed()
		w.log.Warn("settle outcomes in redis failed; the reconciler's stale job settles them", "error", err.Error())
	}
}

// Mismatch is an earlier order whose redelivered event names another user.
type Mismatch struct {
	RequestID string
	EventUser string
	Order     seckill.Order
}

// earlier returns the request ids that had an order before the transaction.
func earlier(res store.PersistResult) []string {
	var rids []string
	for _, o := range res.Outcomes {
		if o.Before {
			rids = append(rids, o.Grab.RequestID)
		}
	}
	return rids
}

// settlement decides a group's settlement from its outcomes and the stored orders of its
// earlier request ids (owners): new outcomes as persisted, earlier ones as stored (a
// cancelled order stays cancelled), earlier ones not in owners left out. It settles on the
// keys of the bucket the group was persisted in, where the grabs were reserved.
func settlement(k seckill.SessionPrize, res store.PersistResult, owners map[string]seckill.Order) (stock.SettleBatch, []Mismatch) {
	b := stock.SettleBatch{SessionID: k.Session, PrizeID: k.Prize, Bucket: res.Bucket, Buckets: res.Buckets, Items: make([]stock.Settlement, 0, len(res.Outcomes))}
	var mismatches []Mismatch
	for _, o := range res.Outcomes {
		if !o.Before {
			b.Items = append(b.Items, stock.Settlement{RequestID: o.Grab.RequestID, UserID: o.Grab.UserID,
				OrderID: o.OrderID, Reason: string(o.Reason)})
			continue
		}
		order, ok := owners[o.Grab.RequestID]
		if !ok {
			continue
		}
		if order.UserID != o.Grab.UserID {
			mismatches = append(mismatches, Mismatch{RequestID: o.Grab.RequestID, EventUser: o.Grab.UserID, Order: order})
		}
		b.Items = append(b.Items, stock.SettlementOf(order))
	}
	return b, mismatches
}

// Returner gives cancelled orders' units back in Redis: *stock.Gate.
type Returner interface {
	ReturnAll(ctx context.Context, items []stock.UnitReturn) (stock.ReturnReport, error)
}

// ReturnUnits runs the Redis step of cancellations committed in MySQL (one script per
// session×prize). The caller stamps the report's Done steps and decides about the Waiting
// ones (keys not loaded: the consumer leaves them to the sweep, the sweep to the rebuild or
// the session's end).
func ReturnUnits(ctx context.Context, gate Returner, steps []store.StockReturn) (stock.ReturnReport, error) {
	if len(steps) == 0 {
		return stock.ReturnReport{}, nil
	}
	items := make([]stock.UnitReturn, len(steps))
	for i, s := range steps {
		items[i] = stock.UnitReturn{SessionID: s.SessionID, PrizeID: s.PrizeID, RequestID: s.RequestID, UserID: s.UserID,
			OrderID: s.OrderID, Reason: string(s.Reason), Resale: s.Resale, ReleaseSlot: s.ReleaseSlot, Bucket: s.Bucket, Buckets: s.Buckets}
	}
	return gate.ReturnAll(ctx, items)
}

type nop struct{}

func (nop) Attempted(time.Duration)                                             {}
func (nop) Persisted(seckill.SessionPrize, int, store.PersistResult, time.Time) {}
func (nop) Failed(retry.Action)                                                 {}
func (nop) Mismatched()                                                         {}
func (nop) SettleFailed()                                                       {}
