package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// Catalog stores activities, their sessions and prizes, and each session×prize's stock row.
type Catalog struct {
	db  *gorm.DB
	now func() time.Time
}

// NewCatalog returns a Catalog on db; now is the clock used for timestamps and the
// "session has not started" rule.
func NewCatalog(db *gorm.DB, now func() time.Time) *Catalog {
	return &Catalog{db: db, now: now}
}

// CreateActivity validates a, materialises its sessions and stock rows, and stores
// everything in one transaction: either the whole activity exists afterwards or none of it.
func (c *Catalog) CreateActivity(ctx context.Context, a seckill.Activity) (seckill.Activity, error) {
	if err := a.Validate(); err != nil {
		return seckill.Activity{}, err
	}
	windows, err := seckill.Schedule(a.WindowStart, a.WindowEnd, a.Interval, a.SessionLength)
	if err != nil {
		return seckill.Activity{}, err
	}
	now := c.now().UTC()
	row := activityRow{
		Name: a.Name, WindowStart: a.WindowStart.UTC(), WindowEnd: a.WindowEnd.UTC(),
		IntervalMs: a.Interval.Milliseconds(), SessionMs: a.SessionLength.Milliseconds(),
		PerUserLimit: a.PerUserLimit, Status: string(seckill.ActivityActive), CreatedAt: now,
		PaymentTimeoutMs: a.PaymentTimeout.Milliseconds(), RegrabAfterCancel: a.RegrabAfterCancel,
	}
	var prizes []seckill.Prize
	err = c.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&row).Error; err != nil {
			return fmt.Errorf("insert activity: %w", err)
		}
		prows := make([]prizeRow, len(a.Prizes))
		for i, p := range a.Prizes {
			admission := p.Admission
			if admission == "" {
				admission = seckill.AdmissionFCFS
			}
			prows[i] = prizeRow{ActivityID: row.ID, Name: p.Name, StockPerSession: p.StockPerSession, Buckets: max(p.Buckets, 1),
				Admission: string(admission), EntryWindowMs: p.EntryWindow.Milliseconds()}
		}
		if err := tx.Create(&prows).Error; err != nil {
			return fmt.Errorf("insert prizes: %w", err)
		}
		srows := make([]sessionRow, len(windows))
		for i, w := range windows {
			srows[i] = sessionRow{ActivityID: row.ID, Seq: i + 1, StartsAt: w.Start, EndsAt: w.End}
		}
		if err := tx.CreateInBatches(&srows, 500).Error; err != nil {
			return fmt.Errorf("insert sessions: %w", err)
		}
		stocks := make([]stockRow, 0, len(srows)*len(prows))
		for _, s := range srows {
			for _, p := range prows {
				stocks = append(stocks, stockRow{SessionID: s.ID, PrizeID: p.ID, Total: p.StockPerSession,
					LeftStock: p.StockPerSession, PerUserLimit: a.PerUserLimit, UpdatedAt: now})
			}
		}
		if err := tx.CreateInBatches(&stocks, 1000).Error; err != nil {
			return fmt.Errorf("insert stock rows: %w", err)
		}
		// Every session×prize's buckets exist before anything can read its stock, so its
		// N is fixed from the first preheat on (docs/design.md).
		for _, s := range srows {
			for _, p := range prows {
				if p.Buckets > 1 {
					if err := createBuckets(tx, now, s.ID, p.ID, p.Buckets); err != nil {
						return fmt.Errorf("create %d buckets of session %d prize %d: %w", p.Buckets, s.ID, p.ID, err)
					}
				}
			}
		}
		for _, p := range prows {
			prizes = append(prizes, p.domain())
		}
		return nil
	})
	if err != nil {
		return seckill.Activity{}, fmt.Errorf("create activity: %w", err)
	}
	return row.domain(prizes), nil
}

// Activities lists activities, newest first, with their prizes.
func (c *Catalog) Activities(ctx context.Context, limit int) ([]seckill.Activity, error) {
	var rows []activityRow
	if err := c.db.WithContext(ctx).Order("id DESC").Limit(limit).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("list activities: %w", err)
	}
	ids := make([]int64, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	prizes, err := c.prizesOf(ctx, ids...)
	if err != nil {
		return nil, err
	}
	out := make([]seckill.Activity, len(rows))
	for i, r := range rows {
		out[i] = r.domain(prizes[r.ID])
	}
	return out, nil
}

