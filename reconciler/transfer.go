package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// Bucket transfers (docs/design.md): units move between the stock buckets of a
// session×prize in five steps, each idempotent by transfer id and each under the lease's
// fence, so a reconciler that dies between two of them leaves a journal entry the next lease
// holder finishes:
//
//  1. plan: journal the transfer (MySQL);
//  2. take: the source bucket's Redis keys give up the units (never more than they hold);
//  3. move: MySQL moves what was taken from the source row to the destination row;
//  4. give: the destination bucket's Redis keys get the units;
//  5. done: journal it.
//
// A unit leaves Redis's source before MySQL's and reaches Redis's destination after MySQL's,
// so at every instant each bucket's Redis stock is at most its MySQL row's.
//
// A stock adjustment of a prize with buckets is the same journal with one end outside the
// prize (store.Outside), planned by the admin API (store.Catalog.PlanBucketAdjustment) and
// run here: a raise (from outside) has no take, its move adds the units to the row and its
// give to the keys; a cut (to outside) takes in Redis (Gate.TakeCut), then from the row, and
// has no give.

type transferCatalog interface {
	PlanTransfer(ctx context.Context, f lease.Fence, sessionID, prizeID int64, from, to, units int) (store.Transfer, error)
	MoveTransfer(ctx context.Context, f lease.Fence, id int64, taken int) (store.Transfer, int64, error)
	FinishTransfer(ctx context.Context, f lease.Fence, id int64) error
	CancelTransfer(ctx context.Context, f lease.Fence, id int64) error
	UnfinishedTransfers(ctx context.Context) ([]store.Transfer, error)
	Buckets(ctx context.Context, sessionID, prizeID int64) ([]store.Bucket, error)
	Session(ctx context.Context, id int64) (seckill.Session, error)
}

type transferGate interface {
	Take(ctx context.Context, sessionID, prizeID int64, b, buckets int, transferID int64, units int, fence int64) (int, error)
	TakeCut(ctx context.Context, sessionID, prizeID int64, b, buckets int, transferID int64, units int, minVersion int64, expireAt time.Time, fence int64) (int, error)
	Give(ctx context.Context, sessionID, prizeID int64, b, buckets int, transferID int64, units, taken int, version int64, expireAt time.Time, fence int64) (bool, error)
}

// transferStep names the step a transfer just finished, for the step hook.
type transferStep int

const (
	stepPlanned transferStep = iota + 1
	stepTaken
	stepMoved
	stepGiven
	stepDone
)

// transferExecutor runs transfers. One lease holder runs one executor, one transfer at a
// time: two executors under the same fence could interleave a cancel with a take.
type transferExecutor struct {
	catalog transferCatalog
	gate    transferGate
	grace   time.Duration // the keys' expiry after the session's end (SECKILL_KEY_GRACE)
	// after is called once each step is durable; an error stops the transfer there, as a
	// crash would (tests use it to stop after every step). Nil: never stops.
	after   func(t store.Transfer, step transferStep) error
	metrics *rebalanceMetrics // nil: counts nothing
	now     func() time.Time
}

// errCutWaits stops a cut of a bucket whose keys are missing while its session is open;
// resume leaves it planned, and a later round takes it once the bucket is rebuilt.
var errCutWaits = errors.New("cut waits for its bucket's keys to be rebuilt")

func (x transferExecutor) step(t store.Transfer, s transferStep) error {
	if x.after == nil {
		return nil
	}
	return x.after(t, s)
}

// transfer plans a transfer of units from bucket from to bucket to and runs it to its end.
func (x transferExecutor) transfer(ctx context.Context, f lease.Fence, sessionID, prizeID int64, from, to, units int) (store.Transfer, error) {
	t, err := x.catalog.PlanTransfer(ctx, f, sessionID, prizeID, from, to, units)
	if err != nil {
		return store.Transfer{}, err
	}
	if err := x.step(t, stepPlanned); err != nil {
		return t, err
	}
	return x.run(ctx, f, t)
}

