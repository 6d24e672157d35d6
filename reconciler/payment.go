package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
	"github.com/seckill-pipeline/seckill/pkg/tracing"
	"github.com/seckill-pipeline/seckill/pkg/writepath"
)

// paymentCatalog finds the sessions whose orders may be due, and their activities' timeouts.
type paymentCatalog interface {
	sessionLister
	Session(ctx context.Context, id int64) (seckill.Session, error)
	PaymentTimeouts(ctx context.Context, sessionIDs ...int64) (map[int64]time.Duration, error)
}

// paymentOrders reads unpaid orders and cancels them (store.Orders).
type paymentOrders interface {
	DueUnpaid(ctx context.Context, sessionID, prizeID int64, cutoff time.Time, after int64, limit int) ([]store.DueOrder, error)
	CountUnpublishedUnpaid(ctx context.Context, sessionID, prizeID int64, cutoff time.Time) (int64, error)
	ApplyFeedback(ctx context.Context, f *lease.Fence, sessionID, prizeID int64, items []seckill.Feedback, now time.Time) (store.FeedbackBatch, error)
}

// redisReturns lists and stamps the cancellations whose Redis step is still to make.
type redisReturns interface {
	PendingRedisPrizes(ctx context.Context) ([]store.PendingPrize, error)
	PendingRedisOf(ctx context.Context, sessionID, prizeID int64, limit int) ([]store.StockReturn, error)
	MarkRedisDone(ctx context.Context, orderIDs []int64, at time.Time) error
}

// unitReturner gives cancelled orders' units back in Redis: the stock gate.
type unitReturner interface {
	ReturnAll(ctx context.Context, items []stock.UnitReturn) (stock.ReturnReport, error)
}

// paymentJob enforces the activities' payment timeouts and completes the Redis side of
// every cancellation.
//
// Timeouts: a succeeded order still unpaid payment_timeout after its creation event was
// published is cancelled with reason payment_timeout, through the same transaction as a
// downstream cancellation (store.Orders.ApplyFeedback: the stock row locked first, as the
// feedback consumer's reports lock it, so the two never race; conditional, so an order paid
// meanwhile stays paid; one order.cancelled event; left_stock + 1), written under this run's
// fence, in batches of batch orders, at most perRun per run (the next run goes on).
//
// A deadline decided while the evidence sits unread is a race, so a timeout waits for both
// queues that could carry it. The clock starts when the relay published order.created (the
// relay stamps it after Kafka acknowledged): before that downstream could not collect
// payment, and an order not published yet is never due. And an order is timed out only
// when the feedback group has read everything on the partition its reports land on (the
// topic is keyed by request id), from a lag reading taken after this run's now and so
// after every due time: a payment acknowledged before its deadline is then applied already
// (the consumer commits offsets after MySQL), and the conditional cancel finds it paid.
// Otherwise the order is deferred to a later run, as drift defers prizes with grabs in flight.
//
// Sweep: every cancellation whose Redis step is not known done (a consumer killed between
// its commit and the script, a Redis error, keys missing after a loss) is given back now.
// The script is at most once per request id, and a rebuild records the units it counted,
// so the sweep can never add a unit twice; it is not fenced for the same reason (each batch
// still checks the fence first). A step whose keys are gone for good (the session ended
// more than the key grace ago) has nothing left to do in Redis and is stamped done. It pages
// per prize (the sweep budget shared among the prizes with pending steps, at least one step
// each), and one prize's failure does not stop the others: a prize whose steps keep failing
// or waiting cannot starve the rest behind its own oldest rows.
type paymentJob struct {
	catalog paymentCatalog
	orders  paymentOrders
	returns redisReturns
	gate    unitReturner
	grace   time.Duration
	batch   int // orders per transaction
	perRun  int // cancellations per run at most
	sweep   int // Redis steps per run at most
	metrics *paymentMetrics
	log     *slog.Logger
	now     func() time.Time
	tr      *tracing.Tracing // nil: off

	// feedback reads the feedback group's lag on the feedback topic (not the grab topic's).
	feedback grabLag
}

// Why a due payment timeout waits for a later run (the deferred metric's reasons).
const (
	deferFeedbackBehind = "feedback_behind" // the feedback group has unread reports on the order's partition
	deferRelayBehind    = "relay_behind"    // order.created not published yet: downstream cannot collect payment
)

func (paymentJob) Name() string { return "payment" }

func (j paymentJob) Run(ctx context.Context, fence lease.Fence) (result, error) {
	sum := map[string]int64{"due": 0, "cancelled": 0, "paid_meanwhile": 0, "units_returned": 0, "outcomes_marked": 0,
		"swept": 0, "waiting_for_keys": 0, "capped": 0, "deferred_feedback_behind": 0, "deferred_relay_behind": 0,
		"sweep_failed_prizes": 0}
	now := j.now()
	var errs []error
	if err := j.timeouts(ctx, fence, now, sum); err != nil {
		errs = append(errs, err)
	}
	if ctx.Err() == nil {
		if err := j.sweepReturns(ctx, fence, now, sum); err != nil {
			errs = append(errs, err)
		}
	}
	return result{Summary: sum}, errors.Join(errs...)
}

