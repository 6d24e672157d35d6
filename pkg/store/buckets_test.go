package store_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// Split's promises, over many totals and bucket counts: the parts sum to the total exactly,
// differ by at most one, are never negative, come in non-increasing order (the remainder
// goes to the first buckets), and the same inputs always give the same parts.
func TestSplitProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 1))
	cases := [][2]int{{0, 1}, {0, 5}, {1, 1}, {1, 7}, {7, 7}, {10, 3}, {1 << 30, 64}, {5, 0}, {5, -2}}
	for range 5000 {
		cases = append(cases, [2]int{r.IntN(1_000_000), 1 + r.IntN(128)})
	}
	for _, c := range cases {
		total, n := c[0], c[1]
		parts := store.Split(total, n)
		if want := max(n, 1); len(parts) != want {
			t.Fatalf("Split(%d, %d): %d parts, want %d", total, n, len(parts), want)
		}
		sum := 0
		for b, p := range parts {
			sum += p
			if p < 0 || (b > 0 && p > parts[b-1]) || parts[0]-p > 1 {
				t.Fatalf("Split(%d, %d) = %v: part %d out of shape", total, n, parts, b)
			}
		}
		if sum != total {
			t.Fatalf("Split(%d, %d) sums to %d", total, n, sum)
		}
		if !slices.Equal(parts, store.Split(total, n)) {
			t.Fatalf("Split(%d, %d) is not deterministic", total, n)
		}
	}
	if got := store.Split(10, 4); !slices.Equal(got, []int{3, 3, 2, 2}) {
		t.Fatalf("Split(10, 4) = %v, want [3 3 2 2]", got)
	}
}

type bucketFixture struct {
	db         *gorm.DB
	cat        *store.Catalog
	sid, pid   int64 // the "case" prize (10 units), split into 4 buckets
	sid1, pid1 int64 // the "phone" prize (3 units), without buckets
	fence      lease.Fence
	lease      *lease.Lease
}

func newBucketFixture(t *testing.T) bucketFixture {
	t.Helper()
	db := migrated(t)
	ctx := stacktest.Context(t, 30*time.Second)
	cat := store.NewCatalog(db, func() time.Time { return t0.Add(-time.Hour) })
	act, err := cat.CreateActivity(ctx, demoActivity(1))
	if err != nil {
		t.Fatal(err)
	}
	sessions, err := cat.Sessions(ctx, act.ID)
	if err != nil {
		t.Fatal(err)
	}
	l := lease.New(db, "t-buckets", time.Minute)
	h, ok, err := l.TryAcquire(ctx)
	if err != nil || !ok {
		t.Fatalf("acquire lease: %v %v", ok, err)
	}
	f := bucketFixture{db: db, cat: cat, sid: sessions[0].ID, pid: act.Prizes[1].ID, sid1: sessions[0].ID, pid1: act.Prizes[0].ID,
		fence: h.Fence, lease: l}
	if err := cat.CreateBuckets(ctx, f.sid, f.pid, 4); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f bucketFixture) buckets(t *testing.T) []store.Bucket {
	t.Helper()
	bs, err := f.cat.Buckets(context.Background(), f.sid, f.pid)
	if err != nil {
		t.Fatal(err)
	}
	return bs
}

func lefts(bs []store.Bucket) []int {
	out := make([]int, len(bs))
	for i, b := range bs {
		out[i] = b.Left
	}
	return out
}

