package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// paymentCatalog finds the sessions whose orders may be due, and their activities' timeouts.
type paymentCatalog interface {
	sessionLister
	Session(ctx context.Context, id int64) (seckill.Session, error)
	PaymentTimeouts(ctx context.Context, sessionIDs ...int64) (map[int64]time.Duration, error)
}

// paymentOrders reads unpaid orders and cancels them (store.Orders).
type paymentOrders interface {
	Unpaid(ctx context.Context, sessionID, prizeID int64, cutoff time.Time, limit int) ([]string, error)
	ApplyFeedback(ctx context.Context, f *store.Fence, sessionID, prizeID int64, items []seckill.Feedback, now time.Time) (store.FeedbackBatch, error)
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
// Timeouts: a succeeded order still unpaid payment_timeout after it was stored is cancelled
// with reason payment_timeout, through the same transaction as a downstream cancellation
// (store.Orders.ApplyFeedback: conditional, so an order paid meanwhile stays paid; one
// order.cancelled event; left_stock + 1), written under this run's fence, in batches of
// batch orders, at most perRun per run (the next run goes on).
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
}

type paymentMetrics struct {
	cancelled prometheus.Counter
	swept     *prometheus.CounterVec
}

func newPaymentMetrics(reg prometheus.Registerer) *paymentMetrics {
	m := &paymentMetrics{
		cancelled: prometheus.NewCounter(prometheus.CounterOpts{Name: "seckill_reconciler_payment_timeouts_total",
			Help: "Orders cancelled by the reconciler because they were not paid within their activity's payment timeout."}),
		swept: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "seckill_reconciler_returns_swept_total",
			Help: "Cancellations whose Redis step the reconciler completed, by result (returned, already, marked, expired)."}, []string{"result"}),
	}
	for _, r := range []string{"returned", "already", "marked", "expired"} {
		m.swept.WithLabelValues(r)
	}
	reg.MustRegister(m.cancelled, m.swept)
	return m
}

func (paymentJob) Name() string { return "payment" }

func (j paymentJob) Run(ctx context.Context, fence lease.Fence) (result, error) {
	sum := map[string]int64{"due": 0, "cancelled": 0, "paid_meanwhile": 0, "units_returned": 0, "outcomes_marked": 0,
		"swept": 0, "waiting_for_keys": 0, "capped": 0, "sweep_failed_prizes": 0}
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
		// Nothing of a session can be due before it has been open for one timeout.
		if t := timeouts[s.ID]; t > 0 && !now.Before(s.Start.Add(t)) {
			due = append(due, s.ID)
		}
	}
	stocks, err := j.catalog.Stocks(ctx, due...)
	if err != nil {
		return err
	}
	f := &store.Fence{Lease: fence.Name, Number: fence.Number}
	budget := j.perRun
	for _, st := range stocks {
		cutoff := now.Add(-timeouts[st.SessionID]).Truncate(time.Microsecond) // MySQL keeps microseconds
		for budget > 0 {
			rids, err := j.orders.Unpaid(ctx, st.SessionID, st.PrizeID, cutoff, min(j.batch, budget))
			if err != nil {
				return err
			}
			if len(rids) == 0 {
				break
			}
			sum["due"] += int64(len(rids))
			items := make([]seckill.Feedback, len(rids))
			for i, rid := range rids {
				items[i] = seckill.Feedback{RequestID: rid, Kind: seckill.FeedbackCancelled, Reason: seckill.ReasonPaymentTimeout,
					At: now, DueBefore: cutoff}
			}
			res, err := j.orders.ApplyFeedback(ctx, f, st.SessionID, st.PrizeID, items, now)
			if err != nil {
				return err
			}
			budget -= len(rids)
			sum["cancelled"] += int64(res.Cancelled)
			sum["paid_meanwhile"] += int64(res.NotDue)
			j.metrics.cancelled.Add(float64(res.Cancelled))
			if res.Cancelled > 0 {
				j.log.Info("unpaid orders cancelled", "session_id", st.SessionID, "prize_id", st.PrizeID,
					"count", res.Cancelled, "payment_timeout", timeouts[st.SessionID].String())
			}
			// The Redis step right away; what it cannot do now the sweep below retries.
			if err := j.redisStep(ctx, fence, now, res.Returns, sum); err != nil {
				return err
			}
			if len(rids) < j.batch {
				break
			}
		}
		if budget <= 0 {
			sum["capped"] = 1 // more may be due: the next run goes on
			break
		}
	}
	return nil
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
	items := make([]stock.UnitReturn, len(steps))
	for i, s := range steps {
		items[i] = stock.UnitReturn{SessionID: s.SessionID, PrizeID: s.PrizeID, RequestID: s.RequestID, UserID: s.UserID,
			OrderID: s.OrderID, Reason: string(s.Reason), Resale: s.Resale, ReleaseSlot: s.ReleaseSlot}
	}
	rep, err := j.gate.ReturnAll(ctx, items)
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
	if serr := j.returns.MarkRedisDone(ctx, done, now); serr != nil {
		err = errors.Join(err, serr)
	}
	if err != nil {
		return fmt.Errorf("give cancelled units back to redis: %w", err)
	}
	return nil
}
