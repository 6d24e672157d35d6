package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// Order event types that follow an order's creation, kept in the order_events outbox.
const (
	EventCancelled      = "order.cancelled"
	EventRefundRequired = "order.refund_required"
)

// StockReturn is a cancelled order's unit: back in MySQL's left_stock since the
// cancellation committed, and still to be recorded in Redis: given back for sale when Resale
// (the session was open), otherwise only the order's outcome (status polls say cancelled).
type StockReturn struct {
	OrderID     int64
	RequestID   string
	UserID      string
	SessionID   int64
	PrizeID     int64
	Reason      seckill.Reason
	ReleaseSlot bool   // the buyer may grab again: the per-user count goes down too
	Resale      bool   // the session was open: the unit goes back into Redis to be sold again
	Bucket      int    // the order's stock bucket (orders.bucket): the unit goes back to its keys
	Buckets     int    // the session×prize's N, which names the bucket's keys
	TraceParent string // the order's stored trace context (orders.trace_context), "" when none
}

// FeedbackOutcome is what one report did.
type FeedbackOutcome struct {
	Feedback seckill.Feedback
	Result   seckill.FeedbackResult
	Case     string // the exception case kind, for FeedbackException and FeedbackRefund
	OrderID  int64  // 0 when no order has the request id
	// TraceParent is the order's stored trace context (W3C traceparent), "" when none.
	TraceParent string
}

// FeedbackBatch is what ApplyFeedback did for one session×prize batch.
type FeedbackBatch struct {
	Outcomes []FeedbackOutcome // one per report, in order
	Returns  []StockReturn     // Redis steps to make: one per new cancellation, and redelivered ones not done yet

	// How many reports ended how.
	Paid, Cancelled, Refunds, Duplicates, Exceptions, NotDue int
}

// ApplyFeedback applies reports about orders of one session×prize, in order, in one
// transaction (fenced when f is not nil: the reconciler's payment timeout):
//   - the stock row is locked first (FOR UPDATE), then the reports' orders: the same order
//     Persist takes its locks in (stock row, then order rows), so the two cannot deadlock,
//     and concurrent reports on one order are applied one after the other;
//   - paid: a succeeded unpaid order is stamped paid; a cancelled one gets a refund event
//     (order.refund_required, once) and stays cancelled; a paid one is a duplicate;
//   - cancelled: a succeeded unpaid order becomes cancelled (conditional UPDATE), releases
//     its per-user slot when the activity lets the buyer grab again, gets one order.cancelled
//     event and one stock_returns row, and left_stock grows by one; a cancelled one is a
//     duplicate; a paid one is refused (an exception case), except for the payment timeout,
//     for which it is simply not due, as is an order whose creation event was not published
//     before the timeout's DueBefore;
//   - a request id without an order, or a rejected order, is an exception case.
//
// left_stock grows without a version bump: the consumer's conditional update compares the
// version and left_stock >= n, and a concurrent return only raises left_stock, so its
// update stays right and the hot path does not conflict with returns. Whether the unit is
// for resale (back into Redis) is decided by the session's window at now.
func (o *Orders) ApplyFeedback(ctx context.Context, f *lease.Fence, sessionID, prizeID int64, items []seckill.Feedback, now time.Time) (FeedbackBatch, error) {
	var res FeedbackBatch
	run := func(tx *gorm.DB) error {
		res = FeedbackBatch{}
		return applyFeedback(tx, sessionID, prizeID, items, now.UTC(), &res)
	}
	var err error
	if f != nil {
		err = fenced(ctx, o.db, *f, run)
	} else {
		err = o.db.WithContext(ctx).Transaction(run)
	}
	if err != nil {
		return FeedbackBatch{}, fmt.Errorf("apply feedback to session %d prize %d: %w", sessionID, prizeID, err)
	}
	return res, nil
}