// Activity returns one activity with its prizes.
func (c *Catalog) Activity(ctx context.Context, id int64) (seckill.Activity, error) {
	var row activityRow
	if err := first(c.db.WithContext(ctx).Where("id = ?", id), &row); err != nil {
		return seckill.Activity{}, fmt.Errorf("activity %d: %w", id, err)
	}
	prizes, err := c.prizesOf(ctx, id)
	if err != nil {
		return seckill.Activity{}, err
	}
	return row.domain(prizes[id]), nil
}

func (c *Catalog) prizesOf(ctx context.Context, activityIDs ...int64) (map[int64][]seckill.Prize, error) {
	out := map[int64][]seckill.Prize{}
	if len(activityIDs) == 0 {
		return out, nil
	}
	var rows []prizeRow
	if err := c.db.WithContext(ctx).Where("activity_id IN ?", activityIDs).Order("id").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("list prizes: %w", err)
	}
	for _, r := range rows {
		out[r.ActivityID] = append(out[r.ActivityID], r.domain())
	}
	return out, nil
}

// Sessions lists an activity's sessions in schedule order.
func (c *Catalog) Sessions(ctx context.Context, activityID int64) ([]seckill.Session, error) {
	var rows []sessionRow
	if err := c.db.WithContext(ctx).Where("activity_id = ?", activityID).Order("seq").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("sessions of activity %d: %w", activityID, err)
	}
	return sessionsDomain(rows), nil
}

// Session returns one session.
func (c *Catalog) Session(ctx context.Context, id int64) (seckill.Session, error) {
	var row sessionRow
	if err := first(c.db.WithContext(ctx).Where("id = ?", id), &row); err != nil {
		return seckill.Session{}, fmt.Errorf("session %d: %w", id, err)
	}
	return row.domain(), nil
}

// SessionsOverlapping returns the sessions that are open at some point in [from, to):
// the gateway caches them to answer "not open" without Redis, and the scheduler preheats
// the ones starting soon.
func (c *Catalog) SessionsOverlapping(ctx context.Context, from, to time.Time) ([]seckill.Session, error) {
	var rows []sessionRow
	err := c.db.WithContext(ctx).
		Where("starts_at < ? AND ends_at > ?", to.UTC(), from.UTC()).
		Order("starts_at, id").Limit(10000).Find(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("sessions in [%s, %s): %w", from, to, err)
	}
	return sessionsDomain(rows), nil
}

func sessionsDomain(rows []sessionRow) []seckill.Session {
	out := make([]seckill.Session, len(rows))
	for i, r := range rows {
		out[i] = r.domain()
	}
	return out
}

// Stocks returns the stock rows of the given sessions, ordered by session and prize.
func (c *Catalog) Stocks(ctx context.Context, sessionIDs ...int64) ([]seckill.Stock, error) {
	if len(sessionIDs) == 0 {
		return nil, nil
	}
	var rows []stockRow
	if err := c.db.WithContext(ctx).Where("session_id IN ?", sessionIDs).Order("session_id, prize_id").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("stock rows: %w", err)
	}
	out := make([]seckill.Stock, len(rows))
	for i, r := range rows {
		out[i] = r.domain()
	}
	return out, nil
}

// CloseSession ends a session early: from now on it is not open. Closing a closed or ended
// session is a no-op that returns the session as it is. The audit row names the actor and
// the address (remote) the request came from.
func (c *Catalog) CloseSession(ctx context.Context, id int64, actor, remote string) (seckill.Session, error) {
	now := c.now().UTC()
	var out seckill.Session
	err := c.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var row sessionRow
		if err := first(tx.Clauses(clause.Locking{Strength: "UPDATE"}).Where("id = ?", id), &row); err != nil {
			return fmt.Errorf("session %d: %w", id, err)
		}
		if row.ClosedAt == nil && now.Before(row.EndsAt) {
			row.ClosedAt = &now
			if err := tx.Model(&sessionRow{}).Where("id = ?", id).Update("closed_at", now).Error; err != nil {
				return fmt.Errorf("close session %d: %w", id, err)
			}
			sid := id
			if err := tx.Create(&auditRow{At: now, Actor: actor, RemoteAddr: truncate(remote, 64), Action: "close_session", SessionID: &sid,
				Detail: "closed early"}).Error; err != nil {
				return fmt.Errorf("audit: %w", err)
			}
		}
		out = row.domain()
		return nil
	})
	return out, err
}

