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
	db *gorm.DB
}

// NewOrders returns Orders on db.
func NewOrders(db *gorm.DB) *Orders { return &Orders{db: db} }

// ByRequestID returns the order of a request id, or seckill.ErrNotFound.
func (o *Orders) ByRequestID(ctx context.Context, requestID string) (seckill.Order, error) {
	var row orderRow
	if err := first(o.db.WithContext(ctx).Where("request_id = ?", requestID), &row); err != nil {
		return seckill.Order{}, fmt.Errorf("order %s: %w", requestID, err)
	}
	return row.domain(), nil
}
