package store

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// Stock adjustment of a prize with stock buckets (docs/design.md, "Stock adjustment"). The
// admin API only plans it: it journals transfers from or to Outside, state planned, and the
// reconciler's transfer executor runs them under its lease fence, with the same resumable
// steps as a transfer between two buckets. The API holds no lease, so it cannot fence a
// Redis script or a journal step; and one executor per transfer is what keeps a take from
// racing a cancel (reconciler/transfer.go).

// Outside is the journal's end of a transfer that adds units to the prize (from Outside)
// or removes them (to Outside): a stock adjustment. Migration 0013 lets a transfer name it.
const Outside = -1

// ErrEnded is returned for a change refused because the session has ended or was closed.
var ErrEnded = errors.New("session has ended")

// BucketAdjustment is a planned stock adjustment of a prize with buckets.
type BucketAdjustment struct {
	Before PrizeStock // the prize's stock when planned
	Total  int        // the total asked for
	// Transfers are the planned journal entries, one per bucket that gains (from Outside)
	// or loses (to Outside) units; none when Total is the prize's total already.
	Transfers []Transfer
}

// PlanBucketAdjustment journals the transfers that take a prize with stock buckets from its
// total to total, and writes the audit row, in one transaction. A raise goes to the buckets
// with the least left, a cut comes from those with the most (levelling, lower bucket first
// on a tie). Refused: a prize without buckets (AdjustStock's business), a session that ended
// or was closed (ErrEnded), a total below what is sold (total - left over every bucket:
// seckill.ErrConflict), and a prize with an adjustment still being applied
// (seckill.ErrConflict: the lefts it was planned from are not yet the rows'). A planned cut
// is an upper bound: the take step takes only what Redis has not admitted by then.
func (c *Catalog) PlanBucketAdjustment(ctx context.Context, sessionID, prizeID int64, total int, actor, remote, reason string) (BucketAdjustment, error) {
	if total < 0 || total > seckill.MaxStock {
		return BucketAdjustment{}, seckill.ValidationError{{Field: "total", Message: fmt.Sprintf("must be 0 to %d", seckill.MaxStock)}}
	}
	now := c.now().UTC()
	out := BucketAdjustment{Total: total}
	err := c.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		// The prize's row first, then its bucket rows in bucket order: the order every
		// writer of several bucket rows locks them in (MoveTransfer). The lock comes before
		// any plain read: under REPEATABLE READ the first plain read fixes the snapshot the
		// check for an earlier adjustment below reads, and a snapshot from before the wait
		// misses the adjustment whose planner held the lock (both would be journaled).
		var row stockRow
		if err := first(tx.Clauses(clause.Locking{Strength: "UPDATE"}).
			Where("session_id = ? AND prize_id = ?", sessionID, prizeID), &row); err != nil {
			return fmt.Errorf("stock of session %d prize %d: %w", sessionID, prizeID, err)
		}
		var srow sessionRow
		if err := first(tx.Where("id = ?", sessionID), &srow); err != nil {
			return fmt.Errorf("session %d: %w", sessionID, err)
		}
		if srow.ClosedAt != nil || !now.Before(srow.EndsAt) {
			return fmt.Errorf("adjust stock of session %d: %w", sessionID, ErrEnded)
		}
		if row.Buckets <= 1 {
			return fmt.Errorf("stock of session %d prize %d has no buckets: adjust it with AdjustStock", sessionID, prizeID)
		}
		var rest []Bucket
		if err := tx.Raw(`SELECT bucket, total, left_stock AS `+"`left`"+`, version FROM stock_buckets
			WHERE session_id = ? AND prize_id = ? ORDER BY bucket FOR UPDATE`, sessionID, prizeID).Scan(&rest).Error; err != nil {
			return fmt.Errorf("bucket rows: %w", err)
		}
		buckets := append([]Bucket{{Bucket: 0, Total: row.Total, Left: row.LeftStock, Version: row.Version}}, rest...)
		if len(buckets) != row.Buckets {
			return fmt.Errorf("stock of session %d prize %d: %d bucket rows, want %d", sessionID, prizeID, len(buckets), row.Buckets)
		}
		var busy int64
		if err := tx.Raw(`SELECT COUNT(*) FROM bucket_transfers WHERE session_id = ? AND prize_id = ? AND state IN ?
			AND (from_bucket = ? OR to_bucket = ?)`, sessionID, prizeID, []string{TransferPlanned, TransferMoved}, Outside, Outside).
			Row().Scan(&busy); err != nil {
			return fmt.Errorf("unfinished adjustments: %w", err)
		}
		if busy > 0 {
			return fmt.Errorf("stock of session %d prize %d: an earlier adjustment is still being applied by the reconciler (%d transfers); try again shortly: %w",
				sessionID, prizeID, busy, seckill.ErrConflict)
		}
		out.Before = PrizeStock{SessionID: sessionID, PrizeID: prizeID, Buckets: row.Buckets}
		lefts := make([]int, len(buckets))
		for i, b := range buckets {
			out.Before.Total += b.Total
			out.Before.Left += b.Left
			lefts[i] = b.Left
		}
		if sold := out.Before.Total - out.Before.Left; total < sold {
			return fmt.Errorf("stock of session %d prize %d: total %d is below the %d units already sold: %w", sessionID, prizeID, total, sold, seckill.ErrConflict)
		}
		delta := total - out.Before.Total
		for b, units := range Level(lefts, delta) {
			if units == 0 {
				continue
			}
			// fence 0: planned by the admin API, which holds no lease; every later step
			// records the executing reconciler's fence.
			tr := transferRow{SessionID: sessionID, PrizeID: prizeID, FromBucket: Outside, ToBucket: b, Requested: units,
				State: TransferPlanned, CreatedAt: now, UpdatedAt: now}
			if delta < 0 {
				tr.FromBucket, tr.ToBucket = b, Outside
			}
			if err := tx.Create(&tr).Error; err != nil {
				return fmt.Errorf("journal the adjustment of bucket %d: %w", b, err)
			}
			out.Transfers = append(out.Transfers, tr.domain(srow.EndsAt, row.Buckets))
		}
		sid, pid, before, after := sessionID, prizeID, int64(out.Before.Total), int64(total)
		if err := tx.Create(&auditRow{At: now, Actor: actor, RemoteAddr: truncate(remote, 64), Action: "adjust_stock", SessionID: &sid, PrizeID: &pid,
			BeforeValue: &before, AfterValue: &after, Detail: reason}).Error; err != nil {
			return fmt.Errorf("audit: %w", err)
		}
		return nil
	})
	if err != nil {
		return BucketAdjustment{}, err
	}
	return out, nil
}

