package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// grabsOf returns one grab per key, user = key.
func (s *sale) grabsOf(keys ...string) []seckill.Grab {
	out := make([]seckill.Grab, len(keys))
	for i, k := range keys {
		out[i] = seckill.Grab{RequestID: s.rid(k), UserID: k, SessionID: s.sid, PrizeID: s.pid, AdmittedAt: s.now}
	}
	return out
}

func (s *sale) pending(t *testing.T) int64 {
	t.Helper()
	n, err := store.NewOutbox(s.db).CountPending(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A batch persisted under a current claim carries its partition and sequence number and
// returns its events for the consumer; the relay does not see it; its progress row, written
// once, publishes it as far as every reader is concerned, and never moves back.
func TestBatchPathOrdersArePublishedByProgress(t *testing.T) {
	s := newSale(t, 10, 1, false)
	progress := store.NewEventProgress(s.db)
	outbox := store.NewOutbox(s.db)
	claim, err := progress.Claim(s.ctx, 3)
	if err != nil || claim.Epoch != 1 || claim.NextSeq != 0 || len(claim.ScanFrom) != 0 {
		t.Fatalf("first claim %+v, %v; want epoch 1 at sequence 0", claim, err)
	}
	src := &store.GrabSource{Partition: 3, Epoch: claim.Epoch, Seq: claim.NextSeq}
	res, err := s.orders.PersistFrom(s.ctx, s.sid, s.pid, s.grabsOf("a", "b", "c"), s.now, src)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Events) != 3 || res.Events[0].Key != s.rid("a") || res.Events[0].EventID != "order:"+s.rid("a")+":succeeded" {
		t.Fatalf("events %+v, want the 3 creation events", res.Events)
	}
	if p, err := outbox.Pending(s.ctx, 10); err != nil || len(p) != 0 {
		t.Fatalf("relay sees %d batch-path events (%v), want none", len(p), err)
	}
	if n := s.pending(t); n != 3 {
		t.Fatalf("pending %d before the progress write, want 3", n)
	}
	un, err := progress.Unrecorded(s.ctx, 3, 0)
	if err != nil || len(un) != 3 || un[0].Seq != 0 {
		t.Fatalf("unrecorded %+v %v, want the 3 orders at sequence 0", un, err)
	}
	// A cancellation waits for its order's creation event, here for the progress write.
	s.apply(t, s.now, cancel(s.rid("a"), seckill.ReasonBuyerCancelled))
	if p, err := outbox.Pending(s.ctx, 10); err != nil || len(p) != 0 {
		t.Fatalf("relay sees %+v (%v) before the creation event is recorded, want nothing", p, err)
	}
	// The payment timeout does not count before the event is recorded published...
	timeout := seckill.Feedback{RequestID: s.rid("b"), Kind: seckill.FeedbackCancelled, Reason: seckill.ReasonPaymentTimeout,
		At: s.now, DueBefore: s.now.Add(time.Hour)}
	s.apply(t, s.now, timeout)
	if n := s.n(t, "SELECT COUNT(*) FROM orders WHERE status = 'cancelled'"); n != 1 {
		t.Fatalf("%d cancelled, want a alone: b's event is not recorded published", n)
	}
	if ok, err := progress.Advance(s.ctx, 3, claim.Epoch, 1, map[int]int64{0: 7}); err != nil || !ok {
		t.Fatalf("advance: %v %v", ok, err)
	}
	if un, err := progress.Unrecorded(s.ctx, 3, 1); err != nil || len(un) != 0 {
		t.Fatalf("unrecorded after the progress write: %+v %v", un, err)
	}
	if p, err := outbox.Pending(s.ctx, 10); err != nil || len(p) != 1 || !p[0].Follow {
		t.Fatalf("relay sees %+v (%v), want the cancellation alone", p, err)
	}
	if n := s.pending(t); n != 1 {
		t.Fatalf("pending %d after the progress write, want the cancellation", n)
	}
	// ...and counts from the commit once it is.
	s.apply(t, s.now, timeout)
	if n := s.n(t, "SELECT COUNT(*) FROM orders WHERE status = 'cancelled'"); n != 2 {
		t.Fatalf("%d cancelled, want a and b (timed out)", n)
	}
	// Monotone: the same or a lower sequence number changes nothing.
	for _, next := range []int64{1, 0} {
		if ok, err := progress.Advance(s.ctx, 3, claim.Epoch, next, nil); err != nil || ok {
			t.Fatalf("advance to %d after 1: %v %v, want refused", next, ok, err)
		}
	}
	// An unpaid order published from memory is due for its payment timeout from its commit.
	if n, err := s.orders.CountUnpublishedUnpaid(s.ctx, s.sid, s.pid, s.now.Add(time.Hour)); err != nil || n != 0 {
		t.Fatalf("%d unpublished unpaid (%v), want 0", n, err)
	}
	due, err := s.orders.DueUnpaid(s.ctx, s.sid, s.pid, s.now.Add(time.Hour), 0, 10)
	if err != nil || len(due) != 1 {
		t.Fatalf("due %+v (%v), want c", due, err)
	}
	again, err := progress.Claim(s.ctx, 3)
	if err != nil || again.Epoch != 2 || again.NextSeq != 1 || again.ScanFrom[0] != 7 {
		t.Fatalf("second claim %+v %v, want epoch 2 at sequence 1 scanning from 7", again, err)
	}
}

// A writer whose claim was taken over (it lost the partition's lock; a new owner claimed)
// stores its orders on the stamp path and cannot move the progress: the new owner's
// recovery never races its publish.
func TestTakenOverClaimFallsBackToTheRelay(t *testing.T) {
	s := newSale(t, 10, 1, false)
	progress := store.NewEventProgress(s.db)
	old, err := progress.Claim(s.ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The takeover lands between the transaction's stock read and its insert.
	orders := store.NewOrders(s.db, store.WithAfterRead(func(ctx context.Context, _, _ int64) {
		if _, err := progress.Claim(context.WithoutCancel(ctx), 0); err != nil {
			t.Error(err)
		}
	}))
	res, err := orders.PersistFrom(s.ctx, s.sid, s.pid, s.grabsOf("a", "b"), s.now, &store.GrabSource{Partition: 0, Epoch: old.Epoch})
	if err != nil {
		t.Fatal(err)
	}
	if res.Events != nil || res.Succeeded != 2 {
		t.Fatalf("result %+v: want 2 orders and no events to publish from memory", res)
	}
	if p, err := store.NewOutbox(s.db).Pending(s.ctx, 10); err != nil || len(p) != 2 {
		t.Fatalf("relay sees %d (%v), want the 2 orders", len(p), err)
	}
	if un, err := progress.Unrecorded(s.ctx, 0, 0); err != nil || len(un) != 0 {
		t.Fatalf("unrecorded %+v %v: the fenced orders are the relay's", un, err)
	}
	if ok, err := progress.Advance(s.ctx, 0, old.Epoch, 1, nil); err != nil || ok {
		t.Fatalf("a taken-over claim advanced: %v %v", ok, err)
	}
	// No source at all (compensation replay, workbench): the stamp path too.
	res, err = s.orders.Persist(s.ctx, s.sid, s.pid, s.grabsOf("c"), s.now)
	if err != nil || res.Events != nil {
		t.Fatalf("persist without source: %+v %v", res, err)
	}
	if n := s.pending(t); n != 3 {
		t.Fatalf("pending %d, want 3", n)
	}
}

// A retry of a batch whose commit the client could not confirm (a connection cut during
// COMMIT) finds the orders it wrote already there. Their events were never published: the
// retry must hand them back for the batch to publish, or the progress write that follows
// would record them as published and nothing would ever publish them.
func TestRetryAfterAnUnconfirmedCommitReturnsItsEvents(t *testing.T) {
	s := newSale(t, 10, 1, false)
	progress := store.NewEventProgress(s.db)
	claim, err := progress.Claim(s.ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	src := &store.GrabSource{Partition: 2, Epoch: claim.Epoch, Seq: claim.NextSeq}
	if _, err := s.orders.PersistFrom(s.ctx, s.sid, s.pid, s.grabsOf("a", "b"), s.now, src); err != nil {
		t.Fatal(err) // committed; say the caller never heard so
	}
	res, err := s.orders.PersistFrom(s.ctx, s.sid, s.pid, s.grabsOf("a", "b", "c"), s.now, src)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, e := range res.Events {
		got[e.Key] = true
	}
	if len(res.Events) != 3 || !got[s.rid("a")] || !got[s.rid("b")] || !got[s.rid("c")] || res.Existing != 2 {
		t.Fatalf("retry returned events %+v (existing %d), want a's, b's and c's (a and b existing)", res.Events, res.Existing)
	}

	// Once recorded, a later batch (or a redelivery under a newer sequence) returns none of them.
	if ok, err := progress.Advance(s.ctx, 2, claim.Epoch, src.Seq+1, nil); err != nil || !ok {
		t.Fatalf("advance: %v %v", ok, err)
	}
	next := &store.GrabSource{Partition: 2, Epoch: claim.Epoch, Seq: src.Seq + 1}
	res, err = s.orders.PersistFrom(s.ctx, s.sid, s.pid, s.grabsOf("a", "b", "c"), s.now, next)
	if err != nil || len(res.Events) != 0 {
		t.Fatalf("redelivery under the next sequence returned %+v (%v), want no event", res.Events, err)
	}
	// Under a claim taken over, none either: they belong to the new holder's recovery.
	if _, err := progress.Claim(s.ctx, 2); err != nil {
		t.Fatal(err)
	}
	res, err = s.orders.PersistFrom(s.ctx, s.sid, s.pid, s.grabsOf("a"), s.now, src)
	if err != nil || len(res.Events) != 0 {
		t.Fatalf("stale claim returned %+v (%v), want no event", res.Events, err)
	}
}

// An order whose event went out from memory is recorded published by its partition's
// progress, which the archive does not carry: archived, it must still read as published.
func TestArchivedBatchPathOrderReadsPublished(t *testing.T) {
	s := newSale(t, 10, 1, false)
	progress := store.NewEventProgress(s.db)
	claim, err := progress.Claim(s.ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	src := &store.GrabSource{Partition: 4, Epoch: claim.Epoch, Seq: claim.NextSeq}
	if _, err := s.orders.PersistFrom(s.ctx, s.sid, s.pid, s.grabsOf("a", "b"), s.now, src); err != nil {
		t.Fatal(err)
	}
	if ok, err := progress.Advance(s.ctx, 4, claim.Epoch, src.Seq+1, nil); err != nil || !ok {
		t.Fatalf("advance: %v %v", ok, err)
	}
	if moved, err := store.NewArchive(s.db).Move(s.ctx, s.sid, s.pid, 10, s.now); err != nil || moved != 2 {
		t.Fatalf("moved %d, %v; want 2", moved, err)
	}
	if n := s.n(t, "SELECT COUNT(*) FROM orders_archive WHERE event_published_at IS NULL"); n != 0 {
		t.Fatalf("%d archived orders read unpublished, want 0", n)
	}
}

// The event published from memory is byte for byte the one a recovery rebuilds from the
// stored order (times at the microsecond DATETIME(6) keeps), so a repeat after an unclear
// produce carries the same payload; and the relay's recovery scan, which stamps the orders
// whose events it finds on the topic, leaves batch-path orders to their progress row.
func TestMemoryEventIsTheStoredOrdersEvent(t *testing.T) {
	s := newSale(t, 10, 1, false)
	progress := store.NewEventProgress(s.db)
	claim, err := progress.Claim(s.ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	src := &store.GrabSource{Partition: 5, Epoch: claim.Epoch, Seq: claim.NextSeq}
	now := time.Date(2026, 12, 2, 1, 2, 3, 123456789, time.UTC) // below the microsecond
	grabs := s.grabsOf("a")
	grabs[0].AdmittedAt = now.Add(-time.Millisecond)
	res, err := s.orders.PersistFrom(s.ctx, s.sid, s.pid, grabs, now, src)
	if err != nil || len(res.Events) != 1 {
		t.Fatalf("%d events, %v", len(res.Events), err)
	}
	stored, err := progress.Unrecorded(s.ctx, 5, src.Seq)
	if err != nil || len(stored) != 1 {
		t.Fatalf("%d unrecorded, %v", len(stored), err)
	}
	if string(res.Events[0].Payload) != string(stored[0].Payload) {
		t.Fatalf("from memory:\n%s\nrebuilt from the order:\n%s", res.Events[0].Payload, stored[0].Payload)
	}
	if n, err := store.NewOutbox(s.db).MarkFound(s.ctx, []string{res.Events[0].EventID}, s.now); err != nil || n != 0 {
		t.Fatalf("the relay's scan stamped %d batch-path orders (%v), want 0", n, err)
	}
}