func applyFeedback(tx *gorm.DB, sessionID, prizeID int64, items []seckill.Feedback, now time.Time, res *FeedbackBatch) error {
	k := seckill.SessionPrize{Session: sessionID, Prize: prizeID}
	w := &feedbackWrites{k: k, now: now, res: res}
	res.Outcomes = make([]FeedbackOutcome, len(items))
	for i, it := range items {
		res.Outcomes[i].Feedback = it
	}

	var st stockRow
	err := first(tx.Clauses(clause.Locking{Strength: "UPDATE"}).Where("session_id = ? AND prize_id = ?", sessionID, prizeID), &st)
	if errors.Is(err, seckill.ErrNotFound) {
		for i, it := range items {
			w.record(i, seckill.CaseUnknownOrder, 0, fmt.Sprintf("%s: no such session×prize", it.Kind))
		}
		return saveCases(tx, w.cases)
	}
	if err != nil {
		return fmt.Errorf("lock stock row: %w", err)
	}
	var window struct {
		StartsAt          time.Time
		EndsAt            time.Time
		ClosedAt          *time.Time
		RegrabAfterCancel bool
	}
	if err := tx.Raw(`SELECT s.starts_at, s.ends_at, s.closed_at, a.regrab_after_cancel
		FROM sessions s JOIN activities a ON a.id = s.activity_id WHERE s.id = ?`, sessionID).Scan(&window).Error; err != nil {
		return fmt.Errorf("read session %d: %w", sessionID, err)
	}
	w.regrab, w.n = window.RegrabAfterCancel, st.Buckets
	w.resale = seckill.Session{Start: window.StartsAt, End: window.EndsAt, ClosedAt: window.ClosedAt}.OpenAt(now)

	rids := make([]string, 0, len(items))
	for _, it := range items {
		rids = append(rids, it.RequestID)
	}
	var rows []orderRow
	if err := tx.Clauses(clause.Locking{Strength: "UPDATE"}).Where("request_id IN ?", rids).Find(&rows).Error; err != nil {
		return fmt.Errorf("lock orders: %w", err)
	}
	if err := publishedFromMemory(tx, rows); err != nil {
		return err
	}
	byRID := make(map[string]*orderRow, len(rows))
	for i := range rows {
		byRID[rows[i].RequestID] = &rows[i]
	}
	// In order: a report sees its order as the batch's earlier reports left it.
	for i, it := range items {
		r := byRID[it.RequestID]
		if err := w.apply(tx, i, r, decideFeedback(k, it, r)); err != nil {
			return err
		}
	}
	return w.write(tx, st.ID)
}

// feedbackWrites carries a batch's decisions out: it fills the batch's outcomes and
// collects the writes, so that each kind of write is one statement (write).
type feedbackWrites struct {
	k      seckill.SessionPrize
	now    time.Time
	regrab bool // the activity lets a buyer whose order was cancelled grab again
	resale bool // the session is open: a returned unit goes back on sale
	n      int  // the session×prize's N (stock buckets), which names a bucket's keys
	res    *FeedbackBatch

	paid, cancelled []int64
	cancelReason    []seckill.Reason // per cancelled
	cancelBucket    []int            // per cancelled: the order's stock bucket, whose row gets the unit
	redelivered     []int64          // cancellations of orders cancelled before this batch
	events          []orderEventRow
	returns         []returnRow
	cases           []exceptionRow
}

// record makes report i an exception case.
func (w *feedbackWrites) record(i int, kind string, orderID int64, detail string) {
	out := &w.res.Outcomes[i]
	out.Result, out.Case, out.OrderID = seckill.FeedbackException, kind, orderID
	w.res.Exceptions++
	sid, pid := w.k.Session, w.k.Prize
	w.cases = append(w.cases, exceptionRow{Kind: kind, RequestID: out.Feedback.RequestID, SessionID: &sid, PrizeID: &pid,
		Detail: detail, FirstSeenAt: w.now, LastSeenAt: w.now, Seen: 1})
}