// resume finishes every transfer a previous holder (or this one) left unfinished, oldest
// first. It stops at the first stale fence: nothing more can be written under it.
func (x transferExecutor) resume(ctx context.Context, f lease.Fence) (int, error) {
	open, err := x.catalog.UnfinishedTransfers(ctx)
	if err != nil {
		return 0, err
	}
	var errs []error
	n := 0
	for _, t := range open {
		if _, err := x.run(ctx, f, t); err != nil {
			if errors.Is(err, errCutWaits) {
				continue
			}
			errs = append(errs, err)
			if staleFence(err) {
				break
			}
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

func staleFence(err error) bool {
	return errors.Is(err, lease.ErrStale) || errors.Is(err, stock.ErrFenced)
}

// run drives t from its journal state to done (or cancelled).
func (x transferExecutor) run(ctx context.Context, f lease.Fence, t store.Transfer) (store.Transfer, error) {
	var version int64 = -1 // the destination row's version after the move; -1: read it
	switch t.State {
	case store.TransferDone, store.TransferCancelled:
		return t, nil
	case store.TransferPlanned:
		// A raise takes nothing in Redis: the move adds what was asked.
		taken := t.Requested
		if t.From != store.Outside {
			var err error
			if t.To == store.Outside {
				taken, err = x.cut(ctx, f, t)
			} else {
				taken, err = x.gate.Take(ctx, t.SessionID, t.PrizeID, t.From, t.Buckets, t.ID, t.Requested, f.Number)
			}
			if errors.Is(err, seckill.ErrNotLoaded) {
				// Nothing taken: the source row still holds the units, and the next preheat or
				// rebuild loads them from it.
				if err := x.catalog.CancelTransfer(ctx, f, t.ID); err != nil {
					return t, err
				}
				t.State = store.TransferCancelled
				x.metrics.ended(t)
				return t, nil
			}
			if err != nil {
				return t, err
			}
			t.Taken = taken
			if err := x.step(t, stepTaken); err != nil {
				return t, err
			}
		}
		var err error
		if t, version, err = x.catalog.MoveTransfer(ctx, f, t.ID, taken); err != nil {
			return t, err
		}
		if err := x.step(t, stepMoved); err != nil {
			return t, err
		}
	case store.TransferMoved:
	default:
		return t, fmt.Errorf("transfer %d: unknown state %q", t.ID, t.State)
	}
	if t.To == store.Outside {
		// A cut's units left the prize with the move: no give.
		return x.finish(ctx, f, t)
	}
	if version < 0 {
		bs, err := x.catalog.Buckets(ctx, t.SessionID, t.PrizeID)
		if err != nil {
			return t, err
		}
		if t.To >= len(bs) {
			return t, fmt.Errorf("transfer %d: bucket %d of %d", t.ID, t.To, len(bs))
		}
		// The row's version now is at least its version after the move: a revision that is
		// newer still only sends a preheat that read an older row back to MySQL.
		version = bs[t.To].Version
	}
	// What the source's sent counted is settled in the destination's received; a raise
	// sent nothing.
	received := t.Taken
	if t.From == store.Outside {
		received = 0
	}
	_, err := x.gate.Give(ctx, t.SessionID, t.PrizeID, t.To, t.Buckets, t.ID, t.Units, received, version, t.SessionEnd.Add(x.grace), f.Number)
	if err != nil && !errors.Is(err, seckill.ErrNotLoaded) {
		// Not loaded is fine: the row holds the units, and the next preheat or rebuild loads
		// them (the revision Give recorded refuses a row read before the move).
		return t, err
	}
	if err := x.step(t, stepGiven); err != nil {
		return t, err
	}
	return x.finish(ctx, f, t)
}

// finish journals t done (step 5).
func (x transferExecutor) finish(ctx context.Context, f lease.Fence, t store.Transfer) (store.Transfer, error) {
	if err := x.catalog.FinishTransfer(ctx, f, t.ID); err != nil {
		return t, err
	}
	t.State = store.TransferDone
	x.metrics.ended(t)
	return t, x.step(t, stepDone)
}

// cut is the take step of a stock adjustment's cut. A bucket not loaded takes nothing in
// Redis but records the row's next version as its revision (a preheat of the row before the
// cut is refused), and the move then takes the units from the row alone: unlike a transfer
// between buckets, a cut is never cancelled, or the adjustment would be lost. That is
// right only while nothing can be admitted: while the session is open, a bucket without
// keys lost them, and its row still counts units admitted before the loss whose grabs are
// on their way to the consumer. The cut then waits (errCutWaits) for the rebuild, which
// loads the row once the consumer caught up, and takes in Redis as for a live bucket.
func (x transferExecutor) cut(ctx context.Context, f lease.Fence, t store.Transfer) (int, error) {
	bs, err := x.catalog.Buckets(ctx, t.SessionID, t.PrizeID)
	if err != nil {
		return 0, err
	}
	if t.From >= len(bs) {
		return 0, fmt.Errorf("transfer %d: bucket %d of %d", t.ID, t.From, len(bs))
	}
	taken, err := x.gate.TakeCut(ctx, t.SessionID, t.PrizeID, t.From, len(bs), t.ID, t.Requested, bs[t.From].Version+1, t.SessionEnd.Add(x.grace), f.Number)
	if errors.Is(err, seckill.ErrNotLoaded) {
		s, err := x.catalog.Session(ctx, t.SessionID)
		if err != nil {
			return 0, err
		}
		if s.OpenAt(x.now()) {
			return 0, fmt.Errorf("transfer %d from bucket %d: %w", t.ID, t.From, errCutWaits)
		}
		return t.Requested, nil
	}
	return taken, err
}
