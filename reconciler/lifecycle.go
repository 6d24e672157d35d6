package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

type lifecycleCatalog interface {
	sessionLister
	// A prize's total and left over its stock buckets (for N = 1: its row's).
	PrizeStock(ctx context.Context, sessionID, prizeID int64) (store.PrizeStock, error)
	SaveReport(ctx context.Context, f lease.Fence, r store.SessionReport) (bool, error)
	Reported(ctx context.Context, sessionID, prizeID int64) (bool, error)
	DriftCorrections(ctx context.Context, sessionID, prizeID int64) (int, error)
	PaymentTimeouts(ctx context.Context, sessionIDs ...int64) (map[int64]time.Duration, error)
}

type lifecycleGate interface {
	Snapshots(ctx context.Context, ids []seckill.SessionPrize) ([]stock.Snapshot, error)
	PrizeSnapshots(ctx context.Context, stocks []seckill.Stock) ([]stock.Snapshot, error)
	Remove(ctx context.Context, sessionID, prizeID, fence int64) error
	RemoveBucket(ctx context.Context, sessionID, prizeID int64, b, buckets int, fence int64) error
	Keep(ctx context.Context, sessionID, prizeID int64, expireAt time.Time, fence int64) (bool, error)
	BucketSnapshots(ctx context.Context, id seckill.SessionPrize, n int) ([]stock.Snapshot, error)
	KeepBucket(ctx context.Context, sessionID, prizeID int64, b, buckets int, expireAt time.Time, fence int64) (bool, error)
}

type orderCounter interface {
	CountsFor(ctx context.Context, sessionID, prizeID int64) (store.Counts, error)
	Unpaid(ctx context.Context, sessionID, prizeID int64, cutoff time.Time, limit int) ([]string, error)
}

// returnCounter counts a session×prize's cancelled units by where they went.
type returnCounter interface {
	CountsFor(ctx context.Context, sessionID, prizeID int64) (resale, afterEnd int, err error)
}

// lifecycleJob writes each ended session×prize's final report once everything admitted was
// settled (and, in an activity with a payment timeout, every order was paid or cancelled),
// and removes Redis keys after the grace period, never while reservations are pending (they
// are the trace the stale job re-publishes from). Keys expire by themselves at the
// session's end plus grace, so "never while pending" also means pushing that expiry: every
// run, a prize with pending reservations whose keys would expire within grace has them kept
// until now plus grace (the stale job looks at it until nothing is pending).
type lifecycleJob struct {
	catalog lifecycleCatalog
	gate    lifecycleGate
	orders  orderCounter
	returns returnCounter
	grace   time.Duration
	log     *slog.Logger
	now     func() time.Time
}

func (lifecycleJob) Name() string { return "lifecycle" }

func (j lifecycleJob) Run(ctx context.Context, fence lease.Fence) (result, error) {
	sum := map[string]int64{"reports": 0, "keys_removed": 0, "report_pending": 0, "report_waiting_payment": 0, "keys_kept_pending": 0,
		"keys_extended_pending": 0}
	now := j.now()
	sessions, err := j.catalog.SessionsOverlapping(ctx, now.Add(-lookBack(j.grace)), now)
	if err != nil {
		return result{Summary: sum}, err
	}
	if err := j.keep(ctx, fence, now, sessions, sum); err != nil {
		return result{Summary: sum}, err
	}
	var ids []int64
	endOf := map[int64]time.Time{}
	for _, s := range sessions {
		if s.OpenAt(now) || now.Before(s.Start) {
			continue
		}
		ids = append(ids, s.ID)
		end := s.End
		if s.ClosedAt != nil && s.ClosedAt.Before(end) {
			end = *s.ClosedAt
		}
		endOf[s.ID] = end
	}
	stocks, err := j.catalog.Stocks(ctx, ids...)
	if err != nil {
		return result{Summary: sum}, err
	}
	timeouts, err := j.catalog.PaymentTimeouts(ctx, ids...)
	if err != nil {
		return result{Summary: sum}, err
	}
	var details []any
	for _, st := range stocks {
		done, err := j.catalog.Reported(ctx, st.SessionID, st.PrizeID)
		if err != nil {
			return result{Summary: sum}, err
		}
		if !done {
			// Every bucket's: a grab pending in bucket 2 is in no other bucket's keys, and a
			// report written before it settles would be final and short of it.
			snap, err := j.gate.PrizeSnapshots(ctx, []seckill.Stock{st})
			if err != nil {
				return result{Summary: sum}, err
			}
			if snap[0].Pending > 0 {
				sum["report_pending"]++ // grabs still on their way to an order
				continue
			}
			if timeouts[st.SessionID] > 0 {
				// Every order is paid or will be cancelled: the report waits for the last
				// cancellation, so it can say how many units came back.
				unpaid, err := j.orders.Unpaid(ctx, st.SessionID, st.PrizeID, now.Add(24*time.Hour), 1)
				if err != nil {
					return result{Summary: sum}, err
				}
				if len(unpaid) > 0 {
					sum["report_waiting_payment"]++
					continue
				}
			}
			r, err := j.report(ctx, st)
			if err != nil {
				return result{Summary: sum}, err
			}
			if ok, err := j.catalog.SaveReport(ctx, fence, r); err != nil {
				return result{Summary: sum}, err
			} else if ok {
				sum["reports"]++
				details = append(details, r)
				j.log.Info("session report", "session_id", r.SessionID, "prize_id", r.PrizeID, "total", r.Total,
					"sold", r.Sold, "left", r.Left, "rejected", r.Rejected, "drift_corrected", r.DriftCorrected,
					"cancelled", r.Cancelled, "returned_for_resale", r.ReturnedForResale, "returned_after_end", r.ReturnedAfterEnd)
			}
		}
		if now.Sub(endOf[st.SessionID]) <= j.grace {
			continue
		}
		if err := fence.Check(ctx); err != nil {
			return result{Summary: sum, Details: details}, err
		}
		switch err := j.remove(ctx, st, fence.Number); {
		case errors.Is(err, stock.ErrPending):
			sum["keys_kept_pending"]++
		case err != nil:
			return result{Summary: sum, Details: details}, err
		default:
			sum["keys_removed"]++
		}
	}
	return result{Summary: sum, Details: details}, nil
}

