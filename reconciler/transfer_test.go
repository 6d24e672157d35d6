package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// bucketSale is an open session of one prize of 10 units in 4 buckets (3, 3, 2, 2), each
// bucket loaded into Redis, with one grab admitted in bucket 0 and not yet persisted (so
// Redis's bucket 0 holds one unit less than its row, as during a sale).
type bucketSale struct {
	db       *gorm.DB
	rdb      redis.UniversalClient
	cat      *store.Catalog
	gate     *stock.Gate
	lease    *lease.Lease
	name     string // the lease's
	sid, pid int64
	now      func() time.Time // the executors' clock; nil: time.Now
}

const saleBuckets = 4

func newBucketSale(t *testing.T, rdb redis.UniversalClient) *bucketSale {
	t.Helper()
	_, db := stacktest.Migrated(t)
	ctx := stacktest.Context(t, 30*time.Second)
	now := time.Now().UTC()
	cat := store.NewCatalog(db, func() time.Time { return now })
	act, err := cat.CreateActivity(ctx, seckill.Activity{Name: "buckets", WindowStart: now.Add(-time.Minute),
		WindowEnd: now.Add(time.Hour), Interval: time.Hour, SessionLength: time.Hour, PerUserLimit: 1,
		Prizes: []seckill.Prize{{Name: "hot", StockPerSession: 10}}})
	if err != nil {
		t.Fatal(err)
	}
	sessions, err := cat.Sessions(ctx, act.ID)
	if err != nil {
		t.Fatal(err)
	}
	s := &bucketSale{db: db, rdb: rdb, cat: cat, sid: sessions[0].ID, pid: act.Prizes[0].ID, name: "t-transfer-" + stacktest.ID(t)}
	s.lease = lease.New(db, s.name, time.Minute)
	if err := cat.CreateBuckets(ctx, s.sid, s.pid, saleBuckets); err != nil {
		t.Fatal(err)
	}
	if s.gate, err = stock.NewGate(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.gate.Close)
	t.Cleanup(func() {
		for b := range saleBuckets {
			k := stock.BucketKeysFor(s.sid, s.pid, b, saleBuckets)
			// One call per bucket: a cluster refuses keys of two slots in one DEL.
			rdb.Del(context.Background(), k.Meta, k.Users, k.Reserved, k.Outcomes, k.Fence, k.Returned, k.Transfers(),
				k.Meta[:len(k.Meta)-len("meta")]+"rev")
		}
	})
	bs, err := cat.Buckets(ctx, s.sid, s.pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bs {
		s.load(t, b.Bucket)
	}
	v, err := s.gate.Reserve(ctx, seckill.Grab{RequestID: seckill.RequestID(s.sid, s.pid, "k1"), UserID: "u1",
		SessionID: s.sid, PrizeID: s.pid, AdmittedAt: now})
	if err != nil || v.Code != stock.Admitted {
		t.Fatalf("admit one grab in bucket 0: %+v %v", v, err)
	}
	return s
}

// row reads bucket b's row and its ledger of the transfers journal.
func (s *bucketSale) row(t *testing.T, b int) (seckill.Stock, seckill.BucketLedger) {
	t.Helper()
	ctx := stacktest.Context(t, 10*time.Second)
	bs, err := s.cat.Buckets(ctx, s.sid, s.pid)
	if err != nil {
		t.Fatal(err)
	}
	led, err := s.cat.Ledger(ctx, s.sid, s.pid, saleBuckets)
	if err != nil {
		t.Fatal(err)
	}
	return seckill.Stock{SessionID: s.sid, PrizeID: s.pid, Total: bs[b].Total, Left: bs[b].Left, Version: bs[b].Version, PerUserLimit: 1}, led[b]
}

// load preheats bucket b from its row and the journal's ledger, as preheat does.
// admitIn admits user's grab (Idempotency-Key key) in stock bucket b, pending in b's keys.
func (s *bucketSale) admitIn(t *testing.T, b int, user, key string) {
	t.Helper()
	ctx := stacktest.Context(t, 10*time.Second)
	v, err := s.gate.Reserve(ctx, seckill.Grab{RequestID: seckill.RequestID(s.sid, s.pid, key), UserID: user,
		SessionID: s.sid, PrizeID: s.pid, Bucket: b, Buckets: saleBuckets, AdmittedAt: time.Now()})
	if err != nil || v.Code != stock.Admitted {
		t.Fatalf("admit one grab in bucket %d: %+v %v", b, v, err)
	}
}

func (s *bucketSale) load(t *testing.T, b int) {
	t.Helper()
	st, led := s.row(t, b)
	if r, err := s.gate.LoadBucket(stacktest.Context(t, 10*time.Second), st, b, saleBuckets, led, time.Now().Add(2*time.Hour)); err != nil || !r.Loaded {
		t.Fatalf("load bucket %d: %+v %v", b, r, err)
	}
}

// rebuild recreates bucket b from its row and the journal's ledger under fence f (no orders:
// buckets 1 and 3 have none).
func (s *bucketSale) rebuild(t *testing.T, b int, f lease.Fence) {
	t.Helper()
	st, led := s.row(t, b)
	created, err := s.gate.RebuildBucket(stacktest.Context(t, 10*time.Second), st, b, saleBuckets, nil, nil, nil, led, time.Now().Add(2*time.Hour), f.Number)
	if err != nil || !created {
		t.Fatalf("rebuild bucket %d: %v %v", b, created, err)
	}
}

// lose deletes every key of bucket b, as a Redis that lost its data would.
func (s *bucketSale) lose(t *testing.T, b int) {
	t.Helper()
	k := stock.BucketKeysFor(s.sid, s.pid, b, saleBuckets)
	if err := s.rdb.Del(stacktest.Context(t, 5*time.Second), k.Meta, k.Users, k.Reserved, k.Outcomes, k.Fence, k.Returned, k.Transfers(),
		k.Meta[:len(k.Meta)-len("meta")]+"rev").Err(); err != nil {
		t.Fatal(err)
	}
}

func (s *bucketSale) acquire(t *testing.T) lease.Fence {
	t.Helper()
	ctx := stacktest.Context(t, 10*time.Second)
	// Expire whoever holds it: a takeover, as after a holder's death or pause.
	if err := s.db.WithContext(ctx).Exec("UPDATE leases SET expires_at = NOW(6) - INTERVAL 1 SECOND WHERE name = ?", s.name).Error; err != nil {
		t.Fatal(err)
	}
	h, ok, err := s.lease.TryAcquire(ctx)
	if err != nil || !ok {
		t.Fatalf("acquire the lease: %v %v", ok, err)
	}
	return h.Fence
}

func (s *bucketSale) executor(after func(store.Transfer, transferStep) error) transferExecutor {
	now := s.now
	if now == nil {
		now = time.Now
	}
	return transferExecutor{catalog: s.cat, gate: s.gate, grace: time.Hour, after: after, now: now}
}

// state reads both sides: per bucket MySQL's left and Redis's left, and Redis's in-flight
// units.
type saleState struct {
	mysql, redis []int
	mysqlTotal   int
	inFlight     int64
}

func (s *bucketSale) state(t *testing.T) saleState {
	t.Helper()
	ctx := stacktest.Context(t, 10*time.Second)
	bs, err := s.cat.Buckets(ctx, s.sid, s.pid)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := s.gate.Buckets(ctx, s.sid, s.pid, saleBuckets)
	if err != nil {
		t.Fatal(err)
	}
	var st saleState
	for b := range saleBuckets {
		st.mysql = append(st.mysql, bs[b].Left)
		st.mysqlTotal += bs[b].Total
		st.redis = append(st.redis, int(rs[b].Left))
	}
	st.inFlight = stock.InFlight(rs)
	return st
}

// check asserts what holds at every instant: each bucket's Redis left is at most its row's
// (no unit Redis admits lacks a row to persist into), the prize's total in MySQL never
// changes, and every unit is somewhere: in a Redis bucket, in the one pending reservation,
// or in flight between buckets.
func (st saleState) check(t *testing.T, when string) {
	t.Helper()
	for b := range st.mysql {
		if st.redis[b] > st.mysql[b] {
			t.Errorf("%s: bucket %d: Redis left %d > MySQL left %d", when, b, st.redis[b], st.mysql[b])
		}
	}
	sumRedis, sumMySQL := 0, 0
	for b := range st.mysql {
		sumRedis += st.redis[b]
		sumMySQL += st.mysql[b]
	}
	if st.mysqlTotal != 10 || sumMySQL != 10 {
		t.Errorf("%s: MySQL total %d, left %d, want 10 and 10", when, st.mysqlTotal, sumMySQL)
	}
	if got := int64(sumRedis) + 1 + st.inFlight; got != int64(sumMySQL) {
		t.Errorf("%s: Redis left %v + 1 pending + %d in flight = %d, MySQL left %d", when, st.redis, st.inFlight, got, sumMySQL)
	}
}

var errCrash = errors.New("simulated crash")

// A reconciler dies after each step of a transfer in turn (planned, taken, moved, given);
// the next lease holder resumes the journal. At the crash every bucket's Redis stock is at
// most its row's and no unit is unaccounted for; after the resumption both sides agree
// exactly, the one unit Redis's bucket 0 had taken moved once, and resuming again changes
// nothing.
func TestTransferResumesAfterEveryStep(t *testing.T) {
	for _, r := range []struct {
		name string
		rdb  func(testing.TB) redis.UniversalClient
	}{
		{"stack", stacktest.Redis},
		{"cluster", func(tb testing.TB) redis.UniversalClient { return stacktest.ClusterRedis(tb) }},
	} {
		t.Run(r.name, func(t *testing.T) {
			for _, crash := range []transferStep{stepPlanned, stepTaken, stepMoved, stepGiven} {
				t.Run(fmt.Sprintf("after step %d", crash), func(t *testing.T) {
					transferResumes(t, r.rdb(t), crash)
				})
			}
		})
	}
}

func transferResumes(t *testing.T, rdb redis.UniversalClient, crash transferStep) {
	s := newBucketSale(t, rdb)
	ctx := stacktest.Context(t, 30*time.Second)
	s.state(t).check(t, "before")

	first := s.acquire(t)
	var seen []transferStep
	dying := s.executor(func(_ store.Transfer, step transferStep) error {
		seen = append(seen, step)
		if step == crash {
			return errCrash
		}
		return nil
	})
	// Bucket 0 holds 3 in MySQL, 2 in Redis (one admitted): asking for 5 takes 2.
	if _, err := dying.transfer(ctx, first, s.sid, s.pid, 0, 3, 5); !errors.Is(err, errCrash) {
		t.Fatalf("transfer: %v, want the simulated crash", err)
	}
	if seen[len(seen)-1] != crash {
		t.Fatalf("stopped after %v, want %d", seen, crash)
	}
	s.state(t).check(t, "at the crash")

	second := s.acquire(t)
	n, err := s.executor(nil).resume(ctx, second)
	if err != nil || n != 1 {
		t.Fatalf("resume: %d transfers, %v", n, err)
	}
	end := s.state(t)
	end.check(t, "after resuming")
	if !slices.Equal(end.mysql, []int{1, 3, 2, 4}) || !slices.Equal(end.redis, []int{0, 3, 2, 4}) || end.inFlight != 0 {
		t.Fatalf("after resuming: MySQL %v, Redis %v, in flight %d; want [1 3 2 4], [0 3 2 4], 0", end.mysql, end.redis, end.inFlight)
	}
	all, err := s.cat.Transfers(ctx, s.sid, s.pid)
	if err != nil || len(all) != 1 || all[0].State != store.TransferDone || all[0].Taken != 2 || all[0].Units != 2 {
		t.Fatalf("journal: %+v %v", all, err)
	}
	if n, err := s.executor(nil).resume(ctx, second); err != nil || n != 0 {
		t.Fatalf("resuming again: %d %v", n, err)
	}
	if again := s.state(t); !slices.Equal(again.redis, end.redis) || !slices.Equal(again.mysql, end.mysql) {
		t.Fatalf("resuming again changed the stock: %+v", again)
	}
}

// A reconciler that paused mid-transfer and wakes after a takeover (the new holder having
// finished the transfer) can write nothing: its journal steps are refused by the lease's
// fence in MySQL, its take and give by the fence the new holder left on the buckets' keys.
func TestTransferRefusesStaleFence(t *testing.T) {
	for _, pause := range []transferStep{stepTaken, stepMoved} {
		t.Run(fmt.Sprintf("paused after step %d", pause), func(t *testing.T) {
			s := newBucketSale(t, stacktest.Redis(t))
			ctx := stacktest.Context(t, 30*time.Second)
			old := s.acquire(t)
			var paused store.Transfer
			x := s.executor(func(tr store.Transfer, step transferStep) error {
				if step == pause {
					paused = tr
					return errCrash
				}
				return nil
			})
			if _, err := x.transfer(ctx, old, s.sid, s.pid, 0, 3, 5); !errors.Is(err, errCrash) {
				t.Fatalf("transfer: %v", err)
			}
			cur := s.acquire(t)
			if n, err := s.executor(nil).resume(ctx, cur); err != nil || n != 1 {
				t.Fatalf("the new holder's resume: %d %v", n, err)
			}
			want := s.state(t)

			// The old holder goes on where it stopped, and again from the start.
			if _, _, err := s.cat.MoveTransfer(ctx, old, paused.ID, paused.Taken); !errors.Is(err, lease.ErrStale) {
				t.Errorf("stale move: %v, want lease.ErrStale", err)
			}
			if err := s.cat.FinishTransfer(ctx, old, paused.ID); !errors.Is(err, lease.ErrStale) {
				t.Errorf("stale finish: %v, want lease.ErrStale", err)
			}
			if _, err := x.run(ctx, old, paused); !staleFence(err) {
				t.Errorf("the stale holder continuing its transfer: %v, want a stale fence", err)
			}
			// The source's keys carry the new fence only if the new holder took there (it
			// resumed from step 2); otherwise the stale repeat is answered from the record.
			n, err := s.gate.Take(ctx, s.sid, s.pid, 0, saleBuckets, paused.ID, 5, old.Number)
			if pause == stepTaken && !errors.Is(err, stock.ErrFenced) {
				t.Errorf("stale take: %d %v, want ErrFenced", n, err)
			}
			if pause == stepMoved && (err != nil || n != paused.Taken) {
				t.Errorf("stale repeated take: %d %v, want the recorded %d", n, err, paused.Taken)
			}
			if _, err := s.gate.Give(ctx, s.sid, s.pid, 3, saleBuckets, paused.ID, 2, 2, 99, time.Now().Add(time.Hour), old.Number); !errors.Is(err, stock.ErrFenced) {
				t.Errorf("stale give: %v, want ErrFenced", err)
			}
			if _, err := x.transfer(ctx, old, s.sid, s.pid, 1, 2, 1); !errors.Is(err, lease.ErrStale) {
				t.Errorf("stale plan: %v, want lease.ErrStale", err)
			}
			got := s.state(t)
			got.check(t, "after the stale writes")
			if !slices.Equal(got.mysql, want.mysql) || !slices.Equal(got.redis, want.redis) || got.inFlight != 0 {
				t.Fatalf("the stale holder changed the stock: %+v, want %+v", got, want)
			}
		})
	}
}

// A source bucket not loaded in Redis takes nothing: the transfer is cancelled and the rows
// are untouched (the next preheat loads the units from the row).
func TestTransferFromUnloadedBucketIsCancelled(t *testing.T) {
	s := newBucketSale(t, stacktest.Redis(t))
	ctx := stacktest.Context(t, 30*time.Second)
	k := stock.BucketKeysFor(s.sid, s.pid, 2, saleBuckets)
	s.rdb.Del(ctx, k.Meta)
	f := s.acquire(t)
	tr, err := s.executor(nil).transfer(ctx, f, s.sid, s.pid, 2, 1, 1)
	if err != nil || tr.State != store.TransferCancelled {
		t.Fatalf("transfer from an unloaded bucket: %+v %v", tr, err)
	}
	if st := s.state(t); !slices.Equal(st.mysql, []int{3, 3, 2, 2}) || st.inFlight != 0 {
		t.Fatalf("after a cancelled transfer: %+v", st)
	}
}

// Both buckets of a transfer lose their keys after each step in turn and are loaded again
// from their rows and the journal's ledger by a preheat; the resumed transfer then applies
// exactly once: a planned one takes again from the reloaded source, a moved one finds its
// give already recorded in the reloaded destination (whose row holds the units).
func TestTransferResumesAfterBucketsReload(t *testing.T) { transferSurvivesKeyLoss(t, false) }

// The same with the buckets rebuilt (fenced, from rows, orders and the ledger), as after a
// Redis that lost its data mid-transfer.
func TestRebuildWithTransfersInFlight(t *testing.T) { transferSurvivesKeyLoss(t, true) }

func transferSurvivesKeyLoss(t *testing.T, rebuild bool) {
	for _, crash := range []transferStep{stepPlanned, stepTaken, stepMoved, stepGiven} {
		t.Run(fmt.Sprintf("after step %d", crash), func(t *testing.T) {
			s := newBucketSale(t, stacktest.Redis(t))
			ctx := stacktest.Context(t, 30*time.Second)
			x := s.executor(func(_ store.Transfer, step transferStep) error {
				if step == crash {
					return errCrash
				}
				return nil
			})
			if _, err := x.transfer(ctx, s.acquire(t), s.sid, s.pid, 1, 3, 2); !errors.Is(err, errCrash) {
				t.Fatalf("transfer: %v", err)
			}
			f := s.acquire(t)
			for _, b := range []int{1, 3} {
				s.lose(t, b)
				if rebuild {
					s.rebuild(t, b, f)
				} else {
					s.load(t, b)
				}
			}
			s.state(t).check(t, "reloaded")
			if n, err := s.executor(nil).resume(ctx, f); err != nil || n != 1 {
				t.Fatalf("resume: %d %v", n, err)
			}
			end := s.state(t)
			end.check(t, "after resuming")
			if !slices.Equal(end.mysql, []int{3, 1, 2, 4}) || !slices.Equal(end.redis, []int{2, 1, 2, 4}) || end.inFlight != 0 {
				t.Fatalf("after resuming: MySQL %v, Redis %v, in flight %d; want [3 1 2 4], [2 1 2 4], 0", end.mysql, end.redis, end.inFlight)
			}
		})
	}
}
