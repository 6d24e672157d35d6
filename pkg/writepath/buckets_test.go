package writepath_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/retry"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
	"github.com/seckill-pipeline/seckill/pkg/writepath"
)

// bucketPrize is an open session of one prize of 40 units in 4 buckets of 10, per-user limit
// 1, every bucket loaded into Redis from its row (as preheat does).
type bucketPrize struct {
	db   *gorm.DB
	rdb  redis.UniversalClient
	cat  *store.Catalog
	gate *stock.Gate
	k    seckill.SessionPrize
}

const nBuckets = 4

func newBucketPrize(t *testing.T) *bucketPrize {
	t.Helper()
	op := stacktest.NewBucketedPrize(t, 10, nBuckets, 1)
	return &bucketPrize{db: op.DB, rdb: op.Redis, cat: store.NewCatalog(op.DB, time.Now), gate: op.Gate,
		k: seckill.SessionPrize{Session: op.SessionID, Prize: op.PrizeID}}
}

// users returns n user ids whose home bucket is b.
func usersOf(b, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		u := fmt.Sprintf("user-%d", i)
		if stock.HomeBucket(u, nBuckets) == b {
			out = append(out, u)
		}
	}
	return out
}

func (p *bucketPrize) grab(key, user string, b int) seckill.Grab {
	return seckill.Grab{RequestID: seckill.RequestID(p.k.Session, p.k.Prize, "key-"+key), UserID: user,
		SessionID: p.k.Session, PrizeID: p.k.Prize, Bucket: b, Buckets: nBuckets, AdmittedAt: time.Now().UTC()}
}

// rows returns every bucket's row (left, version), bucket 0 first.
func (p *bucketPrize) rows(t *testing.T) []store.Bucket {
	t.Helper()
	bs, err := p.cat.Buckets(stacktest.Context(t, 10*time.Second), p.k.Session, p.k.Prize)
	if err != nil {
		t.Fatal(err)
	}
	return bs
}

// conflictCount wraps the store and counts the attempts that failed, by kind.
type conflictCount struct {
	writepath.Orders
	mu        sync.Mutex
	conflicts int
	other     []error
}

func (c *conflictCount) PersistFrom(ctx context.Context, session, prize int64, grabs []seckill.Grab, now time.Time, src *store.GrabSource) (store.PersistResult, error) {
	res, err := c.Orders.PersistFrom(ctx, session, prize, grabs, now, src)
	if err != nil {
		c.mu.Lock()
		if errors.Is(err, seckill.ErrConflict) {
			c.conflicts++
		} else {
			c.other = append(c.other, err)
		}
		c.mu.Unlock()
	}
	return res, err
}

