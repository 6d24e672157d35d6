package store

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

type orderRow struct {
	ID           int64 `gorm:"primaryKey"`
	RequestID    string
	UserID       string
	SessionID    int64
	PrizeID      int64
	Status       string
	Reason       string
	PerUserLimit int
	Slot         *int
	AdmittedAt   time.Time
	CreatedAt    time.Time
}

func (orderRow) TableName() string { return "orders" }

func (r orderRow) domain() seckill.Order {
	return seckill.Order{ID: r.ID, RequestID: r.RequestID, UserID: r.UserID, SessionID: r.SessionID,
		PrizeID: r.PrizeID, Status: seckill.OrderStatus(r.Status), Reason: seckill.Reason(r.Reason),
		AdmittedAt: r.AdmittedAt.UTC(), CreatedAt: r.CreatedAt.UTC()}
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

// ByRequestID returns the order of a request id, or seckill.ErrNotFound.
func (o *Orders) ByRequestID(ctx context.Context, requestID string) (seckill.Order, error) {
	var row orderRow
	if err := first(o.db.WithContext(ctx).Where("request_id = ?", requestID), &row); err != nil {
		return seckill.Order{}, fmt.Errorf("order %s: %w", requestID, err)
	}
	return row.domain(), nil
}