// apply carries out decision d on report i and its order r (updated in place for the
// batch's later reports).
func (w *feedbackWrites) apply(tx *gorm.DB, i int, r *orderRow, d feedbackDecision) error {
	if d.Case == seckill.CaseUnknownOrder {
		w.record(i, d.Case, 0, d.Detail)
		return nil
	}
	out, it, res := &w.res.Outcomes[i], w.res.Outcomes[i].Feedback, w.res
	out.OrderID, out.TraceParent = r.ID, traceParent(r.TraceContext)
	switch d.Action {
	case feedbackRecordCase:
		w.record(i, d.Case, r.ID, d.Detail)
	case feedbackDuplicate:
		out.Result = seckill.FeedbackDuplicate
		res.Duplicates++
	case feedbackRedelivered:
		out.Result = seckill.FeedbackDuplicate
		res.Duplicates++
		if !containsID(w.cancelled, r.ID) {
			w.redelivered = append(w.redelivered, r.ID)
		}
	case feedbackPay:
		r.PaidAt = &w.now
		w.paid = append(w.paid, r.ID)
		out.Result = seckill.FeedbackApplied
		res.Paid++
	case feedbackRefund:
		id := "order:" + r.RequestID + ":refund_required"
		exists, err := eventExists(tx, id, w.events)
		if err != nil {
			return err
		}
		if exists {
			out.Result = seckill.FeedbackDuplicate
			res.Duplicates++
			return nil
		}
		w.events = append(w.events, orderEventRow{EventID: id, OrderID: r.ID, Type: EventRefundRequired,
			Reason: string(seckill.CasePaidAfterCancel), OccurredAt: w.now})
		sid, pid := w.k.Session, w.k.Prize
		w.cases = append(w.cases, exceptionRow{Kind: d.Case, RequestID: r.RequestID, UserID: r.UserID,
			SessionID: &sid, PrizeID: &pid, Detail: d.Detail, FirstSeenAt: w.now, LastSeenAt: w.now, Seen: 1})
		out.Result, out.Case = seckill.FeedbackRefund, d.Case
		res.Refunds++
	case feedbackNotDue:
		out.Result = seckill.FeedbackNotDue
		res.NotDue++
	case feedbackCancel:
		r.Status, r.Reason, r.CancelledAt = string(seckill.OrderCancelled), string(it.Reason), &w.now
		w.cancelled = append(w.cancelled, r.ID)
		w.cancelReason = append(w.cancelReason, it.Reason)
		w.cancelBucket = append(w.cancelBucket, r.Bucket)
		w.events = append(w.events, orderEventRow{EventID: "order:" + r.RequestID + ":cancelled", OrderID: r.ID,
			Type: EventCancelled, Reason: string(it.Reason), OccurredAt: w.now})
		ret := returnRow{OrderID: r.ID, RequestID: r.RequestID, UserID: r.UserID, SessionID: w.k.Session, PrizeID: w.k.Prize,
			Reason: string(it.Reason), ReleaseSlot: w.regrab, Resale: w.resale, ReturnedAt: w.now, Bucket: r.Bucket, Buckets: w.n,
			TraceContext: r.TraceContext}
		w.returns = append(w.returns, ret)
		res.Returns = append(res.Returns, ret.domain())
		out.Result = seckill.FeedbackApplied
		res.Cancelled++
	default:
		return fmt.Errorf("feedback decision %d not handled", d.Action)
	}
	return nil
}