// timeouts cancels the due orders of every session×prize in scope.
func (j paymentJob) timeouts(ctx context.Context, fence lease.Fence, now time.Time, sum map[string]int64) error {
	sessions, err := j.catalog.SessionsOverlapping(ctx, now.Add(-3*j.grace-24*time.Hour), now)
	if err != nil {
		return err
	}
	var ids []int64
	for _, s := range sessions {
		ids = append(ids, s.ID)
	}
	timeouts, err := j.catalog.PaymentTimeouts(ctx, ids...)
	if err != nil {
		return err
	}
	var due []int64
	for _, s := range sessions {
		if sessionMayHaveDue(s, timeouts[s.ID], now) {
			due = append(due, s.ID)
		}
	}
	stocks, err := j.catalog.Stocks(ctx, due...)
	if err != nil {
		return err
	}
	budget := j.perRun
	// The feedback lag is read once, when the first candidate is found: after now, so after
	// every candidate's due time.
	var flight *inFlight
	for _, st := range stocks {
		cutoff := paymentCutoff(now, timeouts[st.SessionID])
		unpublished, err := j.orders.CountUnpublishedUnpaid(ctx, st.SessionID, st.PrizeID, cutoff)
		if err != nil {
			return err
		}
		deferred := map[string]int64{deferRelayBehind: unpublished}
		var after int64
		for budget > 0 {
			limit := min(j.batch, budget)
			page, err := j.orders.DueUnpaid(ctx, st.SessionID, st.PrizeID, cutoff, after, limit)
			if err != nil {
				return err
			}
			if len(page) == 0 {
				break
			}
			after = page[len(page)-1].ID
			if flight == nil {
				fl, err := j.feedback.read(ctx)
				if err != nil {
					return fmt.Errorf("feedback %w", err)
				}
				flight = &fl
			}
			items := make([]seckill.Feedback, 0, len(page))
			for _, o := range page {
				if flight.pendingKey([]byte(o.RequestID)) > 0 {
					deferred[deferFeedbackBehind]++
					continue
				}
				items = append(items, seckill.Feedback{RequestID: o.RequestID, Kind: seckill.FeedbackCancelled,
					Reason: seckill.ReasonPaymentTimeout, At: now, DueBefore: cutoff})
			}
			if len(items) > 0 {
				if err := j.cancel(ctx, fence, st, items, now, timeouts[st.SessionID], sum); err != nil {
					return err
				}
				budget -= len(items)
			}
			if len(page) < limit {
				break
			}
		}
		for reason, n := range deferred {
			sum["deferred_"+reason] += n
			j.metrics.deferred.WithLabelValues(reason).Add(float64(n))
		}
		if deferred[deferFeedbackBehind]+deferred[deferRelayBehind] > 0 {
			j.log.Info("payment timeouts deferred: evidence may be unread", "session_id", st.SessionID, "prize_id", st.PrizeID,
				"feedback_behind", deferred[deferFeedbackBehind], "relay_behind", deferred[deferRelayBehind])
		}
		if budget <= 0 {
			sum["capped"] = 1 // more may be due: the next run goes on
			break
		}
	}
	return nil
}

// sessionMayHaveDue says whether a session's orders may be due at now: nothing of a session
// can be due before it has been open for one timeout (its orders are published after its
// start). Inclusive, so it never hides an order the cut-off would find due.
func sessionMayHaveDue(s seckill.Session, timeout time.Duration, now time.Time) bool {
	return timeout > 0 && !now.Before(s.Start.Add(timeout))
}

// paymentCutoff is the payment timeout's deadline turned round: an order whose order.created
// was published before the cut-off is due (store.Orders.DueUnpaid's event_published_at < ?,
// and decideFeedback's DueBefore). Strictly before: an order published exactly timeout ago
// has its deadline now, and the deadline's instant is still the buyer's. The cut-off is cut
// to the microsecond MySQL keeps, downwards, so it is never later than now - timeout: no
// order is timed out early, one is at most a microsecond late.
func paymentCutoff(now time.Time, timeout time.Duration) time.Time {
	return now.Add(-timeout).Truncate(time.Microsecond)
}

