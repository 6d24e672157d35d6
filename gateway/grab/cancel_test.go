package grab

import (
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// A cancelled order polls as cancelled with its reason and order id: from Redis during the
// sale (and on a keyed repeat of the grab), and from MySQL once the keys are gone. Its unit
// is sold again: the local sold-out flag answers keyless grabs only until the recheck, then
// Redis is asked and admits.
func TestCancelledGrabPollsCancelledAndItsUnitSellsAgain(t *testing.T) {
	// The recheck window is an hour and the test moves it by hand: a wall-clock window of
	// 100 ms expired during the persist and the polls on a loaded machine.
	flags := newSoldOutFlags(time.Hour)
	e := newGrabEnv(t, 1, 5, 1, func(a *API) { a.soldOut = flags })
	ctx := stacktest.Context(t, 30*time.Second)
	a := e.grab(t, e.open, e.prizeA, "alice", "alice-key-0001")
	expect(t, "admitted", a, 202, "")
	rid := a.body["request_id"].(string)
	expect(t, "sold out (flag set)", e.grab(t, e.open, e.prizeA, "bob", ""), 409, "sold_out")

	orders := store.NewOrders(e.db)
	res, err := orders.Persist(ctx, e.open.ID, e.prizeA, []seckill.Grab{{RequestID: rid, UserID: "alice",
		SessionID: e.open.ID, PrizeID: e.prizeA, AdmittedAt: time.Now()}}, time.Now())
	if err != nil || res.Succeeded != 1 {
		t.Fatalf("persist: %+v %v", res, err)
	}
	fb, err := orders.ApplyFeedback(ctx, nil, e.open.ID, e.prizeA, []seckill.Feedback{{RequestID: rid,
		Kind: seckill.FeedbackCancelled, Reason: seckill.ReasonPaymentTimeout, At: time.Now()}}, time.Now())
	if err != nil || len(fb.Returns) != 1 {
		t.Fatalf("cancel: %+v %v", fb, err)
	}
	r := fb.Returns[0]
	if _, err := e.gate.Return(ctx, e.open.ID, e.prizeA, []stock.UnitReturn{{RequestID: r.RequestID, UserID: r.UserID,
		OrderID: r.OrderID, Reason: string(r.Reason), Resale: r.Resale}}); err != nil {
		t.Fatal(err)
	}

	st := e.request(t, "GET", "/api/v1/grabs/"+rid, e.token(t, "alice"), "", "")
	if st.code != 200 || st.body["status"] != "cancelled" || st.body["reason"] != "payment_timeout" || st.body["order_id"] != float64(r.OrderID) {
		t.Fatalf("poll from Redis: %d %v", st.code, st.body)
	}
	again := e.grab(t, e.open, e.prizeA, "alice", "alice-key-0001")
	if again.code != 202 || again.body["status"] != "cancelled" || again.body["reason"] != "payment_timeout" {
		t.Fatalf("keyed repeat of a cancelled grab: %d %v", again.code, again.body)
	}

	// The flag bob set still answers a keyless grab for a moment, then Redis sells the unit.
	expect(t, "within the sold-out recheck", e.grab(t, e.open, e.prizeA, "carol", ""), 409, "sold_out")
	flags.Set(e.open.ID, e.prizeA, time.Now().Add(-time.Hour)) // the recheck is due now
	expect(t, "after the recheck: the returned unit", e.grab(t, e.open, e.prizeA, "carol", ""), 202, "")
	expect(t, "sold again", e.grab(t, e.open, e.prizeA, "dave", "dave-key-0001"), 409, "sold_out")

	k := stock.KeysFor(e.open.ID, e.prizeA)
	e.rdb.Del(ctx, k.Meta, k.Users, k.Reserved, k.Outcomes, k.Returned)
	st = e.request(t, "GET", "/api/v1/grabs/"+rid, e.token(t, "alice"), "", "")
	if st.code != 200 || st.body["status"] != "cancelled" || st.body["reason"] != "payment_timeout" || st.body["order_id"] != float64(r.OrderID) {
		t.Fatalf("poll from MySQL: %d %v", st.code, st.body)
	}
}
