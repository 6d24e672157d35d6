package seckill

import "time"

// Cancellation reasons. Downstream order systems cancel with one of the first three; the
// pipeline itself cancels with ReasonPaymentTimeout.
const (
	ReasonBuyerCancelled    Reason = "buyer_cancelled"
	ReasonPaymentFailed     Reason = "payment_failed"
	ReasonMerchantCancelled Reason = "merchant_cancelled"
	ReasonPaymentTimeout    Reason = "payment_timeout"
)

// Payment timeout bounds: 0 turns the timeout off.
const (
	MinPaymentTimeout = time.Second
	MaxPaymentTimeout = 24 * time.Hour
)

// DownstreamCancelReason reports whether r is a reason a downstream order system may give
// for cancelling an order (payment_timeout is the pipeline's own).
func DownstreamCancelReason(r Reason) bool {
	switch r {
	case ReasonBuyerCancelled, ReasonPaymentFailed, ReasonMerchantCancelled:
		return true
	}
	return false
}

// FeedbackKind is what is reported about a stored order after its creation.
type FeedbackKind string

// Feedback kinds.
const (
	FeedbackPaid      FeedbackKind = "paid"
	FeedbackCancelled FeedbackKind = "cancelled"
)

// Feedback is one report about an order: paid or cancelled, from a downstream order system
// (the feedback topic) or from the pipeline's payment timeout.
type Feedback struct {
	RequestID string
	Kind      FeedbackKind
	Reason    Reason    // cancellations only
	At        time.Time // when it happened, as the reporter says
	// DueBefore, when set, makes a cancellation conditional on the order's creation event
	// having been published before it (the payment timeout: only orders unpaid for the whole
	// timeout since downstream could first collect payment).
	DueBefore time.Time
}

// FeedbackResult is what a report did to its order.
type FeedbackResult string

// Feedback results. Every report ends in exactly one; only FeedbackApplied changes the
// order, and only FeedbackApplied on a cancellation gives a unit back.
const (
	FeedbackApplied   FeedbackResult = "applied"   // paid stamped, or cancelled and the unit returned
	FeedbackDuplicate FeedbackResult = "duplicate" // the order is already in that state (redelivery)
	FeedbackNotDue    FeedbackResult = "not_due"   // payment timeout: paid, or not published before DueBefore
	FeedbackRefund    FeedbackResult = "refund"    // paid after the pipeline cancelled: a refund event
	FeedbackException FeedbackResult = "exception" // recorded as an exception case (unknown order, ...)
)

// Exception case kinds: reports the pipeline cannot apply and records for a person to look
// at (MySQL's exception_cases), instead of dropping them.
const (
	CaseUnknownOrder    = "unknown_order"         // no order has this request id
	CaseNotSucceeded    = "feedback_for_rejected" // paid or cancelled for a rejected order
	CaseCancelAfterPaid = "cancel_after_paid"     // cancelled after it was reported paid: kept paid
	CasePaidAfterCancel = "paid_after_cancel"     // paid after it was cancelled: refund event sent

	CaseDeadLetter          = "dead_letter"          // an event no consumer can process (undecodable, no stock row)
	CaseAdmittedRejected    = "admitted_rejected"    // Redis admitted a grab that MySQL then rejected
	CaseDriftUncorrected    = "drift_uncorrected"    // Redis stock stayed drifted from MySQL's for several runs
	CaseStaleReservation    = "stale_reservation"    // a reservation stayed without an order after re-publishing
	CaseCompensationFailing = "compensation_failing" // the compensation replay keeps failing on one event
	CaseReplayGap           = "replay_gap"           // the compensation replay's stored position was gone (retention, a recreated topic)
)

// Exception case states: a case opens when detected, and a person replays it (the events go
// back to their topic), resolves it or dismisses it, with a note. Seen again after a replay
// or a resolution, it opens again; a dismissed case stays dismissed.
const (
	CaseOpen      = "open"
	CaseReplayed  = "replayed"
	CaseResolved  = "resolved"
	CaseDismissed = "dismissed"
)

// CaseReplayable reports whether cases of kind carry events that can be produced again:
// dead letters go back to their topic, a stale reservation's grab to the grab topic. The
// others are judgements (drift, a rejection, a payment report) a person resolves.
func CaseReplayable(kind string) bool {
	return kind == CaseDeadLetter || kind == CaseStaleReservation
}
