// Package seckill is the flash-sale domain: activities, their recurring sessions, prizes and
// per-session stock, grabs and orders, and the sentinel errors the rest of the system maps to
// answers. It does no I/O.
package seckill

import (
	"errors"
	"strconv"
	"time"
)

// Sentinel errors. Edges map them once: the gateway to HTTP statuses, the consumer to
// order rejections.
var (
	ErrSoldOut      = errors.New("sold out")
	ErrLimitReached = errors.New("per-user limit reached")
	ErrNotOpen      = errors.New("session not open")
	ErrDuplicate    = errors.New("duplicate request")
	ErrNotLoaded    = errors.New("stock not loaded")
	ErrNotFound     = errors.New("not found")
	ErrConflict     = errors.New("conflict")
)

// ActivityStatus is an activity's lifecycle state.
type ActivityStatus string

// Activity states.
const (
	ActivityActive ActivityStatus = "active"
	ActivityClosed ActivityStatus = "closed"
)

// Activity is a recurring sale: a session every Interval within [WindowStart, WindowEnd),
// each lasting SessionLength and offering every prize with its own stock.
type Activity struct {
	ID            int64
	Name          string
	WindowStart   time.Time
	WindowEnd     time.Time
	Interval      time.Duration
	SessionLength time.Duration
	PerUserLimit  int // orders one user may hold per session×prize
	// PaymentTimeout, when > 0, is how long a succeeded order may stay unpaid before the
	// pipeline cancels it and gives its unit back (see payment.go).
	PaymentTimeout time.Duration
	// RegrabAfterCancel lets a buyer whose order was cancelled grab the prize again in the
	// same session: the cancelled order gives its per-user slot back.
	RegrabAfterCancel bool
	Status            ActivityStatus
	Prizes            []Prize
}

// Prize is something an activity offers, with the stock each session starts with.
type Prize struct {
	ID              int64
	ActivityID      int64
	Name            string
	StockPerSession int
	// Buckets is N, how many stock buckets each session's stock of the prize is split into
	// (docs/design.md): 1 for a prize without buckets. 0 in an activity being created means
	// "not named": the gateway derives it from its settings.
	Buckets int
	// Admission is how a session's units are given: first come, first served (the default),
	// or by a draw among the users who entered during EntryWindow from the session's open
	// (package draw).
	Admission   Admission
	EntryWindow time.Duration // > 0 for a draw prize, 0 for first come, first served
}

// Admission is how a prize's units are given in each session.
type Admission string

// Admission modes.
const (
	AdmissionFCFS Admission = "fcfs" // to the first requests Redis admits
	AdmissionDraw Admission = "draw" // by a draw among the entrants of an entry window
)

// IsDraw reports whether a prize's units are given by a draw.
func (p Prize) IsDraw() bool { return p.Admission == AdmissionDraw }

// Session is one materialised sale round of an activity.
type Session struct {
	ID         int64
	ActivityID int64
	Seq        int // 1-based position in the activity's schedule
	Start      time.Time
	End        time.Time
	ClosedAt   *time.Time // set when an operator closed it early
}

// OpenAt reports whether grabs are accepted at t: within [Start, End) and not closed early.
func (s Session) OpenAt(t time.Time) bool {
	if s.ClosedAt != nil && !t.Before(*s.ClosedAt) {
		return false
	}
	return !t.Before(s.Start) && t.Before(s.End)
}

// SessionPrize names one prize in one session: the unit of stock, of the per-user limit, of a
// database transaction and of a Redis settlement.
type SessionPrize struct{ Session, Prize int64 }

// String is the pair as messages name it: "session 7 prize 12".
func (k SessionPrize) String() string {
	return "session " + strconv.FormatInt(k.Session, 10) + " prize " + strconv.FormatInt(k.Prize, 10)
}

// Stock is one session×prize's stock as the system of record holds it.
type Stock struct {
	SessionID    int64
	PrizeID      int64
	Total        int
	Left         int
	Version      int64
	PerUserLimit int
	// Buckets is the session×prize's N (docs/design.md). For N > 1, Total, Left and
	// Version are bucket 0's (this row's), not the prize's: the prize's sums come from
	// store.Catalog.PrizeStock. 0 in a value not read from MySQL means 1.
	Buckets int
}

// SessionPrize is the session×prize this stock belongs to.
func (s Stock) SessionPrize() SessionPrize { return SessionPrize{s.SessionID, s.PrizeID} }

// BucketCount is the session×prize's N: Buckets, or 1 for a value whose Buckets is 0 (not
// read from MySQL).
func (s Stock) BucketCount() int { return max(1, s.Buckets) }

// BucketLedger is what the journal of bucket transfers says one stock bucket's Redis keys
// must record (docs/design.md): the units transfers took from it (Sent) and the units taken
// for it (Received), and per transfer id the units taken from or given to it (Transfers).
type BucketLedger struct {
	Sent      int
	Received  int
	Transfers map[int64]int
}

// Grab is one admitted attempt of a user on a session×prize.
type Grab struct {
	RequestID string
	UserID    string
	SessionID int64
	PrizeID   int64
	// Bucket is the stock bucket that admitted the grab (docs/design.md): the user's home
	// bucket of the prize; 0 for a prize without buckets.
	Bucket int
	// Buckets is the prize's N, which names bucket Bucket's Redis keys (stock.BucketKeysFor):
	// set by the gateway from its schedule cache; not part of the event (a consumer reads N
	// from the bucket's stock row).
	Buckets    int
	AdmittedAt time.Time
	// TraceParent is the W3C traceparent the grab's order stores (its trace_context): the
	// span that persisted it, in the purchase's trace, when that trace is sampled; "" when
	// not traced. Set by the write path from the message's headers; not part of the event.
	TraceParent string
}

// SessionPrize is the session×prize the grab is for.
func (g Grab) SessionPrize() SessionPrize { return SessionPrize{g.SessionID, g.PrizeID} }

// OrderStatus is an order's state: succeeded or rejected when stored; a succeeded order
// may later become cancelled (once, never back).
type OrderStatus string

// Order states.
const (
	OrderSucceeded OrderStatus = "succeeded"
	OrderRejected  OrderStatus = "rejected"
	OrderCancelled OrderStatus = "cancelled"
)

// Reason says why an order was rejected or cancelled; it is shown to the user.
type Reason string

// Rejection reasons.
const (
	ReasonSoldOut Reason = "sold_out"
	ReasonLimit   Reason = "limit"
)

// Order is the persisted outcome of one grab.
type Order struct {
	ID        int64
	RequestID string
	UserID    string
	SessionID int64
	PrizeID   int64
	// Bucket is the stock bucket whose row the order's unit came from (docs/design.md): 0
	// for a prize without buckets.
	Bucket     int
	Status     OrderStatus
	Reason     Reason // empty unless rejected or cancelled
	AdmittedAt time.Time
	CreatedAt  time.Time
	// PaidAt is when downstream reported the order paid; CancelledAt when it was cancelled.
	// An order is never both (the database refuses it).
	PaidAt      *time.Time
	CancelledAt *time.Time
	// HoldsSlot: the order counts against its user's per-user limit (succeeded, or
	// cancelled in an activity that does not let the buyer grab again).
	HoldsSlot bool
	// TraceParent is the stored trace context of the span that persisted the order (W3C
	// traceparent), "" when its purchase was not traced: later actions on the order link to it.
	TraceParent string
}