// cancel times out one batch of a session×prize's due orders and gives their units back.
func (j paymentJob) cancel(ctx context.Context, fence lease.Fence, st seckill.Stock, items []seckill.Feedback,
	now time.Time, timeout time.Duration, sum map[string]int64) error {
	sum["due"] += int64(len(items))
	ctx, span := startAction(ctx, j.tr, spanPaymentTimeout, st.SessionID, st.PrizeID)
	defer span.End()
	res, err := j.orders.ApplyFeedback(ctx, &fence, st.SessionID, st.PrizeID, items, now)
	if err != nil {
		return err
	}
	// Linked: the orders this batch cancelled (not those paid meanwhile).
	var cancelled []string
	if span.IsRecording() {
		for _, o := range res.Outcomes {
			if o.Result == seckill.FeedbackApplied {
				cancelled = append(cancelled, o.TraceParent)
			}
		}
	}
	linkOrders(span, len(cancelled), func(i int) string { return cancelled[i] })
	sum["cancelled"] += int64(res.Cancelled)
	sum["paid_meanwhile"] += int64(res.NotDue)
	j.metrics.cancelled.Add(float64(res.Cancelled))
	if res.Cancelled > 0 {
		j.log.InfoContext(ctx, "unpaid orders cancelled", "session_id", st.SessionID, "prize_id", st.PrizeID,
			"count", res.Cancelled, "payment_timeout", timeout.String())
	}
	// The Redis step right away; what it cannot do now the sweep below retries.
	return j.redisStep(ctx, fence, now, res.Returns, sum)
}

// sweepReturns completes the Redis steps left pending, oldest first within each prize, a
// page per prize.
func (j paymentJob) sweepReturns(ctx context.Context, fence lease.Fence, now time.Time, sum map[string]int64) error {
	prizes, err := j.returns.PendingRedisPrizes(ctx)
	if err != nil || len(prizes) == 0 {
		return err
	}
	page := max(1, (j.sweep+len(prizes)-1)/len(prizes))
	before := sum["units_returned"] + sum["outcomes_marked"]
	defer func() { sum["swept"] += sum["units_returned"] + sum["outcomes_marked"] - before }()
	var errs []error
	for _, p := range prizes {
		if ctx.Err() != nil {
			break
		}
		pending, err := j.returns.PendingRedisOf(ctx, p.SessionID, p.PrizeID, page)
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		if err := j.redisStep(ctx, fence, now, pending, sum); err != nil {
			if errors.Is(err, lease.ErrStale) {
				return errors.Join(append(errs, err)...)
			}
			sum["sweep_failed_prizes"]++
			errs = append(errs, fmt.Errorf("session %d prize %d: %w", p.SessionID, p.PrizeID, err))
		}
	}
	return errors.Join(errs...)
}

// redisStep runs the Redis side of cancellations and stamps what it completed. Steps whose
// prize has no stock key wait for the rebuild, unless the keys are gone for good.
func (j paymentJob) redisStep(ctx context.Context, fence lease.Fence, now time.Time, steps []store.StockReturn, sum map[string]int64) error {
	if len(steps) == 0 {
		return nil
	}
	if err := fence.Check(ctx); err != nil {
		return err
	}
	ctx, span := startAction(ctx, j.tr, spanReturnUnits, steps[0].SessionID, steps[0].PrizeID)
	defer span.End()
	linkOrders(span, len(steps), func(i int) string { return steps[i].TraceParent })
	rep, err := writepath.ReturnUnits(ctx, j.gate, steps)
	// Stamped after the step, not at the run's start: the stamp says the unit was back in
	// Redis no later than it, which is what readers of a sold_out answer rely on (the chaos
	// rows' history check, docs/design.md "Histories").
	doneAt := j.now()
	sum["units_returned"] += int64(rep.Returned)
	sum["outcomes_marked"] += int64(rep.Marked)
	j.metrics.swept.WithLabelValues("returned").Add(float64(rep.Returned))
	j.metrics.swept.WithLabelValues("already").Add(float64(rep.Already))
	j.metrics.swept.WithLabelValues("marked").Add(float64(rep.Marked))
	done := rep.Done
	ends := map[int64]time.Time{}
	for _, w := range rep.Waiting {
		end, ok := ends[w.SessionID]
		if !ok {
			s, serr := j.catalog.Session(ctx, w.SessionID)
			if serr != nil {
				return errors.Join(err, serr)
			}
			end = s.End
			if s.ClosedAt != nil && s.ClosedAt.Before(end) {
				end = *s.ClosedAt
			}
			ends[w.SessionID] = end
		}
		if now.Sub(end) > j.grace {
			// The keys were removed after the grace period: polls read MySQL, and no unit
			// of an ended session is for sale. Nothing left to do in Redis.
			done = append(done, w.OrderID)
			j.metrics.swept.WithLabelValues("expired").Inc()
			continue
		}
		sum["waiting_for_keys"]++
	}
	if serr := j.returns.MarkRedisDone(ctx, done, doneAt); serr != nil {
		err = errors.Join(err, serr)
	}
	if err != nil {
		return fmt.Errorf("give cancelled units back to redis: %w", err)
	}
	return nil
}
