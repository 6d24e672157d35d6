package store

import (
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

func TestDecideFeedback(t *testing.T) {
	k := seckill.SessionPrize{Session: 7, Prize: 3}
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	before, due := t0.Add(-time.Minute), t0
	justBefore := due.Add(-time.Microsecond) // the closest MySQL's DATETIME(6) can be
	order := func(status seckill.OrderStatus, reason seckill.Reason, paid, published *time.Time) *orderRow {
		return &orderRow{ID: 1, RequestID: "7-3-key00001", SessionID: k.Session, PrizeID: k.Prize,
			Status: string(status), Reason: string(reason), PaidAt: paid, EventPublishedAt: published}
	}
	paid := seckill.Feedback{RequestID: "7-3-key00001", Kind: seckill.FeedbackPaid}
	cancel := seckill.Feedback{RequestID: "7-3-key00001", Kind: seckill.FeedbackCancelled, Reason: seckill.ReasonBuyerCancelled}
	timeout := seckill.Feedback{RequestID: "7-3-key00001", Kind: seckill.FeedbackCancelled, Reason: seckill.ReasonPaymentTimeout, DueBefore: due}
	otherPrize := order(seckill.OrderSucceeded, "", nil, nil)
	otherPrize.PrizeID = 4

	tests := []struct {
		name  string
		it    seckill.Feedback
		order *orderRow
		want  feedbackDecision
	}{
		{"no order", paid, nil,
			feedbackDecision{feedbackRecordCase, seckill.CaseUnknownOrder, "paid: no order has this request id"}},
		{"another prize's order", cancel, otherPrize,
			feedbackDecision{feedbackRecordCase, seckill.CaseUnknownOrder, "cancelled: no order has this request id"}},
		{"paid, rejected", paid, order(seckill.OrderRejected, seckill.ReasonSoldOut, nil, nil),
			feedbackDecision{feedbackRecordCase, seckill.CaseNotSucceeded, "paid for an order rejected (sold_out)"}},
		{"cancelled, rejected", cancel, order(seckill.OrderRejected, seckill.ReasonLimit, nil, nil),
			feedbackDecision{feedbackRecordCase, seckill.CaseNotSucceeded, "cancelled for an order rejected (limit)"}},
		{"paid, unpaid", paid, order(seckill.OrderSucceeded, "", nil, &before), feedbackDecision{Action: feedbackPay}},
		{"paid, paid", paid, order(seckill.OrderSucceeded, "", &before, &before), feedbackDecision{Action: feedbackDuplicate}},
		{"paid, cancelled", paid, order(seckill.OrderCancelled, seckill.ReasonPaymentTimeout, nil, &before),
			feedbackDecision{feedbackRefund, seckill.CasePaidAfterCancel, "paid after it was cancelled (payment_timeout); refund event sent"}},
		{"cancelled, unpaid", cancel, order(seckill.OrderSucceeded, "", nil, nil), feedbackDecision{Action: feedbackCancel}},
		{"cancelled, cancelled", cancel, order(seckill.OrderCancelled, seckill.ReasonBuyerCancelled, nil, &before),
			feedbackDecision{Action: feedbackRedelivered}},
		{"cancelled, paid", cancel, order(seckill.OrderSucceeded, "", &before, &before),
			feedbackDecision{feedbackRecordCase, seckill.CaseCancelAfterPaid, "cancelled (buyer_cancelled) after it was paid; kept paid"}},
		{"timeout, published before due", timeout, order(seckill.OrderSucceeded, "", nil, &before), feedbackDecision{Action: feedbackCancel}},
		// The payment timeout's boundary (reconciler's paymentCutoff is DueBefore): strictly
		// before. Published exactly at the cut-off, the deadline is the run's instant: not due.
		{"timeout, published 1 µs before due", timeout, order(seckill.OrderSucceeded, "", nil, &justBefore), feedbackDecision{Action: feedbackCancel}},
		{"timeout, published at due", timeout, order(seckill.OrderSucceeded, "", nil, &due), feedbackDecision{Action: feedbackNotDue}},
		{"timeout, not published", timeout, order(seckill.OrderSucceeded, "", nil, nil), feedbackDecision{Action: feedbackNotDue}},
		{"timeout, paid meanwhile", timeout, order(seckill.OrderSucceeded, "", &before, &before), feedbackDecision{Action: feedbackNotDue}},
		{"timeout, cancelled", timeout, order(seckill.OrderCancelled, seckill.ReasonBuyerCancelled, nil, &before),
			feedbackDecision{Action: feedbackRedelivered}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := decideFeedback(k, tc.it, tc.order); got != tc.want {
				t.Errorf("decideFeedback = %+v, want %+v", got, tc.want)
			}
		})
	}
}
