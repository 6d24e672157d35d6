package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// sale is one open session×prize in a fresh database, for the feedback tests.
type sale struct {
	db       *gorm.DB
	ctx      context.Context
	orders   *store.Orders
	sid, pid int64
	now      time.Time
}

func newSale(t *testing.T, stock, limit int, regrab bool) *sale {
	t.Helper()
	db := migrated(t)
	ctx := stacktest.Context(t, 60*time.Second)
	now := time.Now().UTC()
	cat := store.NewCatalog(db, func() time.Time { return now })
	act := seckill.Activity{Name: "pay", WindowStart: now.Add(-time.Minute), WindowEnd: now.Add(time.Hour),
		Interval: time.Hour, SessionLength: time.Hour, PerUserLimit: limit, PaymentTimeout: 15 * time.Minute,
		RegrabAfterCancel: regrab, Prizes: []seckill.Prize{{Name: "phone", StockPerSession: stock}}}
	created, err := cat.CreateActivity(ctx, act)
	if err != nil {
		t.Fatal(err)
	}
	got, err := cat.Activity(ctx, created.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.PaymentTimeout != 15*time.Minute || got.RegrabAfterCancel != regrab {
		t.Fatalf("activity settings not stored: timeout %s regrab %v", got.PaymentTimeout, got.RegrabAfterCancel)
	}
	sessions, err := cat.Sessions(ctx, created.ID)
	if err != nil {
		t.Fatal(err)
	}
	return &sale{db: db, ctx: ctx, orders: store.NewOrders(db), sid: sessions[0].ID, pid: created.Prizes[0].ID, now: now}
}

func (s *sale) rid(key string) string { return seckill.RequestID(s.sid, s.pid, key) }

// grab persists one grab per (key, user) pair and returns the outcomes' statuses.
func (s *sale) grab(t *testing.T, pairs ...string) []seckill.OrderStatus {
	t.Helper()
	var grabs []seckill.Grab
	for i := 0; i+1 < len(pairs); i += 2 {
		grabs = append(grabs, seckill.Grab{RequestID: s.rid(pairs[i]), UserID: pairs[i+1], SessionID: s.sid, PrizeID: s.pid, AdmittedAt: s.now})
	}
	res, err := s.orders.Persist(s.ctx, s.sid, s.pid, grabs, s.now)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]seckill.OrderStatus, len(res.Outcomes))
	for i, o := range res.Outcomes {
		out[i] = o.Status
	}
	return out
}

func (s *sale) apply(t *testing.T, now time.Time, items ...seckill.Feedback) store.FeedbackBatch {
	t.Helper()
	res, err := s.orders.ApplyFeedback(s.ctx, nil, s.sid, s.pid, items, now)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// published stamps the orders' creation events published at, as the order relay does.
func (s *sale) published(t *testing.T, at time.Time, keys ...string) {
	t.Helper()
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = "order:" + s.rid(k) + ":succeeded"
	}
	if n, err := store.NewOutbox(s.db).MarkFound(s.ctx, ids, at); err != nil || n != int64(len(keys)) {
		t.Fatalf("stamp %d events published: %d %v", len(keys), n, err)
	}
}

func (s *sale) left(t *testing.T) int {
	t.Helper()
	var left int
	if err := s.db.Raw("SELECT left_stock FROM session_stocks WHERE session_id = ? AND prize_id = ?", s.sid, s.pid).Row().Scan(&left); err != nil {
		t.Fatal(err)
	}
	return left
}