// ErrStarted is returned when a change is only allowed before a session starts.
var ErrStarted = errors.New("session has started")

// StockMirror is a copy of a stock row outside MySQL that must change with it: the Redis
// gate of a preheated session. AdjustStock drives it.
type StockMirror interface {
	// Apply makes the copy hold after. It runs inside the adjustment's transaction, with
	// the row locked, before the commit; an error rolls the adjustment back.
	Apply(ctx context.Context, s seckill.Session, after seckill.Stock) error
	// Revert undoes an Apply whose transaction did not commit, back to before. It runs with
	// the row locked again; it must change only what Apply wrote for after.
	Revert(ctx context.Context, s seckill.Session, before, after seckill.Stock) error
}

// AdjustStock sets a session×prize's stock to total before the session starts, writes an
// audit row with the old and new totals, the reason, the actor and the address (remote) the
// request came from, and applies the change to mirror
// (nil: MySQL only) in the same transaction.
//
// The order is what makes the two agree. MySQL's checks and update run first, with the row
// locked; then the mirror; then the commit. A mirror that refuses (grabs were already
// admitted in Redis) rolls MySQL back, so nothing changed anywhere. The other way round,
// MySQL committed first and Redis refusing afterwards would leave MySQL with a total Redis
// never admits against, and a crash in between the same. The one remaining gap, a commit
// that fails (or whose reply is lost) after the mirror changed, is closed under the row
// lock again: if MySQL does not hold the new row, the mirror is reverted; a concurrent
// adjustment cannot slip in between, since it needs the same lock.
func (c *Catalog) AdjustStock(ctx context.Context, sessionID, prizeID int64, total int, actor, remote, reason string, mirror StockMirror) (before, after seckill.Stock, err error) {
	if total < 0 || total > seckill.MaxStock {
		return before, after, seckill.ValidationError{{Field: "total", Message: fmt.Sprintf("must be 0 to %d", seckill.MaxStock)}}
	}
	now := c.now().UTC()
	var sess seckill.Session
	mirrored := false
	err = c.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var srow sessionRow
		if err := first(tx.Where("id = ?", sessionID), &srow); err != nil {
			return fmt.Errorf("session %d: %w", sessionID, err)
		}
		sess = srow.domain()
		if !now.Before(srow.StartsAt) {
			return fmt.Errorf("adjust stock of session %d: %w", sessionID, ErrStarted)
		}
		var row stockRow
		if err := first(tx.Clauses(clause.Locking{Strength: "UPDATE"}).
			Where("session_id = ? AND prize_id = ?", sessionID, prizeID), &row); err != nil {
			return fmt.Errorf("stock of session %d prize %d: %w", sessionID, prizeID, err)
		}
		before = row.domain()
		if row.Buckets > 1 {
			return fmt.Errorf("stock of session %d prize %d has %d buckets: %w", sessionID, prizeID, row.Buckets, ErrBucketed)
		}
		if row.LeftStock != row.Total {
			// Orders exist before the start: something is wrong; refuse rather than guess.
			return fmt.Errorf("stock of session %d prize %d already has orders: %w", sessionID, prizeID, seckill.ErrConflict)
		}
		res := tx.Model(&stockRow{}).Where("id = ? AND version = ?", row.ID, row.Version).
			Updates(map[string]any{"total": total, "left_stock": total, "version": gorm.Expr("version + 1"), "updated_at": now})
		if res.Error != nil {
			return fmt.Errorf("update stock: %w", res.Error)
		}
		if res.RowsAffected != 1 {
			return fmt.Errorf("stock of session %d prize %d changed concurrently: %w", sessionID, prizeID, seckill.ErrConflict)
		}
		sid, pid, b, a := sessionID, prizeID, int64(row.Total), int64(total)
		if err := tx.Create(&auditRow{At: now, Actor: actor, RemoteAddr: truncate(remote, 64), Action: "adjust_stock", SessionID: &sid, PrizeID: &pid,
			BeforeValue: &b, AfterValue: &a, Detail: reason}).Error; err != nil {
			return fmt.Errorf("audit: %w", err)
		}
		after = before
		after.Total, after.Left, after.Version = total, total, row.Version+1
		if mirror == nil {
			return nil
		}
		// From here the mirror may have changed even if Apply fails (a lost reply).
		mirrored = true
		if err := mirror.Apply(ctx, sess, after); err != nil {
			return fmt.Errorf("adjust stock of session %d prize %d: %w", sessionID, prizeID, err)
		}
		return nil
	})
	if err == nil || !mirrored {
		return before, after, err
	}
	committed, rerr := c.settleMirror(ctx, sess, before, after, mirror)
	switch {
	case rerr != nil:
		return before, after, errors.Join(err, rerr)
	case committed:
		return before, after, nil
	}
	return before, after, err
}

