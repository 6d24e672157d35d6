package main

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

func (e *recEnv) paymentTimeout(d time.Duration) {
	e.t.Helper()
	if err := e.db.Exec("UPDATE activities SET payment_timeout_ms = ?", d.Milliseconds()).Error; err != nil {
		e.t.Fatal(err)
	}
}

func (e *recEnv) pay(rid string) {
	e.t.Helper()
	res, err := store.NewOrders(e.db).ApplyFeedback(e.ctx, nil, e.session, e.prize,
		[]seckill.Feedback{{RequestID: rid, Kind: seckill.FeedbackPaid, At: time.Now()}}, time.Now())
	if err != nil || res.Paid != 1 {
		e.t.Fatalf("pay %s: %+v %v", rid, res, err)
	}
}

// report writes reports on the feedback topic, as a downstream order system does.
func (e *recEnv) report(fs ...seckill.Feedback) {
	e.t.Helper()
	w, err := event.NewWriter(e.brokers, e.topics.Feedback.Name)
	if err != nil {
		e.t.Fatal(err)
	}
	defer w.Close()
	msgs := make([]kafka.Message, len(fs))
	for i, f := range fs {
		if msgs[i], err = event.EncodeFeedback(f); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := w.WriteMessages(e.ctx, msgs...); err != nil {
		e.t.Fatal(err)
	}
}

// waitUntil polls cond until it holds, failing the test after 30 s.
func (e *recEnv) waitUntil(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			out := ""
			if e.consumer != nil {
				out = e.consumer.Output()
			}
			e.t.Fatalf("not %s after 30s\n%s", what, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitPublished waits until the orders' creation events are published and returns when the
// last one's payment clock started.
func (e *recEnv) waitPublished(rids ...string) time.Time {
	e.t.Helper()
	var row struct {
		N    int
		Last *time.Time
	}
	e.waitUntil("published", func() bool {
		// Published from memory, an order has no stamp: its payment clock starts at created_at.
		err := e.db.Raw("SELECT COUNT(*) AS n, MAX(COALESCE(event_published_at, created_at)) AS last FROM orders WHERE request_id IN ? AND "+
			store.PublishedSQL("orders"), rids).Scan(&row).Error
		if err != nil {
			e.t.Fatal(err)
		}
		return row.N == len(rids)
	})
	return *row.Last
}

// waitFeedbackRead waits until the feedback group has committed everything on its topic.
func (e *recEnv) waitFeedbackRead() {
	e.t.Helper()
	admin, err := event.NewAdmin(e.brokers)
	if err != nil {
		e.t.Fatal(err)
	}
	e.waitUntil("feedback read", func() bool {
		lag, err := admin.Lag(e.ctx, e.env["SECKILL_FEEDBACK_GROUP"], e.topics.Feedback)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, n := range lag {
			if n > 0 {
				return false
			}
		}
		return true
	})
}

// holdRelay takes the order relay's MySQL named lock: a consumer started after it stores
// orders but publishes none of their events until release.
func (e *recEnv) holdRelay() (release func()) {
	e.t.Helper()
	names := []string{store.RelayLockName(e.dsn, e.topics.Order.Name)}
	// The consumer publishes its batches' events itself while it holds its grab partition's
	// lock: held here, its orders go to the relay, held too.
	for p := range e.topics.Grab.Partitions {
		names = append(names, store.ProgressLockName(e.dsn, e.topics.Grab.Name, p))
	}
	var locks []*store.Lock
	for _, name := range names {
		l, ok, err := store.TryLock(e.ctx, e.db, name)
		if err != nil || !ok {
			e.t.Fatalf("take lock %s: %v %v", name, ok, err)
		}
		locks = append(locks, l)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			for _, l := range locks {
				l.Release(context.Background())
			}
		})
	}
	e.t.Cleanup(release)
	return release
}

func (e *recEnv) refundsAndCases() (refunds, cases int64) {
	e.t.Helper()
	e.db.Table("order_events").Where("type = ?", store.EventRefundRequired).Count(&refunds)
	e.db.Table("exception_cases").Count(&cases)
	return refunds, cases
}

// deadlinePasses stands for the payment deadline passing, without sleeping: the activity's
// timeout becomes 1 ms, so every order published before the call is past its deadline at
// the next run (its instant on the run's clock is TestPaymentTimeoutAtTheDeadline's, in a
// synctest bubble). An activity cannot be created with less than seckill.MinPaymentTimeout;
// the reconciler reads whatever the row holds, and does the same with it.
func (e *recEnv) deadlinePasses() {
	e.t.Helper()
	e.paymentTimeout(time.Millisecond)
	time.Sleep(2 * time.Millisecond) // and 1 ms passed since the last order published before the call
}

// Orders not paid within the activity's timeout are cancelled by the reconciler, once, and
// their units are sold again; a paid order is kept; Redis and MySQL agree throughout.
func TestPaymentTimeoutCancelsUnpaidOrdersAndResellsTheirUnits(t *testing.T) {
	e := newRecEnv(t, 4, 1)
	e.paymentTimeout(time.Second)
	e.startConsumer()
	a := e.grab("a", true)
	b := e.grab("b", true)
	c := e.grab("c", true)
	d := e.grab("d", true)
	e.waitOrders(4)
	e.waitSettled()
	e.waitPublished(a.RequestID, b.RequestID, c.RequestID, d.RequestID) // the timeouts count from here
	e.pay(a.RequestID)
	if v, _ := e.gate.Reserve(e.ctx, seckill.Grab{RequestID: seckill.RequestID(e.session, e.prize, "key-e-000001"),
		UserID: "e", SessionID: e.session, PrizeID: e.prize, AdmittedAt: time.Now()}); v.Code != stock.SoldOut {
		t.Fatalf("before the timeout: %s, want sold out", v.Code)
	}
	e.deadlinePasses()

	rep, err := e.once()
	if err != nil {
		t.Fatalf("reconcile: %v %+v", err, rep)
	}
	p := jobOf(rep, "payment").Summary
	if p["cancelled"] != 3 || p["units_returned"] != 3 {
		t.Fatalf("payment job %+v, want 3 cancelled and their 3 units back", p)
	}
	if d := jobOf(rep, "drift").Summary; d["redis_high"]+d["redis_low"] != 0 {
		t.Fatalf("drift after the returns: %+v", d)
	}
	if e.dbLeft() != 3 || e.redisLeft() != 3 || e.orders("status = 'cancelled' AND reason = 'payment_timeout'") != 3 {
		t.Fatalf("db left %d, redis left %d, %d cancelled", e.dbLeft(), e.redisLeft(), e.orders("status = 'cancelled'"))
	}
	if e.orders("request_id = ? AND status = 'succeeded' AND paid_at IS NOT NULL", a.RequestID) != 1 {
		t.Fatal("the paid order was touched")
	}
	if l, _ := e.gate.Lookup(e.ctx, b.RequestID); l.Status.State != "cancelled" || l.Status.Reason != "payment_timeout" {
		t.Fatalf("b's status %+v", l.Status)
	}
	var events int64
	e.db.Table("order_events").Where("type = 'order.cancelled'").Count(&events)
	if events != 3 {
		t.Fatalf("%d order.cancelled events, want 3", events)
	}
	// b may not grab again (the activity does not allow it); e buys a returned unit.
	if v, _ := e.gate.Reserve(e.ctx, seckill.Grab{RequestID: seckill.RequestID(e.session, e.prize, "key-b-again1"),
		UserID: "b", SessionID: e.session, PrizeID: e.prize, AdmittedAt: time.Now()}); v.Code != stock.Limit {
		t.Fatalf("b again: %s, want limit", v.Code)
	}
	if v, _ := e.gate.Reserve(e.ctx, seckill.Grab{RequestID: seckill.RequestID(e.session, e.prize, "key-e-000001"),
		UserID: "e", SessionID: e.session, PrizeID: e.prize, AdmittedAt: time.Now()}); v.Code != stock.Admitted {
		t.Fatalf("e after the timeout: %s, want admitted", v.Code)
	}
	// A second run cancels nothing more and gives nothing back twice.
	rep, err = e.once()
	if p := jobOf(rep, "payment").Summary; err != nil || p["cancelled"] != 0 || p["units_returned"] != 0 {
		t.Fatalf("second run: %v %+v", err, p)
	}
	if e.redisLeft() != 2 {
		t.Fatalf("redis left %d, want 2 (3 returned, 1 resold)", e.redisLeft())
	}
}

// Payment timeouts fire while Redis has lost the prize's keys (and the rebuild must wait:
// a grab is still in flight). The cancellations commit in MySQL and their Redis steps wait;
// the rebuild then copies left with those units in it and records them as returned, so the
// sweep that follows finds them done: each unit is counted once.
func TestTimeoutsWhileRedisLostItsKeysCountEachUnitOnce(t *testing.T) {
	e := newRecEnv(t, 4, 1)
	e.paymentTimeout(time.Second)
	e.startConsumer()
	a := e.grab("a", true)
	b := e.grab("b", true)
	e.waitOrders(2)
	e.waitSettled()
	e.waitPublished(a.RequestID, b.RequestID)
	e.deadlinePasses()
	if err := e.consumer.Stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	e.grab("c", true) // in flight: the rebuild must wait for it
	k := stock.KeysFor(e.session, e.prize)
	e.rdb.Del(e.ctx, k.Meta, k.Users, k.Reserved, k.Outcomes, k.Returned)

	e.env["SECKILL_CATCHUP_WAIT"] = "500ms"
	rep, _ := e.once()
	p := jobOf(rep, "payment").Summary
	if jobOf(rep, "rebuild").Summary["rebuilt"] != 0 || p["cancelled"] != 2 || p["waiting_for_keys"] < 2 {
		t.Fatalf("while the keys are lost: rebuild %+v, payment %+v", jobOf(rep, "rebuild").Summary, p)
	}
	if e.dbLeft() != 4 {
		t.Fatalf("db left %d, want 4 (both units back)", e.dbLeft())
	}
	if n, _ := store.NewReturns(e.db).CountPendingRedis(e.ctx); n != 2 {
		t.Fatalf("%d redis steps pending, want 2", n)
	}

	e.env["SECKILL_CATCHUP_WAIT"] = "30s"
	e.paymentTimeout(time.Second) // c's order, stored next, is not past its deadline
	e.startConsumer()
	e.waitOrders(3)
	rep, err := e.once()
	if err != nil || jobOf(rep, "rebuild").Summary["rebuilt"] != 1 {
		t.Fatalf("rebuild: %v %+v", err, jobOf(rep, "rebuild"))
	}
	if p := jobOf(rep, "payment").Summary; p["units_returned"] != 0 || p["swept"] != 0 {
		t.Fatalf("the sweep after the rebuild gave units back: %+v", p)
	}
	if n, _ := store.NewReturns(e.db).CountPendingRedis(e.ctx); n != 0 {
		t.Fatalf("%d redis steps still pending", n)
	}
	if e.dbLeft() != 3 || e.redisLeft() != 3 {
		t.Fatalf("db left %d, redis left %d; want 3 and 3 (4 - c)", e.dbLeft(), e.redisLeft())
	}
	if d := jobOf(rep, "drift").Summary; d["redis_high"]+d["redis_low"] != 0 {
		t.Fatalf("drift after the rebuild: %+v", d)
	}
}

// The feedback consumer is down past a payment deadline. The buyer paid within the two-second
// timeout after the order's creation event went out (order.paid is on the feedback topic,
// unread); past the deadline (deadlinePasses) the reconciler must not cancel it: the
// evidence has not been read. An unpaid order whose report partition holds nothing unread is timed out
// as usual. Once the consumer is back the payment is applied: paid, no refund.
func TestPaidInTimeNotCancelledWhileFeedbackIsUnread(t *testing.T) {
	e := newRecEnv(t, 4, 1)
	e.paymentTimeout(2 * time.Second)
	e.startConsumer()
	a := e.grab("a", true)
	b := e.grab("b", true)
	e.waitOrders(2)
	e.waitSettled()
	e.waitPublished(a.RequestID, b.RequestID)
	if err := e.consumer.Stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}

	e.report(seckill.Feedback{RequestID: a.RequestID, Kind: seckill.FeedbackPaid, At: time.Now()}) // in time
	e.deadlinePasses()
	rep, err := e.once()
	if err != nil {
		t.Fatalf("reconcile: %v %+v", err, rep)
	}
	p := jobOf(rep, "payment").Summary
	if e.orders("request_id = ? AND status = 'cancelled'", a.RequestID) != 0 {
		t.Fatalf("an order paid in time was cancelled while its payment sat unread: %+v", p)
	}
	// b's report would land on its own partition: if that is a's, b waits too.
	n := e.topics.Feedback.Partitions
	shared := event.PartitionOf([]byte(a.RequestID), n) == event.PartitionOf([]byte(b.RequestID), n)
	wantDeferred, wantCancelled := int64(1), int64(1)
	if shared {
		wantDeferred, wantCancelled = 2, 0
	}
	if p["deferred_feedback_behind"] != wantDeferred || p["cancelled"] != wantCancelled ||
		e.orders("request_id = ? AND status = 'cancelled'", b.RequestID) != wantCancelled {
		t.Fatalf("payment job %+v (b shares a's partition: %v), want %d deferred, %d cancelled", p, shared, wantDeferred, wantCancelled)
	}

	e.startConsumer()
	e.waitUntil("paid", func() bool { return e.orders("request_id = ? AND paid_at IS NOT NULL", a.RequestID) == 1 })
	e.waitFeedbackRead()
	rep, err = e.once()
	if err != nil {
		t.Fatalf("reconcile: %v %+v", err, rep)
	}
	if p := jobOf(rep, "payment").Summary; p["deferred_feedback_behind"] != 0 {
		t.Fatalf("feedback read, still deferred: %+v", p)
	}
	if e.orders("request_id = ? AND status = 'succeeded' AND paid_at IS NOT NULL", a.RequestID) != 1 ||
		e.orders("request_id = ? AND status = 'cancelled' AND reason = 'payment_timeout'", b.RequestID) != 1 {
		t.Fatal("want a paid and b timed out")
	}
	if refunds, cases := e.refundsAndCases(); refunds != 0 || cases != 0 {
		t.Fatalf("%d refund events, %d exception cases; want none", refunds, cases)
	}
	if e.dbLeft() != 3 {
		t.Fatalf("db left %d, want 3 (b's unit back)", e.dbLeft())
	}
}