// Level spreads delta units over buckets holding lefts: a raise (delta > 0) fills the
// buckets with the least left up to a common level, a cut (delta < 0) lowers those with the
// most down to one; the units a level cannot split evenly go to (or come from) the lowest
// buckets at that level. It returns the units per bucket, all >= 0, summing to |delta|; a
// cut never takes more than a bucket's left (the caller checks |delta| <= the lefts' sum).
func Level(lefts []int, delta int) []int {
	out := make([]int, len(lefts))
	if delta == 0 || len(lefts) == 0 {
		return out
	}
	raise := delta > 0
	units := max(delta, -delta)
	// gap(h): the units that bring every bucket to level h.
	gap := func(h int) int {
		n := 0
		for _, l := range lefts {
			if raise && l < h {
				n += h - l
			}
			if !raise && l > h {
				n += l - h
			}
		}
		return n
	}
	var level int
	if raise {
		// The highest level whose gap fits in units.
		lo := lefts[0]
		for _, l := range lefts {
			lo = min(lo, l)
		}
		level = lo + sort.Search(units+1, func(i int) bool { return gap(lo+i) > units }) - 1
	} else {
		// The lowest level whose gap fits in units.
		hi := 0
		for _, l := range lefts {
			hi = max(hi, l)
		}
		level = sort.Search(hi+1, func(h int) bool { return gap(h) <= units })
	}
	rest := units - gap(level)
	for b, l := range lefts {
		switch {
		case raise && l <= level:
			out[b] = level - l
			if rest > 0 {
				out[b]++
				rest--
			}
		case !raise && l >= level:
			out[b] = l - level
			if rest > 0 && level > 0 {
				out[b]++
				rest--
			}
		}
	}
	return out
}