// write makes the collected writes; each conditional UPDATE must match every row it was
// given, or the transaction fails (seckill.ErrConflict).
func (w *feedbackWrites) write(tx *gorm.DB, stockID int64) error {
	now := w.now
	if len(w.paid) > 0 {
		upd := tx.Exec("UPDATE orders SET paid_at = ? WHERE id IN ? AND status = 'succeeded' AND paid_at IS NULL", now, w.paid)
		if upd.Error != nil {
			return fmt.Errorf("stamp orders paid: %w", upd.Error)
		}
		if upd.RowsAffected != int64(len(w.paid)) {
			return fmt.Errorf("stamp %d orders paid: %d matched: %w", len(w.paid), upd.RowsAffected, seckill.ErrConflict)
		}
	}
	if len(w.cancelled) > 0 {
		// One UPDATE per reason (a batch usually has one or two).
		byReason := map[seckill.Reason][]int64{}
		for i, id := range w.cancelled {
			byReason[w.cancelReason[i]] = append(byReason[w.cancelReason[i]], id)
		}
		slot := "slot"
		if w.regrab {
			slot = "NULL"
		}
		for reason, ids := range byReason {
			upd := tx.Exec(`UPDATE orders SET status = 'cancelled', reason = ?, cancelled_at = ?, slot = `+slot+`
				WHERE id IN ? AND status = 'succeeded' AND paid_at IS NULL`, string(reason), now, ids)
			if upd.Error != nil {
				return fmt.Errorf("cancel orders: %w", upd.Error)
			}
			if upd.RowsAffected != int64(len(ids)) {
				return fmt.Errorf("cancel %d orders: %d matched: %w", len(ids), upd.RowsAffected, seckill.ErrConflict)
			}
		}
		// Each unit goes back to the row of the bucket that sold it (bucket 0: the stock row).
		perBucket := map[int]int{}
		for _, b := range w.cancelBucket {
			perBucket[b]++
		}
		if n := perBucket[0]; n > 0 {
			upd := tx.Exec("UPDATE session_stocks SET left_stock = left_stock + ?, updated_at = ? WHERE id = ?", n, now, stockID)
			if upd.Error != nil {
				return fmt.Errorf("return %d units: %w", n, upd.Error)
			}
		}
		for b, n := range perBucket {
			if b == 0 {
				continue
			}
			upd := tx.Exec("UPDATE stock_buckets SET left_stock = left_stock + ?, updated_at = ? WHERE session_id = ? AND prize_id = ? AND bucket = ?",
				n, now, w.k.Session, w.k.Prize, b)
			if upd.Error != nil {
				return fmt.Errorf("return %d units to bucket %d: %w", n, b, upd.Error)
			}
			if upd.RowsAffected != 1 {
				return fmt.Errorf("return %d units to bucket %d of session %d prize %d: no such bucket", n, b, w.k.Session, w.k.Prize)
			}
		}
		if err := tx.Create(&w.returns).Error; err != nil {
			return fmt.Errorf("record stock returns: %w", err)
		}
	}
	if len(w.events) > 0 {
		if err := tx.Create(&w.events).Error; err != nil {
			return fmt.Errorf("order events: %w", err)
		}
	}
	// A redelivered cancellation whose Redis step never ran (the process died between the
	// commit and the script) hands that step back, so a redelivery completes it at once
	// instead of waiting for the reconciler's sweep. The script is idempotent per request id.
	if len(w.redelivered) > 0 {
		var pending []returnRow
		if err := withBucket(tx).Where("stock_returns.order_id IN ? AND stock_returns.redis_done_at IS NULL", w.redelivered).Find(&pending).Error; err != nil {
			return fmt.Errorf("read pending stock returns: %w", err)
		}
		for _, r := range pending {
			w.res.Returns = append(w.res.Returns, r.domain())
		}
	}
	return saveCases(tx, w.cases)
}