// The order relay is paused: the orders are stored, but downstream never saw order.created
// and could not collect payment. Past their deadline counted from their creation
// (deadlinePasses), they are not cancelled. Once the relay publishes, the timeout counts
// from then: a buyer who pays within it keeps the order, and an unpaid one is timed out.
func TestOrderNotTimedOutBeforeItsCreationEventIsPublished(t *testing.T) {
	e := newRecEnv(t, 4, 1)
	e.paymentTimeout(2 * time.Second)
	release := e.holdRelay()
	e.startConsumer()
	a := e.grab("a", true)
	b := e.grab("b", true)
	e.waitOrders(2)
	e.waitSettled()

	e.deadlinePasses()
	if e.orders(store.PublishedSQL("orders")) != 0 {
		t.Fatal("the relay published while paused: the test tests nothing")
	}
	rep, err := e.once()
	if err != nil {
		t.Fatalf("reconcile: %v %+v", err, rep)
	}
	if p := jobOf(rep, "payment").Summary; e.orders("status = 'cancelled'") != 0 || p["deferred_relay_behind"] != 2 {
		t.Fatalf("orders downstream never heard of: %d cancelled, payment job %+v; want none cancelled, 2 deferred",
			e.orders("status = 'cancelled'"), p)
	}

	e.paymentTimeout(2 * time.Second) // back to the activity's timeout, now counted from the publication
	release()
	e.waitPublished(a.RequestID, b.RequestID)
	e.report(seckill.Feedback{RequestID: a.RequestID, Kind: seckill.FeedbackPaid, At: time.Now()}) // in time
	e.waitUntil("paid", func() bool { return e.orders("request_id = ? AND paid_at IS NOT NULL", a.RequestID) == 1 })
	e.waitFeedbackRead()
	e.deadlinePasses()
	rep, err = e.once()
	if err != nil {
		t.Fatalf("reconcile: %v %+v", err, rep)
	}
	if p := jobOf(rep, "payment").Summary; p["cancelled"] != 1 || p["deferred_relay_behind"] != 0 {
		t.Fatalf("after publication: payment job %+v, want b timed out", p)
	}
	if e.orders("request_id = ? AND status = 'succeeded' AND paid_at IS NOT NULL", a.RequestID) != 1 ||
		e.orders("request_id = ? AND status = 'cancelled' AND reason = 'payment_timeout'", b.RequestID) != 1 {
		t.Fatal("want a paid and b timed out")
	}
	if refunds, cases := e.refundsAndCases(); refunds != 0 || cases != 0 {
		t.Fatalf("%d refund events, %d exception cases; want none", refunds, cases)
	}
}