func (s *sale) n(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := s.db.Raw(query, args...).Row().Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func cancel(rid string, r seckill.Reason) seckill.Feedback {
	return seckill.Feedback{RequestID: rid, Kind: seckill.FeedbackCancelled, Reason: r, At: time.Now()}
}

func paid(rid string) seckill.Feedback {
	return seckill.Feedback{RequestID: rid, Kind: seckill.FeedbackPaid, At: time.Now()}
}

func results(b store.FeedbackBatch) []seckill.FeedbackResult {
	out := make([]seckill.FeedbackResult, len(b.Outcomes))
	for i, o := range b.Outcomes {
		out[i] = o.Result
	}
	return out
}

func TestCancellationReturnsTheUnitOnce(t *testing.T) {
	s := newSale(t, 3, 1, false)
	s.grab(t, "key-0000a", "u0", "key-0000b", "u1", "key-0000c", "u2")
	if left := s.left(t); left != 0 {
		t.Fatalf("left %d after selling out, want 0", left)
	}
	// The cancellation twice in one batch, and again in a later one (a redelivery).
	b := s.apply(t, s.now, cancel(s.rid("key-0000a"), seckill.ReasonBuyerCancelled), cancel(s.rid("key-0000a"), seckill.ReasonBuyerCancelled))
	if got := results(b); fmt.Sprint(got) != "[applied duplicate]" || b.Cancelled != 1 || len(b.Returns) != 1 {
		t.Fatalf("first batch: %v, %d cancelled, returns %+v", got, b.Cancelled, b.Returns)
	}
	r := b.Returns[0]
	if r.RequestID != s.rid("key-0000a") || r.UserID != "u0" || !r.Resale || r.ReleaseSlot || r.Reason != seckill.ReasonBuyerCancelled {
		t.Fatalf("return %+v: want u0's unit back for resale, slot kept (no re-grab in this activity)", r)
	}
	// Redelivered before the Redis step was stamped done (the process died in between): the
	// step is handed back, not the unit.
	b = s.apply(t, s.now, cancel(s.rid("key-0000a"), seckill.ReasonPaymentFailed))
	if got := results(b); fmt.Sprint(got) != "[duplicate]" || len(b.Returns) != 1 || b.Cancelled != 0 {
		t.Fatalf("redelivery before the redis step: %v, returns %+v", got, b.Returns)
	}
	if err := store.NewReturns(s.db).MarkRedisDone(s.ctx, []int64{r.OrderID}, s.now); err != nil {
		t.Fatal(err)
	}
	b = s.apply(t, s.now, cancel(s.rid("key-0000a"), seckill.ReasonPaymentFailed))
	if got := results(b); fmt.Sprint(got) != "[duplicate]" || len(b.Returns) != 0 {
		t.Fatalf("redelivery: %v, returns %+v", got, b.Returns)
	}
	if left := s.left(t); left != 1 {
		t.Fatalf("left %d, want 1: the unit came back exactly once", left)
	}
	o, err := s.orders.ByRequestID(s.ctx, s.rid("key-0000a"))
	if err != nil {
		t.Fatal(err)
	}
	if o.Status != seckill.OrderCancelled || o.Reason != seckill.ReasonBuyerCancelled || o.CancelledAt == nil || !o.HoldsSlot {
		t.Fatalf("order after cancel: %+v", o)
	}
	if n := s.n(t, "SELECT COUNT(*) FROM order_events WHERE event_id = ?", "order:"+s.rid("key-0000a")+":cancelled"); n != 1 {
		t.Fatalf("%d order.cancelled events in the outbox, want 1", n)
	}
	if n := s.n(t, "SELECT COUNT(*) FROM stock_returns"); n != 1 {
		t.Fatalf("%d stock returns, want 1", n)
	}
	// total = left + succeeded still holds.
	c, err := s.orders.CountsFor(s.ctx, s.sid, s.pid)
	if err != nil {
		t.Fatal(err)
	}
	if c.Succeeded != 2 || c.Cancelled != 1 || c.Rejected != 0 || s.left(t)+c.Succeeded != 3 {
		t.Fatalf("counts %+v, left %d", c, s.left(t))
	}
	// u0 may not grab again in this activity: the cancelled order keeps its slot.
	if got := s.grab(t, "key-0000d", "u0"); got[0] != seckill.OrderRejected {
		t.Fatalf("u0 grabbing again: %v, want rejected (limit)", got)
	}
	// Someone else buys the returned unit.
	if got := s.grab(t, "key-0000e", "u3"); got[0] != seckill.OrderSucceeded || s.left(t) != 0 {
		t.Fatalf("resale: %v, left %d", got, s.left(t))
	}
}

func TestPaidAndCancelledAreNeverBoth(t *testing.T) {
	s := newSale(t, 5, 1, true)
	s.grab(t, "key-0000a", "u0", "key-0000b", "u1", "key-0000c", "u2")
	a, b := s.rid("key-0000a"), s.rid("key-0000b")

	// Paid first: a later cancellation is refused and recorded as a case; the order stays paid.
	res := s.apply(t, s.now, paid(a), paid(a), cancel(a, seckill.ReasonBuyerCancelled))
	if got := fmt.Sprint(results(res)); got != "[applied duplicate exception]" || res.Outcomes[2].Case != seckill.CaseCancelAfterPaid {
		t.Fatalf("paid, paid, cancelled: %s %+v", got, res.Outcomes[2])
	}
	// Cancelled first: a later payment is answered with one refund event, never a revival.
	res = s.apply(t, s.now, cancel(b, seckill.ReasonPaymentFailed), paid(b))
	if got := fmt.Sprint(results(res)); got != "[applied refund]" {
		t.Fatalf("cancelled, paid: %s", got)
	}
	res = s.apply(t, s.now, paid(b))
	if got := fmt.Sprint(results(res)); got != "[duplicate]" {
		t.Fatalf("the late payment redelivered: %s", got)
	}
	if n := s.n(t, "SELECT COUNT(*) FROM order_events WHERE event_id = ? AND type = 'order.refund_required'", "order:"+b+":refund_required"); n != 1 {
		t.Fatalf("%d refund events, want 1", n)
	}
	if n := s.n(t, "SELECT COUNT(*) FROM exception_cases WHERE kind IN (?, ?)", seckill.CaseCancelAfterPaid, seckill.CasePaidAfterCancel); n != 2 {
		t.Fatalf("%d exception cases, want 2", n)
	}
	if n := s.n(t, "SELECT COUNT(*) FROM orders WHERE paid_at IS NOT NULL AND status = 'cancelled'"); n != 0 {
		t.Fatalf("%d orders both paid and cancelled", n)
	}
	// The database refuses it too, whoever writes.
	if err := s.db.Exec("UPDATE orders SET paid_at = NOW(6) WHERE request_id = ?", b).Error; err == nil {
		t.Fatal("the database accepted a paid cancelled order")
	}
	if s.left(t) != 3 {
		t.Fatalf("left %d, want 3 (5 - 3 sold + 1 cancelled)", s.left(t))
	}
}

func TestUnknownOrdersAreExceptionCases(t *testing.T) {
	s := newSale(t, 2, 1, false)
	s.grab(t, "key-0000a", "u0", "key-0000b", "u1", "key-0000c", "u2") // the third is rejected sold_out
	unknown := s.rid("never-grabbed")
	for range 2 { // a redelivery counts as seen again, not as a second case
		res := s.apply(t, s.now, paid(unknown), cancel(s.rid("key-0000c"), seckill.ReasonBuyerCancelled))
		if got := fmt.Sprint(results(res)); got != "[exception exception]" ||
			res.Outcomes[0].Case != seckill.CaseUnknownOrder || res.Outcomes[1].Case != seckill.CaseNotSucceeded {
			t.Fatalf("%s %+v", got, res.Outcomes)
		}
	}
	// A session×prize MySQL does not know at all.
	res, err := s.orders.ApplyFeedback(s.ctx, nil, s.sid+1000, s.pid, []seckill.Feedback{paid(seckill.RequestID(s.sid+1000, s.pid, "whatever-1"))}, s.now)
	if err != nil || res.Outcomes[0].Case != seckill.CaseUnknownOrder {
		t.Fatalf("unknown stock row: %+v %v", res, err)
	}
	// The sold-out rejection of key-0000c (the stock row said 2, the grab was admitted) is
	// a case of its own, written with the order.
	cases, err := store.NewExceptions(s.db).List(s.ctx, store.CaseFilter{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, c := range cases {
		kinds[c.Kind]++
	}
	if len(cases) != 4 || kinds[seckill.CaseUnknownOrder] != 2 || kinds[seckill.CaseNotSucceeded] != 1 || kinds[seckill.CaseAdmittedRejected] != 1 {
		t.Fatalf("cases %v, want 2 unknown_order, 1 feedback_for_rejected, 1 admitted_rejected", kinds)
	}
	for _, c := range cases {
		if c.RequestID == unknown && (c.Seen != 2 || c.Kind != seckill.CaseUnknownOrder || c.LastSeen.Before(c.FirstSeen)) {
			t.Fatalf("case %+v: want unknown_order seen twice", c)
		}
	}
	if s.left(t) != 0 {
		t.Fatalf("left %d: an exception moved stock", s.left(t))
	}
}

func TestRegrabReleasesTheSlot(t *testing.T) {
	s := newSale(t, 10, 2, true)
	s.grab(t, "key-0000a", "u0", "key-0000b", "u0") // slots 1 and 2
	res := s.apply(t, s.now, cancel(s.rid("key-0000a"), seckill.ReasonBuyerCancelled))
	if len(res.Returns) != 1 || !res.Returns[0].ReleaseSlot {
		t.Fatalf("returns %+v: want the slot released", res.Returns)
	}
	// u0 holds slot 2 only: the next grab takes slot 1 (not 2, which would collide), and a
	// further one is over the limit.
	if got := s.grab(t, "key-0000c", "u0", "key-0000d", "u0"); fmt.Sprint(got) != "[succeeded rejected]" {
		t.Fatalf("u0 grabbing again: %v, want [succeeded rejected]", got)
	}
	if n := s.n(t, "SELECT COUNT(*) FROM orders WHERE user_id = 'u0' AND slot IS NOT NULL"); n != 2 {
		t.Fatalf("u0 holds %d slots, want 2", n)
	}
}

func due(rid string, at, before time.Time) seckill.Feedback {
	return seckill.Feedback{RequestID: rid, Kind: seckill.FeedbackCancelled, Reason: seckill.ReasonPaymentTimeout, At: at, DueBefore: before}
}

func TestPaymentTimeoutCancelsOnlyDueUnpaidOrders(t *testing.T) {
	s := newSale(t, 5, 1, false)
	s.grab(t, "key-0000a", "u0", "key-0000b", "u1")
	s.published(t, s.now, "key-0000a", "key-0000b")
	s.apply(t, s.now, paid(s.rid("key-0000b")))
	res := s.apply(t, s.now, due(s.rid("key-0000a"), s.now, s.now.Add(-time.Second)), due(s.rid("key-0000b"), s.now, s.now.Add(time.Second)))
	if got := fmt.Sprint(results(res)); got != "[not_due not_due]" {
		t.Fatalf("created after the cutoff / paid: %s", got)
	}
	if n := s.n(t, "SELECT COUNT(*) FROM exception_cases"); n != 0 {
		t.Fatalf("%d exception cases: a paid order reached by the timeout is not a case", n)
	}
	res = s.apply(t, s.now, due(s.rid("key-0000a"), s.now, s.now.Add(time.Second)))
	if got := fmt.Sprint(results(res)); got != "[applied]" || res.Outcomes[0].OrderID == 0 {
		t.Fatalf("due: %s", got)
	}
	unpaid, err := s.orders.Unpaid(s.ctx, s.sid, s.pid, s.now.Add(time.Hour), 10)
	if err != nil || len(unpaid) != 0 {
		t.Fatalf("unpaid orders left: %v %v", unpaid, err)
	}
}

// The payment timeout counts from when the order's creation event was published, not from
// when the order was stored: downstream could not collect payment before. An order whose
// event is not out yet is never due, however old.
func TestPaymentTimeoutCountsFromPublication(t *testing.T) {
	s := newSale(t, 5, 1, false)
	s.grab(t, "key-0000a", "u0")
	a := s.rid("key-0000a")
	pub := s.now.Truncate(time.Microsecond).Add(time.Second) // as MySQL keeps it
	candidates := func(cutoff time.Time, after int64) string {
		t.Helper()
		due, err := s.orders.DueUnpaid(s.ctx, s.sid, s.pid, cutoff, after, 10)
		if err != nil {
			t.Fatal(err)
		}
		out := ""
		for _, o := range due {
			out += o.RequestID + " "
		}
		return out
	}
	unpublished := func(cutoff time.Time) int64 {
		t.Helper()
		n, err := s.orders.CountUnpublishedUnpaid(s.ctx, s.sid, s.pid, cutoff)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if got := fmt.Sprint(results(s.apply(t, s.now, due(a, s.now, s.now.Add(time.Hour))))); got != "[not_due]" {
		t.Fatalf("unpublished, an hour past its creation: %s, want not_due", got)
	}
	if c, n := candidates(s.now.Add(time.Hour), 0), unpublished(s.now.Add(time.Hour)); c != "" || n != 1 {
		t.Fatalf("unpublished: candidates %q, %d waiting for the relay; want none and 1", c, n)
	}
	s.published(t, pub, "key-0000a")
	if c, n := candidates(pub, 0), unpublished(s.now.Add(time.Hour)); c != "" || n != 0 {
		t.Fatalf("published at the cutoff: candidates %q, %d waiting for the relay; want none", c, n)
	}
	if c := candidates(pub.Add(time.Microsecond), 0); c != a+" " {
		t.Fatalf("published before the cutoff: candidates %q, want %s", c, a)
	}
	if c := candidates(pub.Add(time.Microsecond), int64(s.n(t, "SELECT id FROM orders WHERE request_id = ?", a))); c != "" {
		t.Fatalf("candidates after a's id: %q, want none", c)
	}
	if got := fmt.Sprint(results(s.apply(t, s.now, due(a, s.now, pub)))); got != "[not_due]" {
		t.Fatalf("published at the cutoff: %s, want not_due", got)
	}
	if got := fmt.Sprint(results(s.apply(t, s.now, due(a, s.now, pub.Add(time.Microsecond))))); got != "[applied]" {
		t.Fatalf("published before the cutoff: %s, want applied", got)
	}
	if s.left(t) != 5 {
		t.Fatalf("left %d, want 5", s.left(t))
	}
}

func TestCancellationAfterTheSessionReturnsToMySQLOnly(t *testing.T) {
	s := newSale(t, 5, 1, true)
	s.grab(t, "key-0000a", "u0")
	res := s.apply(t, s.now.Add(2*time.Hour), cancel(s.rid("key-0000a"), seckill.ReasonBuyerCancelled))
	if len(res.Returns) != 1 || res.Returns[0].Resale {
		t.Fatalf("returns %+v: want one, not for resale", res.Returns)
	}
	if s.left(t) != 5 {
		t.Fatalf("left %d, want 5", s.left(t))
	}
	// Redis still learns the outcome (status polls say cancelled), not the unit.
	pending, err := store.NewReturns(s.db).PendingRedis(s.ctx, 10)
	if err != nil || len(pending) != 1 || pending[0].Resale {
		t.Fatalf("redis steps pending %+v %v: want the outcome only", pending, err)
	}
	resale, after, err := store.NewReturns(s.db).CountsFor(s.ctx, s.sid, s.pid)
	if err != nil || resale != 0 || after != 1 {
		t.Fatalf("returned for resale %d, after the end %d, err %v", resale, after, err)
	}
}

// Paid and cancelled racing for the same orders from two writers: every order ends in one
// state, the stock moves once per cancellation, one cancelled event per cancellation.
func TestPaidAndCancelledRacing(t *testing.T) {
	const n = 60
	s := newSale(t, n, 1, false)
	var pairs []string
	for i := range n {
		pairs = append(pairs, fmt.Sprintf("key-%05d", i), fmt.Sprintf("u%d", i))
	}
	s.grab(t, pairs...)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				rid := s.rid(fmt.Sprintf("key-%05d", i))
				f := paid(rid)
				if (i+w)%2 == 0 {
					f = cancel(rid, seckill.ReasonBuyerCancelled)
				}
				for {
					_, err := s.orders.ApplyFeedback(s.ctx, nil, s.sid, s.pid, []seckill.Feedback{f}, s.now)
					if err == nil {
						break
					}
					if !store.IsTransient(err) {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	c, err := s.orders.CountsFor(s.ctx, s.sid, s.pid)
	if err != nil {
		t.Fatal(err)
	}
	if c.Succeeded+c.Cancelled != n || s.left(t) != c.Cancelled {
		t.Fatalf("counts %+v, left %d", c, s.left(t))
	}
	if both := s.n(t, "SELECT COUNT(*) FROM orders WHERE paid_at IS NOT NULL AND status = 'cancelled'"); both != 0 {
		t.Fatalf("%d orders paid and cancelled", both)
	}
	if ev := s.n(t, "SELECT COUNT(*) FROM order_events WHERE type = 'order.cancelled'"); ev != c.Cancelled {
		t.Fatalf("%d cancelled events for %d cancellations", ev, c.Cancelled)
	}
	if c.Cancelled == 0 || c.Cancelled == n {
		t.Fatalf("%d of %d cancelled: the race was not a race", c.Cancelled, n)
	}
}

// The payment timeout's cancellations are the reconciler's writes: under a fence that a
// newer lease holder moved on, the transaction is refused and nothing changes.
func TestFencedCancellationRefusedForAStaleFence(t *testing.T) {
	s := newSale(t, 2, 1, false)
	s.grab(t, "key-0000a", "u0")
	s.published(t, s.now, "key-0000a")
	if err := s.db.Exec("INSERT INTO leases (name, holder, fence, expires_at) VALUES ('pay-test', 'x', 5, NOW(6))").Error; err != nil {
		t.Fatal(err)
	}
	due := seckill.Feedback{RequestID: s.rid("key-0000a"), Kind: seckill.FeedbackCancelled, Reason: seckill.ReasonPaymentTimeout,
		At: s.now, DueBefore: s.now.Add(time.Second)}
	_, err := s.orders.ApplyFeedback(s.ctx, &lease.Fence{Name: "pay-test", Number: 4}, s.sid, s.pid, []seckill.Feedback{due}, s.now)
	if !errors.Is(err, lease.ErrStale) {
		t.Fatalf("stale fence: %v, want ErrStale", err)
	}
	if s.left(t) != 1 || s.n(t, "SELECT COUNT(*) FROM orders WHERE status = 'cancelled'") != 0 {
		t.Fatal("a refused cancellation changed something")
	}
	res, err := s.orders.ApplyFeedback(s.ctx, &lease.Fence{Name: "pay-test", Number: 5}, s.sid, s.pid, []seckill.Feedback{due}, s.now)
	if err != nil || res.Cancelled != 1 || s.left(t) != 2 {
		t.Fatalf("current fence: %+v %v, left %d", res, err, s.left(t))
	}
}
