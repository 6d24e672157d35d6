package store_test

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// Level's promises, over many bucket states and adjustments: the parts sum to the
// adjustment exactly, are never negative, a cut never takes more than a bucket holds, and
// the result is level: a bucket that got units ends at most one above any other, a bucket
// that gave units at most one below any other.
func TestLevelProperty(t *testing.T) {
	for _, c := range []struct {
		lefts []int
		delta int
		want  []int
	}{
		{[]int{3, 3, 2, 2}, 4, []int{1, 1, 1, 1}},
		{[]int{3, 3, 2, 2}, -4, []int{2, 2, 0, 0}},
		{[]int{5, 0, 0, 0}, 3, []int{0, 1, 1, 1}},
		{[]int{5, 0, 0, 0}, -5, []int{5, 0, 0, 0}},
		{[]int{0, 3, 3, 3}, -6, []int{0, 2, 2, 2}},
		{[]int{1, 1}, 0, []int{0, 0}},
	} {
		if got := store.Level(c.lefts, c.delta); !slices.Equal(got, c.want) {
			t.Errorf("Level(%v, %d) = %v, want %v", c.lefts, c.delta, got, c.want)
		}
	}
	r := rand.New(rand.NewPCG(27, 13))
	for range 5000 {
		lefts := make([]int, 1+r.IntN(16))
		sum := 0
		for b := range lefts {
			lefts[b] = r.IntN(50)
			sum += lefts[b]
		}
		delta := r.IntN(200)
		if r.IntN(2) == 0 {
			delta = -r.IntN(sum + 1)
		}
		parts := store.Level(lefts, delta)
		after := make([]int, len(lefts))
		total := 0
		for b, p := range parts {
			total += p
			if p < 0 || (delta < 0 && p > lefts[b]) {
				t.Fatalf("Level(%v, %d) = %v: part %d out of range", lefts, delta, parts, b)
			}
			after[b] = lefts[b] + p
			if delta < 0 {
				after[b] = lefts[b] - p
			}
		}
		if total != max(delta, -delta) {
			t.Fatalf("Level(%v, %d) = %v sums to %d", lefts, delta, parts, total)
		}
		for b, p := range parts {
			for c := range after {
				if p > 0 && delta > 0 && after[b] > after[c]+1 || p > 0 && delta < 0 && after[b] < after[c]-1 {
					t.Fatalf("Level(%v, %d) = %v: not level (bucket %d ends at %d, bucket %d at %d)", lefts, delta, parts, b, after[b], c, after[c])
				}
			}
		}
	}
}

