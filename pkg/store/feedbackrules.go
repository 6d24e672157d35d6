package store

import (
	"fmt"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// feedbackAction is what one report does to its order.
type feedbackAction int

const (
	feedbackRecordCase  feedbackAction = iota // an exception case (Case, Detail); the order is not changed
	feedbackDuplicate                         // the order already is what the report says
	feedbackRedelivered                       // a cancellation of a cancelled order: a duplicate whose Redis step may still be pending
	feedbackPay                               // stamp the succeeded order paid
	feedbackRefund                            // paid after it was cancelled: a refund event and a case, unless the event was sent before
	feedbackNotDue                            // the payment timeout's: paid meanwhile, or the creation event was published too late
	feedbackCancel                            // cancel the order and give its unit back
)

// feedbackDecision is decideFeedback's answer.
type feedbackDecision struct {
	Action feedbackAction
	Case   string // the exception case kind, for feedbackRecordCase and feedbackRefund
	Detail string // the case's detail
}

// decideFeedback says what report it does to order r of session×prize k, as the
// transaction locked r and the batch's earlier reports left it (nil: no order has the
// request id). It reads nothing else: every rule of ApplyFeedback is this one switch, and
// applyFeedback only carries the answer out.
func decideFeedback(k seckill.SessionPrize, it seckill.Feedback, r *orderRow) feedbackDecision {
	if r == nil || r.SessionID != k.Session || r.PrizeID != k.Prize {
		return feedbackDecision{feedbackRecordCase, seckill.CaseUnknownOrder, fmt.Sprintf("%s: no order has this request id", it.Kind)}
	}
	status := seckill.OrderStatus(r.Status)
	switch {
	case status == seckill.OrderRejected:
		return feedbackDecision{feedbackRecordCase, seckill.CaseNotSucceeded, fmt.Sprintf("%s for an order rejected (%s)", it.Kind, r.Reason)}

	case it.Kind == seckill.FeedbackPaid && status == seckill.OrderSucceeded && r.PaidAt != nil:
		return feedbackDecision{Action: feedbackDuplicate}
	case it.Kind == seckill.FeedbackPaid && status == seckill.OrderSucceeded:
		return feedbackDecision{Action: feedbackPay}
	case it.Kind == seckill.FeedbackPaid: // cancelled: answered by a refund event, never revived
		return feedbackDecision{feedbackRefund, seckill.CasePaidAfterCancel, fmt.Sprintf("paid after it was cancelled (%s); refund event sent", r.Reason)}

	case status == seckill.OrderCancelled:
		return feedbackDecision{Action: feedbackRedelivered}
	case r.PaidAt != nil && !it.DueBefore.IsZero():
		return feedbackDecision{Action: feedbackNotDue} // paid meanwhile: nothing to time out
	case r.PaidAt != nil:
		return feedbackDecision{feedbackRecordCase, seckill.CaseCancelAfterPaid, fmt.Sprintf("cancelled (%s) after it was paid; kept paid", it.Reason)}
	case !it.DueBefore.IsZero() && (r.EventPublishedAt == nil || !r.EventPublishedAt.Before(it.DueBefore)):
		// The timeout counts from the creation event's publication: before it, downstream
		// had not heard of the order and could not collect payment.
		return feedbackDecision{Action: feedbackNotDue}
	default:
		return feedbackDecision{Action: feedbackCancel}
	}
}
