package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// The archive moves an ended session's orders out of the hot table only once no job has
// work on them, and afterwards every promise is still checkable: a request id answers its
// status from the archive, a replayed grab event finds its order there (never a second
// order), the per-user limit counts archived slots, and total = left + succeeded holds over
// both tables. On the way it measures what an order row costs (data and indexes).
func TestArchiveKeepsEveryPromiseCheckable(t *testing.T) {
	const sold, stockTotal = 4000, 5000
	s := newSale(t, stockTotal, 1, false)
	var grabs []seckill.Grab
	for i := 0; i < sold; i++ {
		grabs = append(grabs, seckill.Grab{RequestID: s.rid(fmt.Sprintf("key-%05d", i)), UserID: fmt.Sprintf("u%d", i),
			SessionID: s.sid, PrizeID: s.pid, AdmittedAt: s.now})
	}
	for i := 0; i < len(grabs); i += 1000 {
		res, err := s.orders.Persist(s.ctx, s.sid, s.pid, grabs[i:i+1000], s.now)
		if err != nil || res.Succeeded != 1000 {
			t.Fatalf("persist batch %d: %d succeeded, %v", i/1000, res.Succeeded, err)
		}
	}
	size, err := store.SizeOf(s.ctx, s.db, "orders")
	if err != nil {
		t.Fatal(err)
	}
	// The figure docs/operators.md (Retention and capacity) quotes. InnoDB's estimate of the
	// row count and its page granularity make it approximate; a figure outside this range
	// means the schema changed and the page must be updated.
	t.Logf("orders: %d rows (estimate), data %d B, indexes %d B: %.0f B per order", size.Rows, size.DataBytes, size.IndexBytes, size.BytesPerRow)
	if size.BytesPerRow < 150 || size.BytesPerRow > 1500 {
		t.Errorf("%.0f bytes per order row: outside 150..1500, recheck the capacity figures", size.BytesPerRow)
	}

	// u0 cancels: an order.cancelled event and a stock return join the order.
	s.apply(t, s.now, cancel(grabs[0].RequestID, seckill.ReasonBuyerCancelled))
	// The session ended two days ago.
	if err := s.db.Exec("UPDATE sessions SET starts_at = ?, ends_at = ? WHERE id = ?",
		s.now.Add(-50*time.Hour), s.now.Add(-49*time.Hour), s.sid).Error; err != nil {
		t.Fatal(err)
	}
	archive := store.NewArchive(s.db)
	cutoff := s.now.Add(-48 * time.Hour)
	// Each job's unfinished work keeps the orders where the job reads them; the steps settle
	// it one at a time, as the jobs would.
	steps := []struct {
		want   store.ArchiveSkip
		settle string
	}{
		{store.SkipNotReported, "INSERT INTO session_reports (session_id, prize_id, total, sold, left_stock, rejected, drift_corrected, reported_at) VALUES (?, ?, 5000, 3999, 1001, 0, 0, NOW(6))"},
		{store.SkipEventsPending, "UPDATE orders SET event_published_at = NOW(6) WHERE session_id = ? AND prize_id = ?"},
		{store.SkipEventsPending, "UPDATE order_events SET published_at = NOW(6) WHERE ? > 0 AND ? > 0"},
		{store.SkipReturnsPending, "UPDATE stock_returns SET redis_done_at = NOW(6) WHERE session_id = ? AND prize_id = ?"},
		{store.SkipUnpaidOrders, "UPDATE orders SET paid_at = NOW(6) WHERE session_id = ? AND prize_id = ? AND status = 'succeeded'"},
		{store.SkipOpenCases, "UPDATE exception_cases SET state = 'resolved' WHERE session_id = ? AND ? > 0"},
		{"", ""},
	}
	if err := s.db.Exec(`INSERT INTO exception_cases (kind, case_key, request_id, session_id, prize_id, first_seen_at, last_seen_at, state)
		VALUES ('stale_reservation', 'k', 'r', ?, ?, NOW(6), NOW(6), 'open')`, s.sid, s.pid).Error; err != nil {
		t.Fatal(err)
	}
	for i, st := range steps {
		cands, err := archive.Candidates(s.ctx, cutoff)
		if err != nil {
			t.Fatal(err)
		}
		if len(cands) != 1 || cands[0].Skip != st.want || cands[0].Orders != sold {
			t.Fatalf("step %d: candidates %+v, want one with %d orders, skip %q", i, cands, sold, st.want)
		}
		if st.settle != "" {
			if err := s.db.Exec(st.settle, s.sid, s.pid).Error; err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
		}
	}
	if cands, _ := archive.Candidates(s.ctx, s.now.Add(-50*time.Hour)); len(cands) != 0 {
		t.Fatalf("a session that ended after the cutoff is a candidate: %+v", cands)
	}

	moved, err := archive.Move(s.ctx, s.sid, s.pid, 700, s.now)
	if err != nil || moved != sold {
		t.Fatalf("moved %d, %v; want %d", moved, err, sold)
	}
	for q, want := range map[string]int{
		"SELECT COUNT(*) FROM orders":                0,
		"SELECT COUNT(*) FROM orders_archive":        sold,
		"SELECT COUNT(*) FROM order_events":          0,
		"SELECT COUNT(*) FROM order_events_archive":  1,
		"SELECT COUNT(*) FROM stock_returns":         0,
		"SELECT COUNT(*) FROM stock_returns_archive": 1,
	} {
		if got := s.n(t, q); got != want {
			t.Errorf("%s: %d, want %d", q, got, want)
		}
	}

	// Status by request id, from the archive.
	o, err := s.orders.ByRequestID(s.ctx, grabs[0].RequestID)
	if err != nil || o.Status != seckill.OrderCancelled || o.UserID != "u0" {
		t.Fatalf("archived cancelled order: %+v %v", o, err)
	}
	o, err = s.orders.ByRequestID(s.ctx, grabs[7].RequestID)
	if err != nil || o.Status != seckill.OrderSucceeded || o.PaidAt == nil {
		t.Fatalf("archived paid order: %+v %v", o, err)
	}
	if got, err := s.orders.Existing(s.ctx, []string{grabs[1].RequestID, "no-such-request"}); err != nil || len(got) != 1 {
		t.Fatalf("existing over the archive: %+v %v", got, err)
	}

	// The whole grab topic replayed after archiving (a consumer group rewound, a
	// compensation replay): every request id is found, nothing persisted twice.
	before := s.left(t)
	for i := 0; i < len(grabs); i += 1000 {
		res, err := s.orders.Persist(s.ctx, s.sid, s.pid, grabs[i:i+1000], s.now)
		if err != nil || res.Existing != 1000 || res.Succeeded+res.Rejected != 0 {
			t.Fatalf("replay of batch %d after archiving: %d found, %d succeeded, %d rejected (new orders), %v",
				i/1000, res.Existing, res.Succeeded, res.Rejected, err)
		}
	}
	if n := s.n(t, "SELECT COUNT(*) FROM orders"); n != 0 || s.left(t) != before {
		t.Fatalf("replay wrote %d orders, left %d -> %d", n, before, s.left(t))
	}
	// A late grab of a user whose order is archived meets the per-user limit there; one of a
	// new user takes a unit.
	if got := s.grab(t, "key-late-u1", "u1", "key-late-new", "newcomer"); fmt.Sprint(got) != "[rejected succeeded]" {
		t.Fatalf("late grabs after archiving: %v, want [rejected succeeded]", got)
	}
	succeeded := s.n(t, `SELECT (SELECT COUNT(*) FROM orders WHERE status = 'succeeded') +
		(SELECT COUNT(*) FROM orders_archive WHERE status = 'succeeded')`)
	if s.left(t)+succeeded != stockTotal {
		t.Fatalf("total %d != left %d + succeeded %d over orders and the archive", stockTotal, s.left(t), succeeded)
	}
	// Orders written after the stamp are archived by the next run; a run after that moves nothing.
	if moved, err := archive.Move(s.ctx, s.sid, s.pid, 700, s.now); err != nil || moved != 2 {
		t.Fatalf("second run moved %d, %v; want the 2 late orders", moved, err)
	}
	if moved, err := archive.Move(s.ctx, s.sid, s.pid, 700, s.now); err != nil || moved != 0 {
		t.Fatalf("third run moved %d, %v", moved, err)
	}
}
