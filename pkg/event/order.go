package event

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// OrderV1 is the order event schema version.
const OrderV1 = 1

// Order event types.
const (
	OrderCreated  = "order.created"
	OrderRejected = "order.rejected"
)

// OrderEvent is the order topic's JSON payload (schema v1), one per order. Downstream can
// rely on: at-least-once delivery, EventID stable across redeliveries (dedupe on it), and
// all events of one order on one partition in order (key = request id).
type OrderEvent struct {
	V          int       `json:"v"`
	EventID    string    `json:"event_id"`
	Type       string    `json:"type"`
	OrderID    int64     `json:"order_id"`
	RequestID  string    `json:"request_id"`
	UserID     string    `json:"user_id"`
	SessionID  int64     `json:"session_id"`
	PrizeID    int64     `json:"prize_id"`
	Reason     string    `json:"reason,omitempty"`
	AdmittedAt time.Time `json:"admitted_at"`
	CreatedAt  time.Time `json:"created_at"`
}

// OrderEventID is the stable id of an order's outcome event.
func OrderEventID(requestID string, status seckill.OrderStatus) string {
	return "order:" + requestID + ":" + string(status)
}

// NewOrderEvent returns the event for a persisted order.
func NewOrderEvent(o seckill.Order) OrderEvent {
	typ := OrderCreated
	if o.Status == seckill.OrderRejected {
		typ = OrderRejected
	}
	return OrderEvent{V: OrderV1, EventID: OrderEventID(o.RequestID, o.Status), Type: typ, OrderID: o.ID,
		RequestID: o.RequestID, UserID: o.UserID, SessionID: o.SessionID, PrizeID: o.PrizeID,
		Reason: string(o.Reason), AdmittedAt: o.AdmittedAt.UTC(), CreatedAt: o.CreatedAt.UTC()}
}

// DecodeOrderEvent parses an order event.
func DecodeOrderEvent(b []byte) (OrderEvent, error) {
	var e OrderEvent
	if err := json.Unmarshal(b, &e); err != nil {
		return e, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if e.V != OrderV1 {
		return e, fmt.Errorf("%w: %d", ErrUnknownVersion, e.V)
	}
	return e, nil
}
