package main

import (
	"testing"
	"time"

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

// Orders not paid within the activity's timeout are cancelled by the reconciler, once, and
// their units are sold again; a paid order is kept; Redis and MySQL agree throughout.
func TestPaymentTimeoutCancelsUnpaidOrdersAndResellsTheirUnits(t *testing.T) {
	e := newRecEnv(t, 4, 1)
	e.paymentTimeout(time.Second)
	e.startConsumer()
	a := e.grab("a", true)
	b := e.grab("b", true)
	e.grab("c", true)
	e.grab("d", true)
	e.waitOrders(4)
	e.waitSettled()
	e.pay(a.RequestID)
	if v, _ := e.gate.Reserve(e.ctx, seckill.Grab{RequestID: seckill.RequestID(e.session, e.prize, "key-e-000001"),
		UserID: "e", SessionID: e.session, PrizeID: e.prize, AdmittedAt: time.Now()}); v.Code != stock.SoldOut {
		t.Fatalf("before the timeout: %s, want sold out", v.Code)
	}
	time.Sleep(1200 * time.Millisecond)

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
	e.grab("a", true)
	e.grab("b", true)
	e.waitOrders(2)
	e.waitSettled()
	time.Sleep(1200 * time.Millisecond)
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
