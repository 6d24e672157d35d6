package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

type orderRow struct {
	ID        int64 `gorm:"primaryKey"`
	RequestID string
	UserID    string
	SessionID int64
	PrizeID   int64
	// Bucket is the stock bucket whose row the order's unit came from (docs/design.md):
	// 0, the session_stocks row, for a prize without buckets.
	Bucket       int
	Status       string
	Reason       string
	PerUserLimit int
	Slot         *int
	AdmittedAt   time.Time
	CreatedAt    time.Time
	// EventPublishedAt is set once the order's event is on the order topic.
	EventPublishedAt *time.Time
	// GrabPartition and GrabSeq are set on orders the consumer publishes from memory: the
	// grab partition and the batch sequence number its progress row counts (see
	// EventProgress). NULL on the stamp path.
	GrabPartition *int
	GrabSeq       *int64
	// PaidAt and CancelledAt are read-only here: the batched INSERT of the hot path leaves
	// them out (NULL), and only ApplyFeedback's conditional UPDATEs set them.
	PaidAt      *time.Time `gorm:"->"`
	CancelledAt *time.Time `gorm:"->"`
	// TraceContext is the W3C traceparent of the span that persisted the order (migration
	// 0014), NULL when its purchase was not traced.
	TraceContext *string
}

func (orderRow) TableName() string { return "orders" }

func (r orderRow) domain() seckill.Order {
	return seckill.Order{ID: r.ID, RequestID: r.RequestID, UserID: r.UserID, SessionID: r.SessionID,
		PrizeID: r.PrizeID, Bucket: r.Bucket, Status: seckill.OrderStatus(r.Status), Reason: seckill.Reason(r.Reason),
		AdmittedAt: r.AdmittedAt.UTC(), CreatedAt: r.CreatedAt.UTC(),
		PaidAt: utc(r.PaidAt), CancelledAt: utc(r.CancelledAt), HoldsSlot: r.Slot != nil, TraceParent: traceParent(r.TraceContext)}
}

// traceParent is a stored trace context, "" for NULL.
func traceParent(stored *string) string {
	if stored == nil {
		return ""
	}
	return *stored
}

// traceContext is what an order stores of a trace context: NULL for none.
func traceContext(traceParent string) *string {
	if traceParent == "" {
		return nil
	}
	return &traceParent
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// Orders reads and writes orders.
type Orders struct {
	db        *gorm.DB
	afterRead func(ctx context.Context, sessionID, prizeID int64)
}

// Option configures Orders.
type Option func(*Orders)

// WithAfterRead calls fn inside every Persist transaction right after the stock row was
// read, before the conditional update: the place a concurrent writer causes an optimistic
// conflict. For fault injection in tests and the chaos harness only.
func WithAfterRead(fn func(ctx context.Context, sessionID, prizeID int64)) Option {
	return func(o *Orders) { o.afterRead = fn }
}

// NewOrders returns Orders on db.
func NewOrders(db *gorm.DB, opts ...Option) *Orders {
	o := &Orders{db: db}
	for _, opt := range opts {
		opt(o)
	}
	return o
}

// ByRequestID returns the order of a request id, from orders or, once its session was
// archived, orders_archive; or seckill.ErrNotFound.
func (o *Orders) ByRequestID(ctx context.Context, requestID string) (seckill.Order, error) {
	var row orderRow
	err := first(o.db.WithContext(ctx).Where("request_id = ?", requestID), &row)
	if errors.Is(err, seckill.ErrNotFound) {
		var archived []orderRow
		if archived, err = archivedOrders(o.db.WithContext(ctx), []string{requestID}); err == nil {
			if len(archived) == 0 {
				err = seckill.ErrNotFound
			} else {
				row = archived[0]
			}
		}
	}
	if err != nil {
		return seckill.Order{}, fmt.Errorf("order %s: %w", requestID, err)
	}
	return row.domain(), nil
}

// Existing returns the orders that exist for the given request ids.
func (o *Orders) Existing(ctx context.Context, requestIDs []string) (map[string]seckill.Order, error) {
	out := make(map[string]seckill.Order, len(requestIDs))
	for i := 0; i < len(requestIDs); i += 1000 {
		var rows []orderRow
		chunk := requestIDs[i:min(i+1000, len(requestIDs))]
		if err := o.db.WithContext(ctx).Where("request_id IN ?", chunk).Find(&rows).Error; err != nil {
			return nil, fmt.Errorf("orders by request id: %w", err)
		}
		for _, r := range rows {
			out[r.RequestID] = r.domain()
		}
		// Ids not in orders may belong to an archived session: one more query, only then.
		var missing []string
		for _, id := range chunk {
			if _, ok := out[id]; !ok {
				missing = append(missing, id)
			}
		}
		archived, err := archivedOrders(o.db.WithContext(ctx), missing)
		if err != nil {
			return nil, err
		}
		for _, r := range archived {
			out[r.RequestID] = r.domain()
		}
	}
	return out, nil
}

// ForStock returns every order of a session×prize.
func (o *Orders) ForStock(ctx context.Context, sessionID, prizeID int64) ([]seckill.Order, error) {
	var rows []orderRow
	if err := o.db.WithContext(ctx).Where("session_id = ? AND prize_id = ?", sessionID, prizeID).Order("id").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("orders of session %d prize %d: %w", sessionID, prizeID, err)
	}
	out := make([]seckill.Order, len(rows))
	for i, r := range rows {
		out[i] = r.domain()
	}
	return out, nil
}

// Counts is how many orders a session×prize has by state.
type Counts struct {
	Succeeded int
	Rejected  int
	Cancelled int
}

// CountsFor returns a session×prize's order counts.
func (o *Orders) CountsFor(ctx context.Context, sessionID, prizeID int64) (Counts, error) {
	var rows []struct {
		Status string
		N      int
	}
	err := o.db.WithContext(ctx).Raw(`SELECT status, COUNT(*) AS n FROM orders WHERE session_id = ? AND prize_id = ? GROUP BY status`,
		sessionID, prizeID).Scan(&rows).Error
	if err != nil {
		return Counts{}, fmt.Errorf("order counts: %w", err)
	}
	var c Counts
	for _, r := range rows {
		switch seckill.OrderStatus(r.Status) {
		case seckill.OrderSucceeded:
			c.Succeeded = r.N
		case seckill.OrderCancelled:
			c.Cancelled = r.N
		default:
			c.Rejected += r.N
		}
	}
	return c, nil
}