// settleMirror runs after an adjustment whose transaction reported an error once its
// mirror was (maybe) changed. With the row locked again it reads what MySQL holds: the new
// row means the commit went through after all (its reply was lost); the old row means it
// did not, and the mirror is reverted. A row changed by yet another adjustment was
// mirrored by that one, under the same lock: nothing to do.
func (c *Catalog) settleMirror(ctx context.Context, s seckill.Session, before, after seckill.Stock, mirror StockMirror) (committed bool, err error) {
	// The request's context may be what failed the adjustment (client gone, deadline).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err = c.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var row stockRow
		if err := first(tx.Clauses(clause.Locking{Strength: "UPDATE"}).
			Where("session_id = ? AND prize_id = ?", before.SessionID, before.PrizeID), &row); err != nil {
			return fmt.Errorf("stock of session %d prize %d: %w", before.SessionID, before.PrizeID, err)
		}
		switch row.Version {
		case after.Version:
			// Either ours, or another adjustment from the same row that was mirrored itself.
			committed = row.Total == after.Total
		case before.Version:
			if err := mirror.Revert(ctx, s, before, after); err != nil {
				return fmt.Errorf("revert the uncommitted adjustment of session %d prize %d (redis may hold total %d while mysql holds %d): %w",
					before.SessionID, before.PrizeID, after.Total, before.Total, err)
			}
		}
		return nil
	})
	return committed, err
}

// AuditEntry is one row of the audit log.
type AuditEntry struct {
	At    time.Time `json:"at"`
	Actor string    `json:"actor"`
	// RemoteAddr is the address an operator's change came from (none for the automation's
	// entries and for those recorded before it was).
	RemoteAddr string `json:"remote_addr,omitempty"`
	Action     string `json:"action"`
	SessionID  *int64 `json:"session_id,omitempty"`
	PrizeID    *int64 `json:"prize_id,omitempty"`
	Before     *int64 `json:"before,omitempty"`
	After      *int64 `json:"after,omitempty"`
	Detail     string `json:"detail"`
	// Fence, when set, makes the entry a fenced write: it commits only while the lease
	// (the reconciler's) is still held at this fencing number.
	Fence *lease.Fence `json:"-"`
}

// Audit returns the newest audit entries for a session (all sessions when sessionID is 0).
func (c *Catalog) Audit(ctx context.Context, sessionID int64, limit int) ([]AuditEntry, error) {
	q := c.db.WithContext(ctx).Order("id DESC").Limit(limit)
	if sessionID != 0 {
		q = q.Where("session_id = ?", sessionID)
	}
	var rows []auditRow
	if err := q.Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	out := make([]AuditEntry, len(rows))
	for i, r := range rows {
		out[i] = AuditEntry{At: r.At.UTC(), Actor: r.Actor, RemoteAddr: r.RemoteAddr, Action: r.Action, SessionID: r.SessionID,
			PrizeID: r.PrizeID, Before: r.BeforeValue, After: r.AfterValue, Detail: r.Detail}
	}
	return out, nil
}

// first loads one row or returns seckill.ErrNotFound.
func first(q *gorm.DB, dest any) error {
	err := q.Take(dest).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return seckill.ErrNotFound
	}
	return err
}

