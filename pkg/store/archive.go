package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
)

// Archive moves the orders of ended sessions out of the hot orders table into orders_archive
// (migration 0010), with their follow-up events and stock returns, one transaction per
// batch. Reads by request id (the status lookup, the workbench, the stale and drift jobs,
// the consumer's duplicate check) find archived orders too, so every promise stays
// checkable: an archived request id still answers its status and is never persisted again.
type Archive struct {
	db *gorm.DB
}

// NewArchive returns an Archive on db.
func NewArchive(db *gorm.DB) *Archive { return &Archive{db: db} }

// ArchiveSkip is why a session×prize was not archived: a job still has work on its orders.
type ArchiveSkip string

// Why a session×prize ended long enough ago is kept in orders.
const (
	SkipNotReported      ArchiveSkip = "not_reported"    // no final session report yet (the lifecycle job writes it)
	SkipEventsPending    ArchiveSkip = "events_pending"  // order events not on the order topic yet (the relay)
	SkipReturnsPending   ArchiveSkip = "returns_pending" // cancelled units whose Redis step is not done (the payment job)
	SkipUnpaidOrders     ArchiveSkip = "unpaid_orders"   // unpaid orders the payment timeout may still cancel
	SkipOpenCases        ArchiveSkip = "open_cases"      // exception cases of the session still open (the workbench)
	skipNothingToArchive ArchiveSkip = "nothing"         // no orders left in the hot table
)

// ArchiveCandidate is a session×prize whose session ended before the cutoff.
type ArchiveCandidate struct {
	SessionID, PrizeID int64
	EndedAt            time.Time
	Orders             int64       // rows still in the orders table
	Skip               ArchiveSkip // "" when it may be archived now
}

// Candidates lists the session×prizes whose session ended before cutoff and that still have
// rows in orders, each with the reason it must wait, if any.
func (a *Archive) Candidates(ctx context.Context, cutoff time.Time) ([]ArchiveCandidate, error) {
	var rows []struct {
		SessionID, PrizeID int64
		EndsAt             time.Time
		Orders             int64
		Reported           bool
		EventsPending      bool
		ReturnsPending     bool
		UnpaidOrders       bool
		OpenCases          bool
	}
	// One row per session×prize; each check an EXISTS on an index the jobs use themselves.
	err := a.db.WithContext(ctx).Raw(`SELECT st.session_id, st.prize_id, s.ends_at,
			(SELECT COUNT(*) FROM orders o WHERE o.session_id = st.session_id AND o.prize_id = st.prize_id) AS orders,
			EXISTS (SELECT 1 FROM session_reports r WHERE r.session_id = st.session_id AND r.prize_id = st.prize_id) AS reported,
			(EXISTS (SELECT 1 FROM orders o WHERE o.session_id = st.session_id AND o.prize_id = st.prize_id AND NOT `+publishedSQL+`)
			 OR EXISTS (SELECT 1 FROM order_events e JOIN orders o ON o.id = e.order_id
			            WHERE o.session_id = st.session_id AND o.prize_id = st.prize_id AND e.published_at IS NULL)) AS events_pending,
			EXISTS (SELECT 1 FROM stock_returns sr WHERE sr.session_id = st.session_id AND sr.prize_id = st.prize_id
			        AND sr.redis_done_at IS NULL) AS returns_pending,
			(a.payment_timeout_ms > 0 AND EXISTS (SELECT 1 FROM orders o WHERE o.session_id = st.session_id
			        AND o.prize_id = st.prize_id AND o.status = 'succeeded' AND o.paid_at IS NULL)) AS unpaid_orders,
			EXISTS (SELECT 1 FROM exception_cases c WHERE c.session_id = st.session_id AND c.state = 'open') AS open_cases
		FROM session_stocks st
		JOIN sessions s ON s.id = st.session_id
		JOIN activities a ON a.id = s.activity_id
		WHERE s.ends_at < ?
		ORDER BY s.ends_at, st.session_id, st.prize_id`, cutoff.UTC()).Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("archive candidates: %w", err)
	}
	out := make([]ArchiveCandidate, 0, len(rows))
	for _, r := range rows {
		c := ArchiveCandidate{SessionID: r.SessionID, PrizeID: r.PrizeID, EndedAt: r.EndsAt.UTC(), Orders: r.Orders}
		switch {
		case r.Orders == 0:
			c.Skip = skipNothingToArchive
		case !r.Reported:
			c.Skip = SkipNotReported
		case r.EventsPending:
			c.Skip = SkipEventsPending
		case r.ReturnsPending:
			c.Skip = SkipReturnsPending
		case r.UnpaidOrders:
			c.Skip = SkipUnpaidOrders
		case r.OpenCases:
			c.Skip = SkipOpenCases
		}
		if c.Skip != skipNothingToArchive {
			out = append(out, c)
		}
	}
	return out, nil
}

// orderColumns are the columns orders and orders_archive share, in one order for both.
const orderColumns = `id, request_id, user_id, session_id, prize_id, status, reason, per_user_limit, slot,
	admitted_at, created_at, event_published_at, paid_at, cancelled_at, bucket`

// archivedOrderValues selects orderColumns from orders for the archive. An order whose event
// went out from memory (the batch path, recorded by its partition's progress, which the
// archive does not carry) is archived with its commit time as its publication time: only
// published orders are archived, and that is when its batch published it, give or take
// stampAfter.
var archivedOrderValues = strings.Replace(orderColumns, "event_published_at", "COALESCE(event_published_at, created_at)", 1)