// CreateBuckets splits the row's stock by Split; the prize's sums are the row's stock; a
// prize without buckets reads as before; N is fixed once set.
func TestCreateBucketsAndPrizeStock(t *testing.T) {
	f := newBucketFixture(t)
	ctx := stacktest.Context(t, 30*time.Second)
	bs := f.buckets(t)
	if got := lefts(bs); !slices.Equal(got, []int{3, 3, 2, 2}) {
		t.Fatalf("bucket lefts %v, want [3 3 2 2]", got)
	}
	for i, b := range bs {
		if b.Bucket != i || b.Total != b.Left || b.Version != 0 {
			t.Fatalf("bucket %d: %+v", i, b)
		}
	}
	ps, err := f.cat.PrizeStock(ctx, f.sid, f.pid)
	if err != nil || ps.Total != 10 || ps.Left != 10 || ps.Buckets != 4 {
		t.Fatalf("prize stock %+v %v, want 10 of 10 in 4 buckets", ps, err)
	}
	if err := f.cat.CreateBuckets(ctx, f.sid, f.pid, 4); err != nil {
		t.Fatalf("asking again for the same 4 buckets: %v", err)
	}
	if err := f.cat.CreateBuckets(ctx, f.sid, f.pid, 2); !errors.Is(err, store.ErrBucketsFixed) {
		t.Fatalf("changing 4 buckets to 2: %v, want ErrBucketsFixed", err)
	}
	if n := count(t, f.db, "stock_buckets"); n != 3 {
		t.Fatalf("%d stock_buckets rows, want 3", n)
	}

	// The phone prize has no buckets: its sums are its row, and N = 1 writes nothing.
	if err := f.cat.CreateBuckets(ctx, f.sid1, f.pid1, 1); err != nil {
		t.Fatal(err)
	}
	ps, err = f.cat.PrizeStock(ctx, f.sid1, f.pid1)
	if err != nil || ps.Total != 3 || ps.Left != 3 || ps.Buckets != 1 {
		t.Fatalf("prize stock without buckets %+v %v", ps, err)
	}
	if bs, err := f.cat.Buckets(ctx, f.sid1, f.pid1); err != nil || len(bs) != 1 || bs[0].Left != 3 {
		t.Fatalf("buckets of a prize without buckets: %+v %v", bs, err)
	}
	// The rebalance loop's list names the bucketed prize only, with its sums.
	listed, err := f.cat.BucketedStocks(ctx, f.sid, f.sid1)
	if err != nil || len(listed) != 1 || listed[0] != (store.PrizeStock{SessionID: f.sid, PrizeID: f.pid, Buckets: 4, Total: 10, Left: 10}) {
		t.Fatalf("bucketed stocks %+v %v, want only session %d prize %d, 10 of 10 in 4", listed, err, f.sid, f.pid)
	}
	// A touched row cannot be split any more.
	f.db.Exec("UPDATE session_stocks SET left_stock = left_stock - 1, version = version + 1 WHERE session_id = ? AND prize_id = ?", f.sid1, f.pid1)
	if err := f.cat.CreateBuckets(ctx, f.sid1, f.pid1, 2); !errors.Is(err, store.ErrBucketsFixed) {
		t.Fatalf("splitting a row with an order: %v, want ErrBucketsFixed", err)
	}
}