// Stock returns one session×prize's stock row.
func (c *Catalog) Stock(ctx context.Context, sessionID, prizeID int64) (seckill.Stock, error) {
	var row stockRow
	if err := first(c.db.WithContext(ctx).Where("session_id = ? AND prize_id = ?", sessionID, prizeID), &row); err != nil {
		return seckill.Stock{}, fmt.Errorf("stock of session %d prize %d: %w", sessionID, prizeID, err)
	}
	return row.domain(), nil
}

// PaymentTimeouts returns the payment timeout of each given session's activity (0: none).
func (c *Catalog) PaymentTimeouts(ctx context.Context, sessionIDs ...int64) (map[int64]time.Duration, error) {
	out := make(map[int64]time.Duration, len(sessionIDs))
	if len(sessionIDs) == 0 {
		return out, nil
	}
	var rows []struct {
		ID               int64
		PaymentTimeoutMs int64
	}
	err := c.db.WithContext(ctx).Raw(`SELECT s.id, a.payment_timeout_ms FROM sessions s
		JOIN activities a ON a.id = s.activity_id WHERE s.id IN ?`, sessionIDs).Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("payment timeouts: %w", err)
	}
	for _, r := range rows {
		out[r.ID] = time.Duration(r.PaymentTimeoutMs) * time.Millisecond
	}
	return out, nil
}

// StockWithReturns returns one session×prize's stock row and how many of its orders were
// cancelled (their units are back in left_stock), read in one statement: one snapshot, so a
// cancellation is counted in both or in neither.
func (c *Catalog) StockWithReturns(ctx context.Context, sessionID, prizeID int64) (seckill.Stock, int, error) {
	var rows []struct {
		Total, LeftStock, PerUserLimit, Cancelled int
		Version                                   int64
	}
	err := c.db.WithContext(ctx).Raw(`SELECT s.total, s.left_stock, s.per_user_limit, s.version,
		(SELECT COUNT(*) FROM stock_returns r WHERE r.session_id = s.session_id AND r.prize_id = s.prize_id) AS cancelled
		FROM session_stocks s WHERE s.session_id = ? AND s.prize_id = ?`, sessionID, prizeID).Scan(&rows).Error
	if err != nil {
		return seckill.Stock{}, 0, fmt.Errorf("stock of session %d prize %d: %w", sessionID, prizeID, err)
	}
	if len(rows) == 0 {
		return seckill.Stock{}, 0, fmt.Errorf("stock of session %d prize %d: %w", sessionID, prizeID, seckill.ErrNotFound)
	}
	r := rows[0]
	return seckill.Stock{SessionID: sessionID, PrizeID: prizeID, Total: r.Total, Left: r.LeftStock, Version: r.Version,
		PerUserLimit: r.PerUserLimit}, r.Cancelled, nil
}

// BucketWithReturns is StockWithReturns of stock bucket b of a session×prize with buckets
// (docs/design.md): the bucket's row (with the prize's per-user limit) and the units of the
// orders it admitted (orders.bucket) that were returned, in one statement.
func (c *Catalog) BucketWithReturns(ctx context.Context, sessionID, prizeID int64, b int) (seckill.Stock, int, error) {
	var rows []struct {
		Total, LeftStock, PerUserLimit, Cancelled int
		Version                                   int64
	}
	err := c.db.WithContext(ctx).Raw(`SELECT k.total, k.left_stock, s.per_user_limit, k.version,
		(SELECT COUNT(*) FROM stock_returns r JOIN orders o ON o.id = r.order_id
			WHERE r.session_id = s.session_id AND r.prize_id = s.prize_id AND o.bucket = ?) AS cancelled
		FROM session_stocks s
		JOIN (SELECT 0 AS bucket, total, left_stock, version FROM session_stocks WHERE session_id = ? AND prize_id = ?
			UNION ALL
			SELECT bucket, total, left_stock, version FROM stock_buckets WHERE session_id = ? AND prize_id = ?) k ON k.bucket = ?
		WHERE s.session_id = ? AND s.prize_id = ?`, b, sessionID, prizeID, sessionID, prizeID, b, sessionID, prizeID).Scan(&rows).Error
	if err != nil {
		return seckill.Stock{}, 0, fmt.Errorf("stock of session %d prize %d bucket %d: %w", sessionID, prizeID, b, err)
	}
	if len(rows) == 0 {
		return seckill.Stock{}, 0, fmt.Errorf("stock of session %d prize %d bucket %d: %w", sessionID, prizeID, b, seckill.ErrNotFound)
	}
	r := rows[0]
	return seckill.Stock{SessionID: sessionID, PrizeID: prizeID, Total: r.Total, Left: r.LeftStock, Version: r.Version,
		PerUserLimit: r.PerUserLimit}, r.Cancelled, nil
}

