package event

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// FeedbackV1 is the feedback event schema version this code reads and writes.
const FeedbackV1 = 1

// Feedback event types: what a downstream order system reports about an order.
const (
	FeedbackPaid      = "order.paid"
	FeedbackCancelled = "order.cancelled"
)

// feedbackEvent is the feedback topic's JSON payload (schema v1), written by downstream
// order systems, keyed by the order's request id.
type feedbackEvent struct {
	V          *int      `json:"v"`
	Type       string    `json:"type"`
	RequestID  string    `json:"request_id"`
	Reason     string    `json:"reason,omitempty"`
	OccurredAt time.Time `json:"occurred_at"`
}

// EncodeFeedback returns the feedback topic's message for f (what a downstream system
// writes; the pipeline uses it in tests and the chaos harness).
func EncodeFeedback(f seckill.Feedback) (kafka.Message, error) {
	v := FeedbackV1
	e := feedbackEvent{V: &v, RequestID: f.RequestID, Reason: string(f.Reason), OccurredAt: f.At.UTC()}
	switch f.Kind {
	case seckill.FeedbackPaid:
		e.Type = FeedbackPaid
	case seckill.FeedbackCancelled:
		e.Type = FeedbackCancelled
	default:
		return kafka.Message{}, fmt.Errorf("encode feedback %s: unknown kind %q", f.RequestID, f.Kind)
	}
	b, err := json.Marshal(e)
	if err != nil {
		return kafka.Message{}, fmt.Errorf("encode feedback %s: %w", f.RequestID, err)
	}
	return kafka.Message{Key: []byte(f.RequestID), Value: b,
		Headers: []kafka.Header{{Key: "schema", Value: []byte("order-feedback.v1")}}}, nil
}

// DecodeFeedback parses a feedback event and checks it: a known version, a known type, a
// request id the pipeline could have made, a reason only with a cancellation and then one of
// the downstream reasons, a time. Anything else is poison (ErrMalformed, ErrUnknownVersion).
// Fields it does not know are ignored.
func DecodeFeedback(value []byte) (seckill.Feedback, error) {
	var e feedbackEvent
	if err := json.Unmarshal(value, &e); err != nil {
		return seckill.Feedback{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if e.V == nil {
		return seckill.Feedback{}, fmt.Errorf("%w: no schema version", ErrMalformed)
	}
	if *e.V != FeedbackV1 {
		return seckill.Feedback{}, fmt.Errorf("%w: %d", ErrUnknownVersion, *e.V)
	}
	f := seckill.Feedback{RequestID: e.RequestID, Reason: seckill.Reason(e.Reason), At: e.OccurredAt.UTC()}
	switch e.Type {
	case FeedbackPaid:
		f.Kind = seckill.FeedbackPaid
		if e.Reason != "" {
			return seckill.Feedback{}, fmt.Errorf("%w: a reason on %s", ErrMalformed, e.Type)
		}
	case FeedbackCancelled:
		f.Kind = seckill.FeedbackCancelled
		if !seckill.DownstreamCancelReason(f.Reason) {
			return seckill.Feedback{}, fmt.Errorf("%w: cancellation reason %q", ErrMalformed, e.Reason)
		}
	default:
		return seckill.Feedback{}, fmt.Errorf("%w: type %q", ErrMalformed, e.Type)
	}
	if _, _, _, err := seckill.ParseRequestID(e.RequestID); err != nil {
		return seckill.Feedback{}, fmt.Errorf("%w: request id %q", ErrMalformed, e.RequestID)
	}
	if e.OccurredAt.IsZero() {
		return seckill.Feedback{}, fmt.Errorf("%w: no occurred_at", ErrMalformed)
	}
	return f, nil
}
