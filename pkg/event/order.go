package event

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// Order event schema versions. v1 is an order's creation (created or rejected), unchanged;
// v2 adds the events that follow it (cancelled, refund required), which a v1 reader has
// never seen and must set aside rather than guess (the compatibility policy: a new type is a
// new version).
const (
	OrderV1 = 1
	OrderV2 = 2
)

// Order event types.
const (
	OrderCreated        = "order.created"  // v1
	OrderRejected       = "order.rejected" // v1
	OrderCancelled      = "order.cancelled"
	OrderRefundRequired = "order.refund_required" // paid after the pipeline cancelled the order
)

// OrderEvent is the order topic's JSON payload (schema v1), one per order. Downstream can
// rely on: at-least-once delivery, EventID stable across redeliveries (dedupe on it), and
// all events of one order on one partition in order (key = request id).
type OrderEvent struct {
	V         int    `json:"v"`
	EventID   string `json:"event_id"`
	Type      string `json:"type"`
	OrderID   int64  `json:"order_id"`
	RequestID string `json:"request_id"`
	UserID    string `json:"user_id"`
	SessionID int64  `json:"session_id"`
	PrizeID   int64  `json:"prize_id"`
	// Bucket is the stock bucket the order's unit came from (docs/design.md), written only
	// for buckets 1 and up: absent is bucket 0, which is also a prize without buckets, so
	// every event of a prize without buckets stays byte for byte what it was. Additive: the
	// version does not change.
	Bucket int `json:"bucket,omitempty"`
	// Source is "draw" for an order whose unit a draw gave (package draw: its request id is
	// the draw's for its user), absent for a grab's. Additive, like Bucket.
	Source     string    `json:"source,omitempty"`
	Reason     string    `json:"reason,omitempty"`
	AdmittedAt time.Time `json:"admitted_at"`
	CreatedAt  time.Time `json:"created_at"`
	// OccurredAt (v2) is when the cancellation, or the late payment, was applied.
	OccurredAt *time.Time `json:"occurred_at,omitempty"`
}

// Schema is the value of the event's schema header.
func (e OrderEvent) Schema() string {
	return fmt.Sprintf("order.v%d", e.V)
}

// NewFollowEvent returns the v2 event that follows an order's creation: typ is
// OrderCancelled (reason: why) or OrderRefundRequired (reason paid_after_cancel), with the
// stable id "order:<request id>:cancelled" or ":refund_required".
func NewFollowEvent(o seckill.Order, typ, reason string, at time.Time) OrderEvent {
	suffix := "cancelled"
	if typ == OrderRefundRequired {
		suffix = "refund_required"
	}
	occurred := at.UTC()
	return OrderEvent{V: OrderV2, EventID: "order:" + o.RequestID + ":" + suffix, Type: typ, OrderID: o.ID,
		RequestID: o.RequestID, UserID: o.UserID, SessionID: o.SessionID, PrizeID: o.PrizeID, Bucket: o.Bucket, Reason: reason,
		Source: sourceOf(o.RequestID), AdmittedAt: o.AdmittedAt.UTC(), CreatedAt: o.CreatedAt.UTC(), OccurredAt: &occurred}
}

// OrderEventID is the stable id of an order's outcome event.
func OrderEventID(requestID string, status seckill.OrderStatus) string {
	return "order:" + requestID + ":" + string(status)
}

// NewOrderEvent returns the creation event (v1) of a persisted order: order.created for an
// order that succeeded when it was stored, order.rejected otherwise. A cancelled order was a
// succeeded one: its creation event is order.created, whatever happened since.
func NewOrderEvent(o seckill.Order) OrderEvent {
	typ, status, reason := OrderCreated, seckill.OrderSucceeded, ""
	if o.Status == seckill.OrderRejected {
		typ, status, reason = OrderRejected, seckill.OrderRejected, string(o.Reason)
	}
	return OrderEvent{V: OrderV1, EventID: OrderEventID(o.RequestID, status), Type: typ, OrderID: o.ID,
		RequestID: o.RequestID, UserID: o.UserID, SessionID: o.SessionID, PrizeID: o.PrizeID, Bucket: o.Bucket,
		Reason: reason, Source: sourceOf(o.RequestID), AdmittedAt: o.AdmittedAt.UTC(), CreatedAt: o.CreatedAt.UTC()}
}

// SourceDraw is an order event's Source for an order a draw gave.
const SourceDraw = "draw"

func sourceOf(requestID string) string {
	if seckill.IsDrawRequestID(requestID) {
		return SourceDraw
	}
	return ""
}

// DecodeOrderEvent parses an order event of either version.
func DecodeOrderEvent(b []byte) (OrderEvent, error) {
	var e OrderEvent
	if err := json.Unmarshal(b, &e); err != nil {
		return e, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if e.V != OrderV1 && e.V != OrderV2 {
		return e, fmt.Errorf("%w: %d", ErrUnknownVersion, e.V)
	}
	return e, nil
}