// Record appends an audit entry.
func (c *Catalog) Record(ctx context.Context, e AuditEntry) error {
	if e.At.IsZero() {
		e.At = c.now().UTC()
	}
	row := auditRow{At: e.At, Actor: e.Actor, RemoteAddr: truncate(e.RemoteAddr, 64), Action: e.Action, SessionID: e.SessionID, PrizeID: e.PrizeID,
		BeforeValue: e.Before, AfterValue: e.After, Detail: e.Detail}
	var err error
	if e.Fence != nil {
		err = fenced(ctx, c.db, *e.Fence, func(tx *gorm.DB) error { return tx.Create(&row).Error })
	} else {
		err = c.db.WithContext(ctx).Create(&row).Error
	}
	if err != nil {
		return fmt.Errorf("audit %s: %w", e.Action, err)
	}
	return nil
}

// SessionReport is the final account of one session×prize. Sold counts the orders still
// succeeded (total = left + sold); Cancelled the orders cancelled since, whose units came
// back: ReturnedForResale while the session was open (sold again if a buyer came),
// ReturnedAfterEnd after it (MySQL only).
type SessionReport struct {
	SessionID         int64 `json:"session_id"`
	PrizeID           int64 `json:"prize_id"`
	Total             int   `json:"total"`
	Sold              int   `json:"sold"`
	Left              int   `json:"left"`
	Rejected          int   `json:"rejected"`
	DriftCorrected    int   `json:"drift_corrected"`
	Cancelled         int   `json:"cancelled"`
	ReturnedForResale int   `json:"returned_for_resale"`
	ReturnedAfterEnd  int   `json:"returned_after_end"`
}

type reportRow struct {
	SessionID         int64 `gorm:"primaryKey"`
	PrizeID           int64 `gorm:"primaryKey"`
	Total             int
	Sold              int
	LeftStock         int
	Rejected          int
	DriftCorrected    int
	Cancelled         int
	ReturnedForResale int
	ReturnedAfterEnd  int
	ReportedAt        time.Time
}

func (reportRow) TableName() string { return "session_reports" }

// SaveReport stores a session×prize's final report once; it returns false when one existed.
// It is written under the reconciler's fence, so a reconciler that lost its lease cannot
// file a report computed from what it read before.
func (c *Catalog) SaveReport(ctx context.Context, f lease.Fence, r SessionReport) (bool, error) {
	var saved bool
	err := fenced(ctx, c.db, f, func(tx *gorm.DB) error {
		res := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&reportRow{
			SessionID: r.SessionID, PrizeID: r.PrizeID, Total: r.Total, Sold: r.Sold, LeftStock: r.Left,
			Rejected: r.Rejected, DriftCorrected: r.DriftCorrected, Cancelled: r.Cancelled,
			ReturnedForResale: r.ReturnedForResale, ReturnedAfterEnd: r.ReturnedAfterEnd, ReportedAt: c.now().UTC()})
		saved = res.RowsAffected == 1
		return res.Error
	})
	if err != nil {
		return false, fmt.Errorf("save report: %w", err)
	}
	return saved, nil
}

// Reported reports whether a session×prize has its final report.
func (c *Catalog) Reported(ctx context.Context, sessionID, prizeID int64) (bool, error) {
	var n int64
	err := c.db.WithContext(ctx).Model(&reportRow{}).Where("session_id = ? AND prize_id = ?", sessionID, prizeID).Count(&n).Error
	return n > 0, err
}

// DriftCorrections counts the reconciler's stock corrections of a session×prize.
func (c *Catalog) DriftCorrections(ctx context.Context, sessionID, prizeID int64) (int, error) {
	var n int64
	err := c.db.WithContext(ctx).Model(&auditRow{}).
		Where("session_id = ? AND prize_id = ? AND action = 'correct_redis_stock'", sessionID, prizeID).Count(&n).Error
	return int(n), err
}