func containsID(ids []int64, id int64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// eventExists reports whether the outbox (or this batch) already has event id.
func eventExists(tx *gorm.DB, id string, batch []orderEventRow) (bool, error) {
	for _, e := range batch {
		if e.EventID == id {
			return true, nil
		}
	}
	var n int64
	if err := tx.Model(&orderEventRow{}).Where("event_id = ?", id).Count(&n).Error; err != nil {
		return false, fmt.Errorf("read order event %s: %w", id, err)
	}
	return n > 0, nil
}

// Unpaid returns up to limit request ids of a session×prize's succeeded orders that are not
// paid and were created before cutoff, oldest first (the session report waits while any is
// left). The payment timeout's candidates are DueUnpaid's.
func (o *Orders) Unpaid(ctx context.Context, sessionID, prizeID int64, cutoff time.Time, limit int) ([]string, error) {
	var rids []string
	err := o.db.WithContext(ctx).Raw(`SELECT request_id FROM orders
		WHERE session_id = ? AND prize_id = ? AND status = 'succeeded' AND paid_at IS NULL AND created_at < ?
		ORDER BY id LIMIT ?`, sessionID, prizeID, cutoff.UTC(), limit).Scan(&rids).Error
	if err != nil {
		return nil, fmt.Errorf("unpaid orders of session %d prize %d: %w", sessionID, prizeID, err)
	}
	return rids, nil
}

// DueOrder is a payment timeout candidate: a succeeded order not paid.
type DueOrder struct {
	ID        int64
	RequestID string
}

// DueUnpaid returns up to limit of a session×prize's succeeded unpaid orders whose creation
// event the relay published before cutoff, with an id above after, in id order: the payment
// timeout's candidates, paged by id so that the ones a run defers do not hide the rest. An
// order whose event is not published yet is never among them, however old: downstream has
// not heard of it and could not collect payment.
func (o *Orders) DueUnpaid(ctx context.Context, sessionID, prizeID int64, cutoff time.Time, after int64, limit int) ([]DueOrder, error) {
	var out []DueOrder
	// An order published from memory (grab_seq below its partition's progress) has no stamp:
	// its event went out right after the commit, so its clock starts at created_at. Orders a
	// recovery published are stamped then.
	err := o.db.WithContext(ctx).Raw(`SELECT o.id, o.request_id FROM orders o
		WHERE o.session_id = ? AND o.prize_id = ? AND o.status = 'succeeded' AND o.paid_at IS NULL
		AND (o.event_published_at < ? OR (o.event_published_at IS NULL AND o.created_at < ? AND `+publishedSQL+`))
		AND o.id > ?
		ORDER BY o.id LIMIT ?`, sessionID, prizeID, cutoff.UTC(), cutoff.UTC(), after, limit).Scan(&out).Error
	if err != nil {
		return nil, fmt.Errorf("due unpaid orders of session %d prize %d: %w", sessionID, prizeID, err)
	}
	return out, nil
}

// CountUnpublishedUnpaid returns how many of a session×prize's succeeded unpaid orders were
// stored before cutoff and still wait for the relay to publish their creation event: the
// payment timeouts a relay that is behind defers.
func (o *Orders) CountUnpublishedUnpaid(ctx context.Context, sessionID, prizeID int64, cutoff time.Time) (int64, error) {
	var n int64
	err := o.db.WithContext(ctx).Raw(`SELECT COUNT(*) FROM orders o
		WHERE o.session_id = ? AND o.prize_id = ? AND o.status = 'succeeded' AND o.paid_at IS NULL
		AND o.created_at < ? AND NOT `+publishedSQL, sessionID, prizeID, cutoff.UTC()).Scan(&n).Error
	if err != nil {
		return 0, fmt.Errorf("unpublished unpaid orders of session %d prize %d: %w", sessionID, prizeID, err)
	}
	return n, nil
}

// StockState is a session×prize as MySQL holds it at one instant: its stock row, its orders
// and which cancelled orders gave their unit back for resale (into Redis).
type StockState struct {
	Stock  seckill.Stock
	Orders []seckill.Order
	Resale map[string]bool // request id -> the cancelled order's unit was for resale
}

// State reads a session×prize's stock row, orders and returns in one transaction, so all
// three come from one snapshot: a cancellation committing meanwhile is either wholly in it
// (left_stock raised, order cancelled, return recorded) or not at all. The reconciler's
// rebuild copies Redis from it.
func (o *Orders) State(ctx context.Context, sessionID, prizeID int64) (StockState, error) {
	return o.state(ctx, sessionID, prizeID, -1)
}

// BucketState is State for stock bucket b of a session×prize with buckets (docs/design.md):
// the bucket's row (with the prize's per-user limit), the orders it admitted
// (orders.bucket) and their returns, from one snapshot. Bucket 0 is the session_stocks row.
func (o *Orders) BucketState(ctx context.Context, sessionID, prizeID int64, b int) (StockState, error) {
	if b < 0 {
		return StockState{}, fmt.Errorf("state of session %d prize %d: bucket %d", sessionID, prizeID, b)
	}
	return o.state(ctx, sessionID, prizeID, b)
}

// state reads the whole prize (bucket < 0) or one bucket.
func (o *Orders) state(ctx context.Context, sessionID, prizeID int64, bucket int) (StockState, error) {
	var out StockState
	err := o.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		out = StockState{Resale: map[string]bool{}}
		var st stockRow
		if err := first(tx.Where("session_id = ? AND prize_id = ?", sessionID, prizeID), &st); err != nil {
			return fmt.Errorf("stock of session %d prize %d: %w", sessionID, prizeID, err)
		}
		out.Stock = st.domain()
		orders := tx.Where("session_id = ? AND prize_id = ?", sessionID, prizeID)
		returns := tx.Where("session_id = ? AND prize_id = ?", sessionID, prizeID)
		if bucket >= 0 {
			bs, err := readBuckets(tx, sessionID, prizeID)
			if err != nil {
				return err
			}
			if bucket >= len(bs) {
				return fmt.Errorf("stock of session %d prize %d: bucket %d of %d: %w", sessionID, prizeID, bucket, len(bs), gorm.ErrRecordNotFound)
			}
			out.Stock.Total, out.Stock.Left, out.Stock.Version = bs[bucket].Total, bs[bucket].Left, bs[bucket].Version
			orders = orders.Where("bucket = ?", bucket)
			returns = returns.Where("order_id IN (?)", tx.Model(&orderRow{}).Select("id").
				Where("session_id = ? AND prize_id = ? AND bucket = ?", sessionID, prizeID, bucket))
		}
		var rows []orderRow
		if err := orders.Order("id").Find(&rows).Error; err != nil {
			return fmt.Errorf("orders of session %d prize %d: %w", sessionID, prizeID, err)
		}
		out.Orders = make([]seckill.Order, len(rows))
		for i, r := range rows {
			out.Orders[i] = r.domain()
		}
		var rets []returnRow
		if err := returns.Find(&rets).Error; err != nil {
			return fmt.Errorf("returns of session %d prize %d: %w", sessionID, prizeID, err)
		}
		for _, r := range rets {
			out.Resale[r.RequestID] = r.Resale
		}
		return nil
	})
	return out, err
}

