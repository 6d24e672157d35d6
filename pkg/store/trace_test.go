package store_test

import (
	"testing"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// An order stores the trace context its grab brings (migration 0014), NULL for a grab that
// brings none; whoever reads the order later gets it back: the relay's creation and follow
// events, a redelivery's existing order, a report's outcome, a stock return's Redis step.
func TestAnOrderKeepsItsTraceContext(t *testing.T) {
	s := newSale(t, 2, 1, false)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	a, b := s.rid("key-0000a"), s.rid("key-0000b")
	grabs := []seckill.Grab{{RequestID: a, UserID: "u0", SessionID: s.sid, PrizeID: s.pid, AdmittedAt: s.now, TraceParent: tp},
		{RequestID: b, UserID: "u1", SessionID: s.sid, PrizeID: s.pid, AdmittedAt: s.now}}
	if _, err := s.orders.Persist(s.ctx, s.sid, s.pid, grabs, s.now); err != nil {
		t.Fatal(err)
	}
	if n := s.n(t, "SELECT COUNT(*) FROM orders WHERE request_id = ? AND trace_context = ?", a, tp); n != 1 {
		t.Fatalf("the traced order does not store its context")
	}
	if n := s.n(t, "SELECT COUNT(*) FROM orders WHERE request_id = ? AND trace_context IS NULL", b); n != 1 {
		t.Fatalf("the untraced order stores a context")
	}
	want := map[string]string{a: tp, b: ""}
	pending, err := store.NewOutbox(s.db).Pending(s.ctx, 10)
	if err != nil || len(pending) != 2 {
		t.Fatalf("pending %+v %v", pending, err)
	}
	for _, e := range pending {
		if e.TraceParent != want[e.Key] {
			t.Errorf("creation event of %s: trace %q, want %q", e.Key, e.TraceParent, want[e.Key])
		}
	}
	existing, err := s.orders.Existing(s.ctx, []string{a, b})
	if err != nil || existing[a].TraceParent != tp || existing[b].TraceParent != "" {
		t.Fatalf("existing orders %+v %v", existing, err)
	}

	res := s.apply(t, s.now, cancel(a, seckill.ReasonBuyerCancelled), paid(b))
	if res.Outcomes[0].TraceParent != tp || res.Outcomes[1].TraceParent != "" {
		t.Fatalf("report outcomes %+v", res.Outcomes)
	}
	if len(res.Returns) != 1 || res.Returns[0].TraceParent != tp {
		t.Fatalf("returns %+v, want the cancelled order's with its context", res.Returns)
	}
	steps, err := store.NewReturns(s.db).PendingRedisOf(s.ctx, s.sid, s.pid, 10)
	if err != nil || len(steps) != 1 || steps[0].TraceParent != tp {
		t.Fatalf("pending Redis steps %+v %v, want the cancelled order's with its context", steps, err)
	}
	s.published(t, s.now, "key-0000a", "key-0000b")
	pending, err = store.NewOutbox(s.db).Pending(s.ctx, 10)
	if err != nil || len(pending) != 1 || !pending[0].Follow || pending[0].TraceParent != tp {
		t.Fatalf("pending follow events %+v %v, want the cancellation with its order's context", pending, err)
	}
}