// Move archives one session×prize's orders, batch rows per transaction, and returns how many
// moved. It first stamps the stock row archived_at in a transaction of its own, so every
// consumer transaction that could see an order gone from orders also reads orders_archive
// (each reads the stamp from the same snapshot as the orders). Running it again after an
// interruption moves what is left.
func (a *Archive) Move(ctx context.Context, sessionID, prizeID int64, batch int, now time.Time) (int64, error) {
	if batch < 1 {
		return 0, fmt.Errorf("archive batch %d: want at least 1", batch)
	}
	db := a.db.WithContext(ctx)
	if err := db.Exec(`UPDATE session_stocks SET archived_at = ? WHERE session_id = ? AND prize_id = ? AND archived_at IS NULL`,
		now.UTC(), sessionID, prizeID).Error; err != nil {
		return 0, fmt.Errorf("archive session %d prize %d: stamp stock row: %w", sessionID, prizeID, err)
	}
	var moved int64
	for {
		n, err := a.moveBatch(ctx, sessionID, prizeID, batch, now)
		moved += n
		if err != nil {
			return moved, fmt.Errorf("archive session %d prize %d: %w", sessionID, prizeID, err)
		}
		if n < int64(batch) {
			return moved, nil
		}
	}
}

// moveBatch copies up to batch orders (the lowest ids) with their events and returns into
// the archive tables and deletes them from the hot ones, in one transaction.
func (a *Archive) moveBatch(ctx context.Context, sessionID, prizeID int64, batch int, now time.Time) (int64, error) {
	var n int64
	err := a.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var ids []int64
		if err := tx.Raw(`SELECT id FROM orders WHERE session_id = ? AND prize_id = ? ORDER BY id LIMIT ? FOR UPDATE`,
			sessionID, prizeID, batch).Scan(&ids).Error; err != nil {
			return fmt.Errorf("lock batch: %w", err)
		}
		if len(ids) == 0 {
			return nil
		}
		steps := []struct{ what, sql string }{
			{"copy orders", `INSERT INTO orders_archive (` + orderColumns + `, archived_at)
				SELECT ` + archivedOrderValues + `, ? FROM orders WHERE id IN ?`},
			{"copy order events", `INSERT INTO order_events_archive (id, event_id, order_id, type, reason, occurred_at, published_at)
				SELECT id, event_id, order_id, type, reason, occurred_at, published_at FROM order_events WHERE order_id IN ?`},
			{"copy stock returns", `INSERT INTO stock_returns_archive (order_id, request_id, user_id, session_id, prize_id, reason,
					release_slot, resale, returned_at, redis_done_at)
				SELECT order_id, request_id, user_id, session_id, prize_id, reason, release_slot, resale, returned_at, redis_done_at
				FROM stock_returns WHERE order_id IN ?`},
			{"delete order events", `DELETE FROM order_events WHERE order_id IN ?`},
			{"delete stock returns", `DELETE FROM stock_returns WHERE order_id IN ?`},
		}
		for i, s := range steps {
			args := []any{ids}
			if i == 0 {
				args = []any{now.UTC(), ids}
			}
			if err := tx.Exec(s.sql, args...).Error; err != nil {
				return fmt.Errorf("%s: %w", s.what, err)
			}
		}
		del := tx.Exec(`DELETE FROM orders WHERE id IN ?`, ids)
		if del.Error != nil {
			return fmt.Errorf("delete orders: %w", del.Error)
		}
		if del.RowsAffected != int64(len(ids)) {
			return fmt.Errorf("deleted %d orders of %d locked", del.RowsAffected, len(ids))
		}
		n = int64(len(ids))
		return nil
	})
	return n, err
}

// archivedOrders returns the archived orders of the given request ids.
func archivedOrders(db *gorm.DB, requestIDs []string) ([]orderRow, error) {
	var rows []orderRow
	if len(requestIDs) == 0 {
		return rows, nil
	}
	err := db.Raw(`SELECT `+orderColumns+` FROM orders_archive WHERE request_id IN ?`, requestIDs).Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("archived orders by request id: %w", err)
	}
	return rows, nil
}

// TableSize is what information_schema says one table takes.
type TableSize struct {
	Rows        int64 // an estimate for InnoDB (ANALYZE TABLE refreshes it)
	DataBytes   int64
	IndexBytes  int64
	BytesPerRow float64
}

// SizeOf returns a table's size in the current database after refreshing its statistics.
// InnoDB counts whole 16 KiB pages, so only a table of some thousands of rows gives a
// meaningful figure per row.
func SizeOf(ctx context.Context, db *gorm.DB, table string) (TableSize, error) {
	if err := db.WithContext(ctx).Exec("ANALYZE TABLE `" + table + "`").Error; err != nil {
		return TableSize{}, fmt.Errorf("analyze %s: %w", table, err)
	}
	var s TableSize
	err := db.WithContext(ctx).Raw(`SELECT TABLE_ROWS, DATA_LENGTH, INDEX_LENGTH FROM information_schema.TABLES
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?`, table).Row().Scan(&s.Rows, &s.DataBytes, &s.IndexBytes)
	if err != nil {
		return TableSize{}, fmt.Errorf("size of %s: %w", table, err)
	}
	if s.Rows > 0 {
		s.BytesPerRow = float64(s.DataBytes+s.IndexBytes) / float64(s.Rows)
	}
	return s, nil
}