type orderEventRow struct {
	ID          int64 `gorm:"primaryKey"`
	EventID     string
	OrderID     int64
	Type        string
	Reason      string
	OccurredAt  time.Time
	PublishedAt *time.Time
}

func (orderEventRow) TableName() string { return "order_events" }

type returnRow struct {
	OrderID     int64 `gorm:"primaryKey;autoIncrement:false"`
	RequestID   string
	UserID      string
	SessionID   int64
	PrizeID     int64
	Reason      string
	ReleaseSlot bool
	Resale      bool
	ReturnedAt  time.Time
	RedisDoneAt *time.Time
	// Bucket is the order's stock bucket, read with withBucket (not a column of the table).
	Bucket int `gorm:"->"`
	// Buckets is the session×prize's N, read with withBucket from its stock row.
	Buckets int `gorm:"->"`
	// TraceContext is the order's, read with withBucket (not a column of the table).
	TraceContext *string `gorm:"->"`
}

func (returnRow) TableName() string { return "stock_returns" }

func (r returnRow) domain() StockReturn {
	return StockReturn{OrderID: r.OrderID, RequestID: r.RequestID, UserID: r.UserID, SessionID: r.SessionID,
		PrizeID: r.PrizeID, Reason: seckill.Reason(r.Reason), ReleaseSlot: r.ReleaseSlot, Resale: r.Resale, Bucket: r.Bucket, Buckets: r.Buckets,
		TraceParent: traceParent(r.TraceContext)}
}

// withBucket reads stock returns with their order's stock bucket (stock_returns has no
// column of its own: the order row says; an order moved to the archive long after its
// session counts as bucket 0, its keys being gone anyway) and the prize's N, which names
// the bucket's keys. Columns are named with their table.
func withBucket(db *gorm.DB) *gorm.DB {
	return db.Table("stock_returns").Select("stock_returns.*, COALESCE(o.bucket, 0) AS bucket, COALESCE(ss.buckets, 1) AS buckets, o.trace_context").
		Joins("LEFT JOIN orders o ON o.id = stock_returns.order_id").
		Joins("LEFT JOIN session_stocks ss ON ss.session_id = stock_returns.session_id AND ss.prize_id = stock_returns.prize_id")
}