// An adjustment of a prize with buckets is planned as transfers from or to outside the
// prize (bucket -1), levelling the buckets, with its audit row; the rows change only when
// the transfers run. Refused, changing nothing: a total below what is sold, a second
// adjustment while one is being applied, a session that ended, a prize without buckets.
// The journal's CHECK takes -1 at one end only.
func TestPlanBucketAdjustment(t *testing.T) {
	f := newBucketFixture(t) // the case prize: 10 units in buckets [3 3 2 2]
	ctx := stacktest.Context(t, 30*time.Second)
	audits := func() int64 {
		var n int64
		if err := f.db.WithContext(ctx).Raw("SELECT COUNT(*) FROM audit_log").Row().Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	planned := func(adj store.BucketAdjustment) []int {
		out := make([]int, 4)
		for _, tr := range adj.Transfers {
			if tr.State != store.TransferPlanned || (tr.From == store.Outside) == (tr.To == store.Outside) {
				t.Fatalf("planned transfer %+v", tr)
			}
			if tr.From == store.Outside {
				out[tr.To] = tr.Requested
			} else {
				out[tr.From] = -tr.Requested
			}
		}
		return out
	}
	run := func(adj store.BucketAdjustment) {
		for _, tr := range adj.Transfers {
			if _, _, err := f.cat.MoveTransfer(ctx, f.fence, tr.ID, tr.Requested); err != nil {
				t.Fatal(err)
			}
			if err := f.cat.FinishTransfer(ctx, f.fence, tr.ID); err != nil {
				t.Fatal(err)
			}
		}
	}

	adj, err := f.cat.PlanBucketAdjustment(ctx, f.sid, f.pid, 14, "ann", "10.0.0.1", "more")
	if err != nil || adj.Before.Total != 10 || !slices.Equal(planned(adj), []int{1, 1, 1, 1}) {
		t.Fatalf("raise to 14: %+v %v, want +1 in each bucket", adj, err)
	}
	if got := lefts(f.buckets(t)); !slices.Equal(got, []int{3, 3, 2, 2}) || audits() != 1 {
		t.Fatalf("after planning: lefts %v, %d audit rows; want the rows unchanged and one audit row", got, audits())
	}
	if _, err := f.cat.PlanBucketAdjustment(ctx, f.sid, f.pid, 20, "ann", "", "again"); !errors.Is(err, seckill.ErrConflict) {
		t.Fatalf("a second adjustment while the first is planned: %v, want ErrConflict", err)
	}
	run(adj)
	if ps, _ := f.cat.PrizeStock(ctx, f.sid, f.pid); ps.Total != 14 || ps.Left != 14 || !slices.Equal(lefts(f.buckets(t)), []int{4, 4, 3, 3}) {
		t.Fatalf("after the raise: %+v, lefts %v", ps, lefts(f.buckets(t)))
	}
	led, err := f.cat.Ledger(ctx, f.sid, f.pid, 4)
	if err != nil {
		t.Fatal(err)
	}
	for b, l := range led {
		if l.Sent != 0 || l.Received != 0 || len(l.Transfers) != 1 {
			t.Errorf("bucket %d's ledger after the raise: %+v, want one transfer id and nothing sent or received", b, l)
		}
	}

	// 5 sold: bucket 0 sold out, bucket 1 sold one.
	if err := f.db.WithContext(ctx).Exec(`UPDATE session_stocks SET left_stock = 0 WHERE session_id = ? AND prize_id = ?`, f.sid, f.pid).Error; err != nil {
		t.Fatal(err)
	}
	if err := f.db.WithContext(ctx).Exec(`UPDATE stock_buckets SET left_stock = 3 WHERE session_id = ? AND prize_id = ? AND bucket = 1`, f.sid, f.pid).Error; err != nil {
		t.Fatal(err)
	}
	if _, err := f.cat.PlanBucketAdjustment(ctx, f.sid, f.pid, 4, "ann", "", "too few"); !errors.Is(err, seckill.ErrConflict) {
		t.Fatalf("a cut below the 5 sold: %v, want ErrConflict", err)
	}
	if open, err := f.cat.UnfinishedTransfers(ctx); err != nil || len(open) != 0 || audits() != 1 {
		t.Fatalf("a refused cut journaled %v (%v), %d audit rows", open, err, audits())
	}
	adj, err = f.cat.PlanBucketAdjustment(ctx, f.sid, f.pid, 8, "ann", "", "fewer")
	if err != nil || !slices.Equal(planned(adj), []int{0, -2, -2, -2}) {
		t.Fatalf("cut to 8: %+v %v, want -2 from buckets 1 to 3", adj, err)
	}
	run(adj)
	if ps, _ := f.cat.PrizeStock(ctx, f.sid, f.pid); ps.Total != 8 || ps.Left != 3 {
		t.Fatalf("after the cut: %+v, want total 8, left 3", ps)
	}
	led, err = f.cat.Ledger(ctx, f.sid, f.pid, 4)
	if err != nil || led[1].Sent != 2 || led[1].Received != 2 || led[0].Sent != 0 {
		t.Fatalf("ledger after the cut: %+v %v, want bucket 1 sent and received 2", led, err)
	}
	adj, err = f.cat.PlanBucketAdjustment(ctx, f.sid, f.pid, 5, "ann", "", "all unsold")
	if err != nil || !slices.Equal(planned(adj), []int{0, -1, -1, -1}) {
		t.Fatalf("cut to exactly what is sold: %+v %v", adj, err)
	}
	// Bucket 1's unit was admitted between the plan and the take: Redis gives up nothing
	// there. The cut removes 2 units, not the 3 its audit row announced, and says so.
	for _, tr := range adj.Transfers {
		taken := tr.Requested
		if tr.From == 1 {
			taken = 0
		}
		if _, _, err := f.cat.MoveTransfer(ctx, f.fence, tr.ID, taken); err != nil {
			t.Fatal(err)
		}
		// Moving again (a reconciler resuming after a crash) audits nothing more.
		if _, _, err := f.cat.MoveTransfer(ctx, f.fence, tr.ID, taken); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := f.cat.Audit(ctx, f.sid, 10)
	if err != nil {
		t.Fatal(err)
	}
	var short []store.AuditEntry
	for _, e := range entries {
		if e.Action == "adjust_stock_short" {
			short = append(short, e)
		}
	}
	if len(short) != 1 || short[0].Actor != "reconciler" || *short[0].PrizeID != f.pid || *short[0].Before != 1 || *short[0].After != 0 ||
		!strings.Contains(short[0].Detail, "bucket 1 gave up 0 of the 1 units planned") {
		t.Fatalf("audit rows of the short cut: %+v, want one naming bucket 1, 0 of 1", short)
	}

	if _, err := f.cat.PlanBucketAdjustment(ctx, f.sid1, f.pid1, 5, "ann", "", "no buckets"); err == nil || errors.Is(err, seckill.ErrConflict) {
		t.Fatalf("a prize without buckets: %v, want a plain error (AdjustStock's business)", err)
	}
	late := store.NewCatalog(f.db, func() time.Time { return t0.Add(3 * time.Hour) })
	if _, err := late.PlanBucketAdjustment(ctx, f.sid, f.pid, 20, "ann", "", "after the end"); !errors.Is(err, store.ErrEnded) {
		t.Fatalf("after the session's end: %v, want ErrEnded", err)
	}
	for _, ends := range [][2]int{{-1, -1}, {-2, 0}, {0, -2}} {
		err := f.db.WithContext(ctx).Exec(`INSERT INTO bucket_transfers (session_id, prize_id, from_bucket, to_bucket, requested, state, fence, created_at, updated_at)
			VALUES (?, ?, ?, ?, 1, 'planned', 0, NOW(6), NOW(6))`, f.sid, f.pid, ends[0], ends[1]).Error
		if err == nil {
			t.Errorf("the journal took a transfer from bucket %d to %d", ends[0], ends[1])
		}
	}
}

// Two adjustments of one prize asked at once (a double submit, or a client retrying a
// PUT that timed out while the first was still planning): exactly one is planned, the
// other is refused as conflicting, as it is when it comes after. Both read the session
// before they wait for the prize's row lock; the check for an earlier adjustment must see
// the one that held the lock, or both are journaled and applied (a raise to 14 twice
// would end at 18).
func TestConcurrentBucketAdjustmentsPlanOnce(t *testing.T) {
	f := newBucketFixture(t) // 10 units in buckets [3 3 2 2]
	ctx := stacktest.Context(t, 30*time.Second)
	holder := f.db.WithContext(ctx).Begin()
	defer holder.Rollback()
	if err := holder.Exec(`SELECT id FROM session_stocks WHERE session_id = ? AND prize_id = ? FOR UPDATE`, f.sid, f.pid).Error; err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := f.cat.PlanBucketAdjustment(ctx, f.sid, f.pid, 14, "ann", "", "twice")
			errs <- err
		}()
	}
	// Both planners wait for the row lock (their statement is running in this database).
	for {
		var waiting int64
		if err := f.db.WithContext(ctx).Raw(`SELECT COUNT(*) FROM information_schema.PROCESSLIST
			WHERE DB = DATABASE() AND ID <> CONNECTION_ID() AND COMMAND = 'Query' AND INFO LIKE '%session_stocks%FOR UPDATE%'`).
			Row().Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting >= 2 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the planners never waited for the row lock (%d waiting)", waiting)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := holder.Rollback().Error; err != nil {
		t.Fatal(err)
	}
	var planned, conflicts int
	for range 2 {
		switch err := <-errs; {
		case err == nil:
			planned++
		case errors.Is(err, seckill.ErrConflict):
			conflicts++
		default:
			t.Fatalf("plan: %v", err)
		}
	}
	open, err := f.cat.UnfinishedTransfersOf(ctx, f.sid, f.pid)
	if err != nil {
		t.Fatal(err)
	}
	if planned != 1 || conflicts != 1 || len(open) != 4 {
		t.Fatalf("%d planned, %d refused, %d transfers journaled; want one adjustment planned (4 transfers), the other refused", planned, conflicts, len(open))
	}
}
