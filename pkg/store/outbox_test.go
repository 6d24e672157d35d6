package store_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// The events that follow an order's creation share its outbox relay but not its row: they
// are published only after the creation event, once each, and a cancelled order's creation
// event is still order.created.
func TestOutboxOrdersFollowEventsAfterCreation(t *testing.T) {
	s := newSale(t, 2, 1, false)
	s.grab(t, "key-0000a", "u0", "key-0000b", "u1")
	a := s.rid("key-0000a")
	s.apply(t, s.now, cancel(a, seckill.ReasonPaymentFailed), paid(a)) // cancelled, then a late payment
	outbox := store.NewOutbox(s.db)

	pending, err := outbox.Pending(s.ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 2 {
		t.Fatalf("%d pending before the creation events are out, want only the 2 creation events: %+v", len(pending), pending)
	}
	var created []int64
	for _, e := range pending {
		var ev event.OrderEvent
		if err := json.Unmarshal(e.Payload, &ev); err != nil {
			t.Fatal(err)
		}
		if e.Follow || e.Schema != "order.v1" || ev.Type != event.OrderCreated || ev.EventID != e.EventID {
			t.Fatalf("creation event %+v: %+v", e, ev)
		}
		created = append(created, e.ID)
	}
	if n, err := outbox.CountPending(s.ctx); err != nil || n != 4 {
		t.Fatalf("%d events pending, want 4 (2 created, 1 cancelled, 1 refund): %v", n, err)
	}
	if err := outbox.MarkPublished(s.ctx, created, time.Now()); err != nil {
		t.Fatal(err)
	}

	pending, err = outbox.Pending(s.ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"order:" + a + ":cancelled": event.OrderCancelled, "order:" + a + ":refund_required": event.OrderRefundRequired}
	if len(pending) != 2 {
		t.Fatalf("pending %+v, want the cancelled and the refund events", pending)
	}
	for _, e := range pending {
		var ev event.OrderEvent
		if err := json.Unmarshal(e.Payload, &ev); err != nil {
			t.Fatal(err)
		}
		if !e.Follow || e.Schema != "order.v2" || e.Key != a || want[e.EventID] != ev.Type || ev.OccurredAt == nil || ev.UserID != "u0" {
			t.Fatalf("follow event %+v: %+v", e, ev)
		}
	}
	// A relay that crashed after producing finds them on the topic and stamps them.
	n, err := outbox.MarkFound(s.ctx, []string{pending[0].EventID, pending[1].EventID, "order:" + s.rid("key-0000b") + ":succeeded"}, time.Now())
	if err != nil || n != 2 {
		t.Fatalf("marked %d found, err %v; want the 2 follow events (the creation event was stamped before)", n, err)
	}
	if n, err := outbox.CountPending(s.ctx); err != nil || n != 0 {
		t.Fatalf("%d events pending after all were stamped: %v", n, err)
	}
}