// Returns reads and stamps the stock returns (the stock_returns table).
type Returns struct {
	db *gorm.DB
}

// NewReturns returns Returns on db.
func NewReturns(db *gorm.DB) *Returns { return &Returns{db: db} }

// PendingRedis returns up to limit returns whose Redis step is not known to have run (a
// crash between the cancelling commit and the script, Redis down or without the keys),
// oldest first.
func (r *Returns) PendingRedis(ctx context.Context, limit int) ([]StockReturn, error) {
	var rows []returnRow
	if err := withBucket(r.db.WithContext(ctx)).Where("stock_returns.redis_done_at IS NULL").Order("stock_returns.order_id").Limit(limit).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("pending redis returns: %w", err)
	}
	out := make([]StockReturn, len(rows))
	for i, row := range rows {
		out[i] = row.domain()
	}
	return out, nil
}

// PendingPrize is a session×prize with returns whose Redis step is still to make.
type PendingPrize struct {
	SessionID, PrizeID int64
	Pending            int
}

// PendingRedisPrizes returns every session×prize with returns whose Redis step is still to
// make, the one with the oldest such return first. The sweep pages per prize from it, so a
// prize whose returns keep failing (its keys missing, its script erroring) cannot hold the
// others behind its own oldest rows.
func (r *Returns) PendingRedisPrizes(ctx context.Context) ([]PendingPrize, error) {
	var rows []PendingPrize
	err := r.db.WithContext(ctx).Raw(`SELECT session_id, prize_id, COUNT(*) AS pending FROM stock_returns
		WHERE redis_done_at IS NULL GROUP BY session_id, prize_id ORDER BY MIN(order_id)`).Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("prizes with pending redis returns: %w", err)
	}
	return rows, nil
}

// PendingRedisOf returns up to limit returns of one session×prize whose Redis step is not
// known to have run, oldest first.
func (r *Returns) PendingRedisOf(ctx context.Context, sessionID, prizeID int64, limit int) ([]StockReturn, error) {
	var rows []returnRow
	err := withBucket(r.db.WithContext(ctx)).Where("stock_returns.session_id = ? AND stock_returns.prize_id = ? AND stock_returns.redis_done_at IS NULL", sessionID, prizeID).
		Order("stock_returns.order_id").Limit(limit).Find(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("pending redis returns of session %d prize %d: %w", sessionID, prizeID, err)
	}
	out := make([]StockReturn, len(rows))
	for i, row := range rows {
		out[i] = row.domain()
	}
	return out, nil
}

// DoneForResale returns, by request id, the order ids of one session×prize's returns for
// resale whose Redis step is stamped done: each of their request ids was in the prize's
// returned hash when it was stamped (the script writes it before the stamp).
func (r *Returns) DoneForResale(ctx context.Context, sessionID, prizeID int64) (map[string]int64, error) {
	var rows []returnRow
	err := r.db.WithContext(ctx).Select("order_id", "request_id").
		Where("session_id = ? AND prize_id = ? AND resale AND redis_done_at IS NOT NULL", sessionID, prizeID).
		Find(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("done redis returns of session %d prize %d: %w", sessionID, prizeID, err)
	}
	out := make(map[string]int64, len(rows))
	for _, row := range rows {
		out[row.RequestID] = row.OrderID
	}
	return out, nil
}

// DoneForResaleInBucket is DoneForResale of the orders stock bucket b sold (orders.bucket):
// their request ids are in that bucket's returned hash.
func (r *Returns) DoneForResaleInBucket(ctx context.Context, sessionID, prizeID int64, b int) (map[string]int64, error) {
	var rows []returnRow
	err := withBucket(r.db.WithContext(ctx)).Where(`stock_returns.session_id = ? AND stock_returns.prize_id = ? AND stock_returns.resale
		AND stock_returns.redis_done_at IS NOT NULL AND COALESCE(o.bucket, 0) = ?`, sessionID, prizeID, b).Find(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("done redis returns of session %d prize %d bucket %d: %w", sessionID, prizeID, b, err)
	}
	out := make(map[string]int64, len(rows))
	for _, row := range rows {
		out[row.RequestID] = row.OrderID
	}
	return out, nil
}