// TestPersistAcrossBuckets: the grabs of a prize in 4 buckets, admitted in Redis on each
// bucket's keys, persisted from one goroutine per bucket at once: each group updates its
// own bucket's row, so no attempt conflicts; every bucket's row, the orders' buckets and the
// prize's sums are exact; the outcomes are settled on each bucket's keys. Bucket 3's row
// holds 2 units fewer than Redis admitted (a drift): the excess is stored rejected sold_out
// and its reservations released on bucket 3's keys. Delivering everything again changes
// nothing.
func TestPersistAcrossBuckets(t *testing.T) {
	p := newBucketPrize(t)
	ctx := stacktest.Context(t, 60*time.Second)
	admitted := make([][]seckill.Grab, nBuckets)
	for b := range nBuckets {
		for i, u := range usersOf(b, 12) {
			g := p.grab(fmt.Sprintf("b%d-%02d", b, i), u, b)
			v, err := p.gate.Reserve(ctx, g)
			if err != nil {
				t.Fatal(err)
			}
			// 10 units per bucket: the first 10 users are admitted, the rest sold out.
			if want := map[bool]stock.Code{true: stock.Admitted, false: stock.SoldOut}[i < 10]; v.Code != want {
				t.Fatalf("bucket %d grab %d: %v, want %v", b, i, v.Code, want)
			}
			if v.Code == stock.Admitted {
				admitted[b] = append(admitted[b], g)
			}
		}
	}
	// MySQL has less stock than Redis admitted in bucket 3 (a raise lost, a failover...).
	if err := p.db.WithContext(ctx).Exec(`UPDATE stock_buckets SET total = total - 2, left_stock = left_stock - 2
		WHERE session_id = ? AND prize_id = ? AND bucket = 3`, p.k.Session, p.k.Prize).Error; err != nil {
		t.Fatal(err)
	}
	before := p.rows(t)

	orders := &conflictCount{Orders: store.NewOrders(p.db)}
	w := writepath.New(orders, p.gate, retry.Default(), nil, slog.New(slog.DiscardHandler), time.Now)
	persistAll := func() []store.PersistResult {
		results := make([]store.PersistResult, nBuckets)
		var wg sync.WaitGroup
		errs := make(chan error, nBuckets)
		for b := range nBuckets {
			wg.Add(1)
			go func() {
				defer wg.Done()
				gs := admitted[b]
				// Batches of 3, as a consumer worker would get them from the bucket's partition.
				for i := 0; i < len(gs); i += 3 {
					res, err := w.Persist(ctx, p.k, gs[i:min(i+3, len(gs))])
					if err != nil {
						errs <- fmt.Errorf("bucket %d: %w", b, err)
						return
					}
					if res.Bucket != b {
						errs <- fmt.Errorf("bucket %d persisted as bucket %d", b, res.Bucket)
						return
					}
					results[b].Succeeded += res.Succeeded
					results[b].Rejected += res.Rejected
					results[b].Existing += res.Existing
					w.Settle(ctx, []stock.SettleBatch{w.Settlement(ctx, p.k, res)})
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		return results
	}
	results := persistAll()
	if orders.conflicts != 0 || len(orders.other) != 0 {
		t.Fatalf("%d conflicts and errors %v across buckets, want none: each bucket has its own row", orders.conflicts, orders.other)
	}
	for b, r := range results {
		want := store.PersistResult{Succeeded: 10}
		if b == 3 {
			want = store.PersistResult{Succeeded: 8, Rejected: 2}
		}
		if r.Succeeded != want.Succeeded || r.Rejected != want.Rejected || r.Existing != 0 {
			t.Errorf("bucket %d: %d succeeded %d rejected %d existing, want %d %d 0", b, r.Succeeded, r.Rejected, r.Existing, want.Succeeded, want.Rejected)
		}
	}
	after := p.rows(t)
	for b, row := range after {
		// 4 batches per bucket (3+3+3+1), each a conditional update of its own row; in
		// bucket 3 the last batch has only a sold-out grab and updates nothing.
		updates := int64(4)
		if b == 3 {
			updates = 3
		}
		if row.Left != 0 || row.Version != before[b].Version+updates || row.Total != before[b].Total {
			t.Errorf("bucket %d row %+v, want left 0, version %d, total %d", b, row, before[b].Version+updates, before[b].Total)
		}
	}
	ps, err := p.cat.PrizeStock(ctx, p.k.Session, p.k.Prize)
	if err != nil {
		t.Fatal(err)
	}
	if ps.Total != 38 || ps.Left != 0 {
		t.Errorf("prize stock %+v, want total 38 left 0", ps)
	}
	var byBucket []struct {
		Bucket int
		Status string
		Reason string
		N      int
	}
	if err := p.db.WithContext(ctx).Raw(`SELECT bucket, status, reason, COUNT(*) AS n FROM orders
		WHERE session_id = ? AND prize_id = ? GROUP BY bucket, status, reason ORDER BY bucket, status`, p.k.Session, p.k.Prize).
		Scan(&byBucket).Error; err != nil {
		t.Fatal(err)
	}
	want := "[{0 succeeded  10} {1 succeeded  10} {2 succeeded  10} {3 rejected sold_out 2} {3 succeeded  8}]"
	if got := fmt.Sprint(byBucket); got != want {
		t.Errorf("orders by bucket %s, want %s", got, want)
	}
	// Each order's bucket is its grab's.
	var wrong int64
	for b := range nBuckets {
		var n int64
		rids := make([]string, len(admitted[b]))
		for i, g := range admitted[b] {
			rids[i] = g.RequestID
		}
		if err := p.db.WithContext(ctx).Raw(`SELECT COUNT(*) FROM orders WHERE request_id IN ? AND bucket <> ?`, rids, b).Row().Scan(&n); err != nil {
			t.Fatal(err)
		}
		wrong += n
	}
	if wrong != 0 {
		t.Errorf("%d orders stored in another bucket than their grab's", wrong)
	}
	// The orders as read back (and as their events are built) carry the bucket.
	for b := range nBuckets {
		g := admitted[b][0]
		got, err := store.NewOrders(p.db).Existing(ctx, []string{g.RequestID})
		if err != nil || got[g.RequestID].Bucket != b {
			t.Errorf("order of %s read back as %+v (%v), want bucket %d", g.RequestID, got[g.RequestID], err, b)
		}
		if ev, _ := json.Marshal(event.NewOrderEvent(got[g.RequestID])); strings.Contains(string(ev), `"bucket"`) != (b > 0) {
			t.Errorf("order event of bucket %d: %s", b, ev)
		}
	}

	// Redis learnt every outcome on the bucket's own keys; no reservation is left anywhere.
	for b := range nBuckets {
		k := stock.BucketKeysFor(p.k.Session, p.k.Prize, b, nBuckets)
		if n := p.rdb.HLen(ctx, k.Reserved).Val(); n != 0 {
			t.Errorf("bucket %d: %d reservations left", b, n)
		}
		if n := p.rdb.HLen(ctx, k.Outcomes).Val(); n != int64(len(admitted[b])) {
			t.Errorf("bucket %d: %d outcomes, want %d", b, n, len(admitted[b]))
		}
		for i, g := range admitted[b] {
			out, err := p.rdb.HGet(ctx, k.Outcomes, g.RequestID).Result()
			if err != nil {
				t.Fatalf("bucket %d outcome of %s: %v", b, g.RequestID, err)
			}
			soldOut := b == 3 && i >= 8
			if got := len(out) > 0 && (out[len(g.UserID)+1] == 'r'); got != soldOut {
				t.Errorf("bucket %d outcome of grab %d: %q, sold out %v", b, i, out, soldOut)
			}
			// A rejected grab no longer counts against its user's limit in the bucket.
			held, _ := p.rdb.HGet(ctx, k.Users, g.UserID).Int()
			if wantHeld := map[bool]int{true: 0, false: 1}[soldOut]; held != wantHeld {
				t.Errorf("bucket %d user %s holds %d in redis, want %d", b, g.UserID, held, wantHeld)
			}
		}
	}

	// Redelivery: every group again, at once. Nothing changes.
	for b, r := range persistAll() {
		if r.Succeeded != 0 || r.Rejected != 0 || r.Existing != len(admitted[b]) {
			t.Errorf("redelivered bucket %d: %+v, want %d existing only", b, r, len(admitted[b]))
		}
	}
	if again := p.rows(t); fmt.Sprint(again) != fmt.Sprint(after) {
		t.Errorf("rows after redelivery %v, want %v", again, after)
	}
	var total int64
	if err := p.db.WithContext(ctx).Raw(`SELECT COUNT(*) FROM orders WHERE session_id = ? AND prize_id = ?`, p.k.Session, p.k.Prize).Row().Scan(&total); err != nil {
		t.Fatal(err)
	}
	if total != 40 {
		t.Errorf("%d orders after redelivery, want 40", total)
	}
}

// TestPerUserLimitAcrossBucketsInMySQL: the per-user slots are prize-wide. A forged grab of
// a user in a second bucket (a gateway admits a user only in their home bucket) is rejected
// limit, whether it comes after the user's order or races it from another bucket at the
// same moment; the second bucket's units are never taken.
func TestPerUserLimitAcrossBucketsInMySQL(t *testing.T) {
	p := newBucketPrize(t)
	ctx := stacktest.Context(t, 60*time.Second)
	orders := &conflictCount{Orders: store.NewOrders(p.db)}
	w := writepath.New(orders, p.gate, retry.Default(), nil, slog.New(slog.DiscardHandler), time.Now)

	u := usersOf(0, 1)[0]
	if res, err := w.Persist(ctx, p.k, []seckill.Grab{p.grab("home", u, 0)}); err != nil || res.Succeeded != 1 {
		t.Fatalf("home bucket: %+v %v", res, err)
	}
	res, err := w.Persist(ctx, p.k, []seckill.Grab{p.grab("forged", u, 1)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Outcomes) != 1 || res.Outcomes[0].Status != seckill.OrderRejected || res.Outcomes[0].Reason != seckill.ReasonLimit {
		t.Fatalf("forged grab in bucket 1: %+v, want rejected limit", res.Outcomes)
	}

	// The race: one user's grabs in buckets 1, 2 and 3 at once, several rounds (each a new
	// user), from one goroutine per bucket.
	const rounds = 5
	for r := range rounds {
		user := fmt.Sprintf("racer-%d", r)
		var wg sync.WaitGroup
		outcomes := make([]store.Outcome, nBuckets)
		errs := make([]error, nBuckets)
		for b := 1; b < nBuckets; b++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := w.Persist(ctx, p.k, []seckill.Grab{p.grab(fmt.Sprintf("race-%d-%d", r, b), user, b)})
				errs[b] = err
				if err == nil && len(res.Outcomes) == 1 {
					outcomes[b] = res.Outcomes[0]
				}
			}()
		}
		wg.Wait()
		succeeded := 0
		for b := 1; b < nBuckets; b++ {
			switch {
			case errs[b] != nil:
				t.Fatalf("round %d bucket %d: %v", r, b, errs[b])
			case outcomes[b].Status == seckill.OrderSucceeded:
				succeeded++
			case outcomes[b].Reason != seckill.ReasonLimit:
				t.Fatalf("round %d bucket %d: %+v, want succeeded or rejected limit", r, b, outcomes[b])
			}
		}
		if succeeded != 1 {
			t.Fatalf("round %d: %d of one user's grabs in 3 buckets succeeded, want exactly 1", r, succeeded)
		}
	}
	// Units taken: the home order's in bucket 0 and one per round elsewhere, nothing more.
	taken := 0
	for _, row := range p.rows(t) {
		taken += 10 - row.Left
	}
	var succeeded int64
	if err := p.db.WithContext(ctx).Raw(`SELECT COUNT(*) FROM orders WHERE session_id = ? AND prize_id = ? AND status = 'succeeded'`,
		p.k.Session, p.k.Prize).Row().Scan(&succeeded); err != nil {
		t.Fatal(err)
	}
	if taken != 1+rounds || succeeded != 1+rounds {
		t.Fatalf("%d units taken, %d succeeded orders; want %d of each", taken, succeeded, 1+rounds)
	}
	// What lost a race retried: the unique slot index refused the second slot (1062), never
	// a stock row's version, since each bucket has its own.
	for _, err := range orders.other {
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number != 1062 {
			t.Errorf("a racing attempt failed with %v, want only duplicate slots (1062)", err)
		}
	}
	t.Logf("retried attempts in the races: %d conflicts, %d duplicate slots", orders.conflicts, len(orders.other))
}

// TestBucketOutOfRangeIsPoison: a grab of a bucket the prize does not have (at or above its
// N, or below 0) is dead-lettered at once with ErrNoBucket; nothing is written. Grabs of two
// buckets in one store call are refused too (the write path never groups them so).
func TestBucketOutOfRangeIsPoison(t *testing.T) {
	p := newBucketPrize(t)
	ctx := stacktest.Context(t, 30*time.Second)
	w := writepath.New(store.NewOrders(p.db), p.gate, retry.Default(), nil, slog.New(slog.DiscardHandler), time.Now)
	for _, b := range []int{nBuckets, nBuckets + 7, -1} {
		_, err := w.Persist(ctx, p.k, []seckill.Grab{p.grab(fmt.Sprintf("bad-%d", b), "u", b)})
		var giveUp *writepath.GiveUp
		if !errors.As(err, &giveUp) || giveUp.Action != retry.DeadLetter || giveUp.Attempts != 1 || !errors.Is(err, store.ErrNoBucket) {
			t.Fatalf("bucket %d: %v, want dead-lettered at once with ErrNoBucket", b, err)
		}
	}
	_, err := store.NewOrders(p.db).Persist(ctx, p.k.Session, p.k.Prize,
		[]seckill.Grab{p.grab("m0", "u0", 0), p.grab("m1", "u1", 1)}, time.Now())
	if !errors.Is(err, store.ErrMixedBuckets) {
		t.Fatalf("two buckets in one call: %v, want ErrMixedBuckets", err)
	}
	if a, _ := retry.Default().Decide(1, err); a != retry.DeadLetter {
		t.Fatalf("two buckets in one call: %s, want %s", a, retry.DeadLetter)
	}
	var n int64
	if err := p.db.WithContext(ctx).Raw(`SELECT COUNT(*) FROM orders WHERE session_id = ? AND prize_id = ?`, p.k.Session, p.k.Prize).Row().Scan(&n); err != nil {
		t.Fatal(err)
	}
	for _, row := range p.rows(t) {
		if row.Left != 10 || row.Version != 0 {
			t.Fatalf("row %+v changed by refused grabs", row)
		}
	}
	if n != 0 {
		t.Fatalf("%d orders written by refused grabs", n)
	}
}