// The journal's steps: each repeatable without effect, each refused under a stale fence,
// and the move clamped to the source row's left.
func TestTransferJournal(t *testing.T) {
	f := newBucketFixture(t)
	ctx := stacktest.Context(t, 30*time.Second)
	tr, err := f.cat.PlanTransfer(ctx, f.fence, f.sid, f.pid, 0, 3, 2)
	if err != nil || tr.State != store.TransferPlanned || tr.ID == 0 || tr.SessionEnd.IsZero() {
		t.Fatalf("plan: %+v %v", tr, err)
	}
	if _, err := f.cat.PlanTransfer(ctx, f.fence, f.sid, f.pid, 0, 4, 1); err == nil {
		t.Fatal("planned a transfer to bucket 4 of 4")
	}
	if err := f.cat.FinishTransfer(ctx, f.fence, tr.ID); !errors.Is(err, store.ErrTransferState) {
		t.Fatalf("finishing a planned transfer: %v", err)
	}
	moved, ver, err := f.cat.MoveTransfer(ctx, f.fence, tr.ID, 2)
	if err != nil || moved.State != store.TransferMoved || moved.Units != 2 || moved.Taken != 2 || ver != 1 {
		t.Fatalf("move: %+v version %d %v", moved, ver, err)
	}
	if again, ver2, err := f.cat.MoveTransfer(ctx, f.fence, tr.ID, 2); err != nil || again.Units != 2 || ver2 != ver {
		t.Fatalf("repeated move: %+v %d %v", again, ver2, err)
	}
	if got := lefts(f.buckets(t)); !slices.Equal(got, []int{1, 3, 2, 4}) {
		t.Fatalf("lefts after moving 2 from bucket 0 to 3: %v", got)
	}
	if ps, _ := f.cat.PrizeStock(ctx, f.sid, f.pid); ps.Total != 10 || ps.Left != 10 {
		t.Fatalf("prize stock after a move: %+v", ps)
	}
	if err := f.cat.CancelTransfer(ctx, f.fence, tr.ID); !errors.Is(err, store.ErrTransferState) {
		t.Fatalf("cancelling a moved transfer: %v", err)
	}
	open, err := f.cat.UnfinishedTransfers(ctx)
	if err != nil || len(open) != 1 || open[0].ID != tr.ID || open[0].State != store.TransferMoved {
		t.Fatalf("unfinished: %+v %v", open, err)
	}
	for range 2 {
		if err := f.cat.FinishTransfer(ctx, f.fence, tr.ID); err != nil {
			t.Fatal(err)
		}
	}
	if open, err := f.cat.UnfinishedTransfers(ctx); err != nil || len(open) != 0 {
		t.Fatalf("unfinished after done: %+v %v", open, err)
	}

	// Redis took more than MySQL's row holds (writes a failover lost): only the row's left
	// moves, and the row never goes below zero.
	tr2, err := f.cat.PlanTransfer(ctx, f.fence, f.sid, f.pid, 1, 0, 5)
	if err != nil {
		t.Fatal(err)
	}
	moved, _, err = f.cat.MoveTransfer(ctx, f.fence, tr2.ID, 5)
	if err != nil || moved.Taken != 5 || moved.Units != 3 {
		t.Fatalf("clamped move: %+v %v, want 3 of 5 taken", moved, err)
	}
	if got := lefts(f.buckets(t)); !slices.Equal(got, []int{4, 0, 2, 4}) {
		t.Fatalf("lefts after the clamped move: %v", got)
	}

	// Another holder takes the lease: every step of the old fence is refused.
	tr3, err := f.cat.PlanTransfer(ctx, f.fence, f.sid, f.pid, 3, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	f.db.Exec("UPDATE leases SET expires_at = NOW(6) - INTERVAL 1 SECOND WHERE name = ?", f.fence.Name)
	h, ok, err := f.lease.TryAcquire(ctx)
	if err != nil || !ok {
		t.Fatalf("take over the lease: %v %v", ok, err)
	}
	stale := f.fence
	if _, err := f.cat.PlanTransfer(ctx, stale, f.sid, f.pid, 3, 2, 1); !errors.Is(err, lease.ErrStale) {
		t.Fatalf("plan under a stale fence: %v", err)
	}
	if _, _, err := f.cat.MoveTransfer(ctx, stale, tr3.ID, 1); !errors.Is(err, lease.ErrStale) {
		t.Fatalf("move under a stale fence: %v", err)
	}
	if err := f.cat.CancelTransfer(ctx, stale, tr3.ID); !errors.Is(err, lease.ErrStale) {
		t.Fatalf("cancel under a stale fence: %v", err)
	}
	if got := lefts(f.buckets(t)); !slices.Equal(got, []int{4, 0, 2, 4}) {
		t.Fatalf("lefts changed under a stale fence: %v", got)
	}
	if err := f.cat.CancelTransfer(ctx, h.Fence, tr3.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.cat.MoveTransfer(ctx, h.Fence, tr3.ID, 1); !errors.Is(err, store.ErrTransferState) {
		t.Fatalf("moving a cancelled transfer: %v", err)
	}
	all, err := f.cat.Transfers(ctx, f.sid, f.pid)
	if err != nil || len(all) != 3 || all[2].State != store.TransferCancelled {
		t.Fatalf("journal: %+v %v", all, err)
	}

	// The ledger: transfer 1 (0 -> 3, 2 taken, 2 moved, done) and transfer 2 (1 -> 0, 5
	// taken, 3 moved, moved) count; the cancelled one does not.
	led, err := f.cat.Ledger(ctx, f.sid, f.pid, 4)
	if err != nil {
		t.Fatal(err)
	}
	if led[0].Sent != 2 || led[0].Received != 5 || led[1].Sent != 5 || led[1].Received != 0 || led[3].Received != 2 || led[2].Sent+led[2].Received != 0 {
		t.Fatalf("ledger: %+v", led)
	}
	if led[0].Transfers[tr2.ID] != 3 || led[0].Transfers[tr.ID] != 2 || led[1].Transfers[tr2.ID] != 5 || led[3].Transfers[tr.ID] != 2 || len(led[2].Transfers) != 0 {
		t.Fatalf("ledger ids: %+v", led)
	}
}

// A cancelled order's unit goes back to the stock bucket that sold it (orders.bucket): its
// row in MySQL, and its keys in Redis (the return step says the bucket); the per-bucket
// readers (BucketWithReturns, BucketState) count it there.
func TestCancellationReturnsToTheOrdersBucket(t *testing.T) {
	f := newBucketFixture(t)
	ctx := stacktest.Context(t, 30*time.Second)
	var limit int
	if err := f.db.Raw("SELECT per_user_limit FROM session_stocks WHERE session_id = ? AND prize_id = ?", f.sid, f.pid).Scan(&limit).Error; err != nil {
		t.Fatal(err)
	}
	// u0's order was sold by bucket 0, u2's by bucket 2: each took a unit of its row.
	for _, o := range []struct {
		user   string
		bucket int
	}{{"u0", 0}, {"u2", 2}} {
		if err := f.db.Exec(`INSERT INTO orders (request_id, user_id, session_id, prize_id, status, reason, per_user_limit, slot,
			admitted_at, created_at, bucket) VALUES (?, ?, ?, ?, 'succeeded', '', ?, 1, NOW(6), NOW(6), ?)`,
			seckill.RequestID(f.sid, f.pid, "k-"+o.user), o.user, f.sid, f.pid, limit, o.bucket).Error; err != nil {
			t.Fatal(err)
		}
	}
	f.db.Exec("UPDATE session_stocks SET left_stock = left_stock - 1, version = version + 1 WHERE session_id = ? AND prize_id = ?", f.sid, f.pid)
	f.db.Exec("UPDATE stock_buckets SET left_stock = left_stock - 1, version = version + 1 WHERE session_id = ? AND prize_id = ? AND bucket = 2", f.sid, f.pid)
	if got := lefts(f.buckets(t)); !slices.Equal(got, []int{2, 3, 1, 2}) {
		t.Fatalf("bucket lefts before %v", got)
	}

	orders := store.NewOrders(f.db)
	var fb []seckill.Feedback
	for _, u := range []string{"u0", "u2"} {
		fb = append(fb, seckill.Feedback{RequestID: seckill.RequestID(f.sid, f.pid, "k-"+u), Kind: seckill.FeedbackCancelled,
			Reason: seckill.ReasonBuyerCancelled, At: t0})
	}
	res, err := orders.ApplyFeedback(ctx, nil, f.sid, f.pid, fb, t0)
	if err != nil || res.Cancelled != 2 {
		t.Fatalf("cancel: %+v %v", res, err)
	}
	if got := lefts(f.buckets(t)); !slices.Equal(got, []int{3, 3, 2, 2}) {
		t.Fatalf("bucket lefts after the cancellations %v, want [3 3 2 2]: each unit back in its own bucket", got)
	}
	buckets := map[string]int{}
	for _, r := range res.Returns {
		buckets[r.UserID] = r.Bucket
	}
	if buckets["u0"] != 0 || buckets["u2"] != 2 || len(buckets) != 2 {
		t.Fatalf("return steps' buckets %v, want u0: 0, u2: 2", buckets)
	}
	pending, err := store.NewReturns(f.db).PendingRedisOf(ctx, f.sid, f.pid, 10)
	if err != nil || len(pending) != 2 {
		t.Fatalf("pending returns %+v %v", pending, err)
	}
	for _, r := range pending {
		if r.Bucket != buckets[r.UserID] {
			t.Fatalf("pending return of %s in bucket %d, want %d", r.UserID, r.Bucket, buckets[r.UserID])
		}
	}
	if st, cancelled, err := f.cat.BucketWithReturns(ctx, f.sid, f.pid, 2); err != nil || cancelled != 1 || st.Left != 2 || st.PerUserLimit != limit {
		t.Fatalf("bucket 2 with returns: %+v, %d cancelled, %v", st, cancelled, err)
	}
	if st, err := orders.BucketState(ctx, f.sid, f.pid, 2); err != nil || len(st.Orders) != 1 || st.Orders[0].UserID != "u2" || len(st.Resale) != 1 {
		t.Fatalf("bucket 2's state: %+v %v", st, err)
	}
}