// remove deletes an ended session×prize's keys: every bucket's, for a prize with buckets
// (ErrPending when any bucket has reservations pending; the others are removed meanwhile).
func (j lifecycleJob) remove(ctx context.Context, st seckill.Stock, fence int64) error {
	if st.Buckets <= 1 {
		return j.gate.Remove(ctx, st.SessionID, st.PrizeID, fence)
	}
	var pending error
	for b := range st.Buckets {
		switch err := j.gate.RemoveBucket(ctx, st.SessionID, st.PrizeID, b, st.Buckets, fence); {
		case errors.Is(err, stock.ErrPending):
			pending = err
		case err != nil:
			return err
		}
	}
	return pending
}

// lookBack is how long after its end a session is still looked at by the lifecycle job (and
// by the stale job while reservations are pending): its keys are kept no longer than that.
func lookBack(grace time.Duration) time.Duration { return 3*grace + 24*time.Hour }

// keep pushes the key expiry of every started session×prize with pending reservations whose
// keys would expire within grace (in practice: after its end) to now plus grace.
func (j lifecycleJob) keep(ctx context.Context, fence lease.Fence, now time.Time, sessions []seckill.Session, sum map[string]int64) error {
	var ids []int64
	for _, s := range sessions {
		if !now.Before(s.Start) {
			ids = append(ids, s.ID)
		}
	}
	stocks, err := j.catalog.Stocks(ctx, ids...)
	if err != nil || len(stocks) == 0 {
		return err
	}
	// Prizes without buckets in one pipelined read, as before buckets existed; each prize
	// with buckets in one read of all its buckets, since a reservation pending in any bucket
	// lives in that bucket's keys and must outlive their expiry there. BucketSnapshots, not
	// the prize's sum (PrizeSnapshots): each bucket's keys are kept on their own TTL.
	var pairs []seckill.SessionPrize
	var bucketed []seckill.Stock
	for _, st := range stocks {
		if st.Buckets > 1 {
			bucketed = append(bucketed, st)
			continue
		}
		pairs = append(pairs, st.SessionPrize())
	}
	var snaps []stock.Snapshot
	if len(pairs) > 0 {
		if snaps, err = j.gate.Snapshots(ctx, pairs); err != nil {
			return err
		}
	}
	for _, sn := range snaps {
		if err := j.keepOne(ctx, fence, now, sn, 0, 1, false, sum); err != nil {
			return err
		}
	}
	for _, st := range bucketed {
		snaps, err := j.gate.BucketSnapshots(ctx, st.SessionPrize(), st.Buckets)
		if err != nil {
			return err
		}
		for b, sn := range snaps {
			if err := j.keepOne(ctx, fence, now, sn, b, st.Buckets, true, sum); err != nil {
				return err
			}
		}
	}
	return nil
}

// keepOne keeps one prize's keys (or, bucketed, bucket b's of n) when they hold pending
// reservations and would expire within grace.
func (j lifecycleJob) keepOne(ctx context.Context, fence lease.Fence, now time.Time, sn stock.Snapshot, b, n int, bucketed bool, sum map[string]int64) error {
	if !sn.Loaded || sn.Pending == 0 || sn.TTLMillis >= j.grace.Milliseconds() {
		return nil
	}
	if err := fence.Check(ctx); err != nil {
		return err
	}
	var kept bool
	var err error
	if bucketed {
		kept, err = j.gate.KeepBucket(ctx, sn.SessionID, sn.PrizeID, b, n, now.Add(j.grace), fence.Number)
	} else {
		kept, err = j.gate.Keep(ctx, sn.SessionID, sn.PrizeID, now.Add(j.grace), fence.Number)
	}
	if err != nil {
		return err
	}
	if kept {
		sum["keys_extended_pending"]++
		j.log.Info("keys kept for pending reservations", "session_id", sn.SessionID, "prize_id", sn.PrizeID, "bucket", b,
			"pending", sn.Pending, "until", now.Add(j.grace))
	}
	return nil
}

func (j lifecycleJob) report(ctx context.Context, st seckill.Stock) (store.SessionReport, error) {
	fresh, err := j.catalog.PrizeStock(ctx, st.SessionID, st.PrizeID)
	if err != nil {
		return store.SessionReport{}, err
	}
	c, err := j.orders.CountsFor(ctx, st.SessionID, st.PrizeID)
	if err != nil {
		return store.SessionReport{}, err
	}
	drift, err := j.catalog.DriftCorrections(ctx, st.SessionID, st.PrizeID)
	if err != nil {
		return store.SessionReport{}, err
	}
	resale, afterEnd, err := j.returns.CountsFor(ctx, st.SessionID, st.PrizeID)
	if err != nil {
		return store.SessionReport{}, err
	}
	return store.SessionReport{SessionID: st.SessionID, PrizeID: st.PrizeID, Total: fresh.Total, Sold: c.Succeeded,
		Left: fresh.Left, Rejected: c.Rejected, DriftCorrected: drift, Cancelled: c.Cancelled,
		ReturnedForResale: resale, ReturnedAfterEnd: afterEnd}, nil
}
