package event

import (
	"errors"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

func TestFeedbackRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 29, 10, 5, 0, 123456789, time.UTC)
	for _, f := range []seckill.Feedback{
		{RequestID: seckill.RequestID(12, 3, "0193a6b2-key"), Kind: seckill.FeedbackPaid, At: at},
		{RequestID: seckill.RequestID(12, 3, "0193a6b2-key"), Kind: seckill.FeedbackCancelled, Reason: seckill.ReasonBuyerCancelled, At: at},
	} {
		m, err := EncodeFeedback(f)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Key) != f.RequestID || len(m.Headers) != 1 || string(m.Headers[0].Value) != "order-feedback.v1" {
			t.Fatalf("key %q headers %v", m.Key, m.Headers)
		}
		got, err := DecodeFeedback(m.Value)
		if err != nil || got != f {
			t.Fatalf("decoded %+v, %v; want %+v", got, err, f)
		}
	}
}

func TestDecodeFeedbackPoison(t *testing.T) {
	const at = `"occurred_at":"2026-11-29T10:00:00Z"`
	tests := []struct {
		name, value string
		want        error
	}{
		{"not json", `{{{`, ErrMalformed},
		{"no version", `{"type":"order.paid","request_id":"1-2-abcdefgh",` + at + `}`, ErrMalformed},
		{"future version", `{"v":2,"type":"order.paid","request_id":"1-2-abcdefgh",` + at + `}`, ErrUnknownVersion},
		{"unknown type", `{"v":1,"type":"order.shipped","request_id":"1-2-abcdefgh",` + at + `}`, ErrMalformed},
		{"bad request id", `{"v":1,"type":"order.paid","request_id":"1-02-abcdefgh",` + at + `}`, ErrMalformed},
		{"cancelled without reason", `{"v":1,"type":"order.cancelled","request_id":"1-2-abcdefgh",` + at + `}`, ErrMalformed},
		{"cancelled for the pipeline's own reason", `{"v":1,"type":"order.cancelled","reason":"payment_timeout","request_id":"1-2-abcdefgh",` + at + `}`, ErrMalformed},
		{"cancelled for an unknown reason", `{"v":1,"type":"order.cancelled","reason":"bored","request_id":"1-2-abcdefgh",` + at + `}`, ErrMalformed},
		{"paid with a reason", `{"v":1,"type":"order.paid","reason":"buyer_cancelled","request_id":"1-2-abcdefgh",` + at + `}`, ErrMalformed},
		{"no time", `{"v":1,"type":"order.paid","request_id":"1-2-abcdefgh"}`, ErrMalformed},
		{"wrong field type", `{"v":1,"type":"order.paid","request_id":12,` + at + `}`, ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := DecodeFeedback([]byte(tc.value)); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	// Fields a newer producer adds are ignored (additive changes keep v1).
	if _, err := DecodeFeedback([]byte(`{"v":1,"type":"order.paid","request_id":"1-2-abcdefgh","channel":"app",` + at + `}`)); err != nil {
		t.Fatalf("an additional field: %v", err)
	}
}

func TestFollowEvents(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	o := seckill.Order{ID: 9, RequestID: "7-3-alice-key-0001", UserID: "alice", SessionID: 7, PrizeID: 3,
		Status: seckill.OrderCancelled, Reason: seckill.ReasonPaymentTimeout, AdmittedAt: now, CreatedAt: now}
	for _, tc := range []struct {
		typ, reason, id string
	}{
		{OrderCancelled, "payment_timeout", "order:7-3-alice-key-0001:cancelled"},
		{OrderRefundRequired, "paid_after_cancel", "order:7-3-alice-key-0001:refund_required"},
	} {
		ev := NewFollowEvent(o, tc.typ, tc.reason, now.Add(time.Minute))
		if ev.V != OrderV2 || ev.EventID != tc.id || ev.Type != tc.typ || ev.Reason != tc.reason ||
			ev.OccurredAt == nil || !ev.OccurredAt.Equal(now.Add(time.Minute)) || ev.Schema() != "order.v2" {
			t.Fatalf("%s: %+v", tc.typ, ev)
		}
	}
	if s := NewOrderEvent(o).Schema(); s != "order.v1" {
		t.Fatalf("creation event schema %s", s)
	}
}