// ClearRedisDone removes the done stamp of returns (by order id) whose Redis effect was
// lost (a Redis failover lost the script's write), so the sweep makes their Redis step
// again; the step is at most once per request id, so clearing too much costs a round trip.
func (r *Returns) ClearRedisDone(ctx context.Context, orderIDs []int64) error {
	if len(orderIDs) == 0 {
		return nil
	}
	err := r.db.WithContext(ctx).Model(&returnRow{}).Where("order_id IN ? AND redis_done_at IS NOT NULL", orderIDs).
		Update("redis_done_at", nil).Error
	if err != nil {
		return fmt.Errorf("clear redis done stamps: %w", err)
	}
	return nil
}

// CountPendingRedis returns how many returns wait for their Redis step (a metric).
func (r *Returns) CountPendingRedis(ctx context.Context) (int64, error) {
	var n int64
	err := r.db.WithContext(ctx).Model(&returnRow{}).Where("redis_done_at IS NULL").Count(&n).Error
	return n, err
}

// MarkRedisDone stamps returns (by order id) whose Redis step ran or was found done.
func (r *Returns) MarkRedisDone(ctx context.Context, orderIDs []int64, at time.Time) error {
	if len(orderIDs) == 0 {
		return nil
	}
	err := r.db.WithContext(ctx).Model(&returnRow{}).Where("order_id IN ? AND redis_done_at IS NULL", orderIDs).
		Update("redis_done_at", at.UTC()).Error
	if err != nil {
		return fmt.Errorf("stamp redis returns done: %w", err)
	}
	return nil
}

// CountsFor returns how many units of a session×prize came back while its session was open
// (for resale) and after it ended (MySQL only).
func (r *Returns) CountsFor(ctx context.Context, sessionID, prizeID int64) (resale, afterEnd int, err error) {
	var rows []struct {
		Resale bool
		N      int
	}
	err = r.db.WithContext(ctx).Raw(`SELECT resale, COUNT(*) AS n FROM stock_returns WHERE session_id = ? AND prize_id = ? GROUP BY resale`,
		sessionID, prizeID).Scan(&rows).Error
	if err != nil {
		return 0, 0, fmt.Errorf("stock returns of session %d prize %d: %w", sessionID, prizeID, err)
	}
	for _, row := range rows {
		if row.Resale {
			resale = row.N
		} else {
			afterEnd = row.N
		}
	}
	return resale, afterEnd, nil
}

// truncate keeps a detail within its column.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

// publishedFromMemory sets, in memory only, the publication time of rows the consumer
// published from memory (no stamp, grab_seq below its partition's progress) to their
// created_at: the payment timeout's rule (decideFeedback) counts from the publication, and
// such an event went out right after its order's commit.
func publishedFromMemory(tx *gorm.DB, rows []orderRow) error {
	parts := map[int]bool{}
	for _, r := range rows {
		if r.EventPublishedAt == nil && r.GrabPartition != nil {
			parts[*r.GrabPartition] = true
		}
	}
	if len(parts) == 0 {
		return nil
	}
	ids := make([]int, 0, len(parts))
	for p := range parts {
		ids = append(ids, p)
	}
	var progress []struct {
		GrabPartition int
		NextSeq       int64
	}
	if err := tx.Raw("SELECT grab_partition, next_seq FROM order_event_progress WHERE grab_partition IN ?", ids).
		Scan(&progress).Error; err != nil {
		return fmt.Errorf("read order event progress: %w", err)
	}
	next := make(map[int]int64, len(progress))
	for _, p := range progress {
		next[p.GrabPartition] = p.NextSeq
	}
	for i, r := range rows {
		if r.EventPublishedAt == nil && r.GrabPartition != nil && *r.GrabSeq < next[*r.GrabPartition] {
			at := r.CreatedAt
			rows[i].EventPublishedAt = &at
		}
	}
	return nil
}
