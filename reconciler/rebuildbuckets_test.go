package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// The waits before a rebuild, all passed: consumers caught up, gateways quiet, no
// compensation backlog (the tests of the waits themselves use the whole stack).
type caughtUp struct{}

func (caughtUp) Lag(context.Context, string, event.Topic) (map[int]int64, error) {
	return map[int]int64{}, nil
}
func (caughtUp) Backlog(context.Context) (int64, error) { return 0, nil }
func (caughtUp) Now(context.Context) (time.Time, error) { return time.Now(), nil }
func (caughtUp) Quiet(context.Context, int64, int64, time.Time, time.Duration) (bool, store.PrizeHold, error) {
	return true, store.PrizeHold{}, nil
}

// Redis loses two stock buckets of a prize while a transfer into one of them is between its
// move and its give, and the other has an order: the rebuild job finishes the transfer
// first, then rebuilds each lost bucket from its row, its orders (the buyer's slot counted
// in the bucket's per-user hash) and its ledger, so the transfer applies once and nothing
// is in flight afterwards. The buckets Redis kept are left alone. On a single Redis and on
// the cluster.
func TestRebuildJobRebuildsLostBuckets(t *testing.T) {
	onBothRedis(t, rebuildLostBuckets)
}

// sums checks every bucket's Redis left against its row and that every unit MySQL holds is
// in a Redis bucket, a pending reservation or in flight.
func (st saleState) sums(t *testing.T, when string, mysqlLeft, pending int) {
	t.Helper()
	sumRedis, sumMySQL := 0, 0
	for b := range st.mysql {
		if st.redis[b] > st.mysql[b] {
			t.Errorf("%s: bucket %d: Redis left %d > MySQL left %d", when, b, st.redis[b], st.mysql[b])
		}
		sumRedis += st.redis[b]
		sumMySQL += st.mysql[b]
	}
	if st.mysqlTotal != 10 || sumMySQL != mysqlLeft {
		t.Errorf("%s: MySQL total %d, left %d, want 10 and %d", when, st.mysqlTotal, sumMySQL, mysqlLeft)
	}
	if got := int64(sumRedis+pending) + st.inFlight; got != int64(sumMySQL) {
		t.Errorf("%s: Redis left %v + %d pending + %d in flight = %d, MySQL left %d", when, st.redis, pending, st.inFlight, got, sumMySQL)
	}
}

func rebuildLostBuckets(t *testing.T, rdb redis.UniversalClient) {
	s := newBucketSale(t, rdb)
	ctx := stacktest.Context(t, 30*time.Second)
	s.soldIn(t, "u2", 2)
	f := s.acquire(t)
	// 2 units from bucket 1 to 3: the holder dies after the move, before the give.
	crash := s.crashAfter(stepMoved)
	if _, err := crash.transfer(ctx, f, s.sid, s.pid, 1, 3, 2); !errors.Is(err, errCrash) {
		t.Fatalf("transfer: %v, want the simulated crash", err)
	}
	s.state(t).sums(t, "before the loss", 9, 1)
	s.lose(t, 2)
	s.lose(t, 3)

	reg := prometheus.NewRegistry()
	job := rebuildJob{catalog: s.cat, orders: store.NewOrders(s.db), gate: s.gate,
		lag: grabLag{reader: caughtUp{}, group: "g", topic: event.Topic{Name: "t", Partitions: 4}}, compensation: caughtUp{},
		gateways: caughtUp{}, gatewayAlive: time.Minute, grace: time.Hour, catchUp: time.Second, rebuilt: newRebuiltCounter(reg),
		transfers: s.executor(nil), log: slog.New(slog.NewTextHandler(io.Discard, nil)), now: time.Now}
	next := s.acquire(t)
	res, err := job.Run(ctx, next)
	if err != nil || res.Summary["missing"] != 1 || res.Summary["rebuilt"] != 1 {
		t.Fatalf("rebuild: %+v %v, want the one prize rebuilt", res.Summary, err)
	}
	end := s.state(t)
	end.sums(t, "after the rebuild", 9, 1)
	if !slices.Equal(end.redis, []int{2, 1, 1, 4}) || !slices.Equal(end.mysql, []int{3, 1, 1, 4}) || end.inFlight != 0 {
		t.Fatalf("after the rebuild: Redis %v, MySQL %v, in flight %d; want [2 1 1 4], [3 1 1 4], 0", end.redis, end.mysql, end.inFlight)
	}
	if all, err := s.cat.Transfers(ctx, s.sid, s.pid); err != nil || len(all) != 1 || all[0].State != store.TransferDone {
		t.Fatalf("journal after the rebuild: %+v %v", all, err)
	}
	if n, err := s.rdb.HGet(ctx, stock.BucketKeysFor(s.sid, s.pid, 2, saleBuckets).Users, "u2").Int(); err != nil || n != 1 {
		t.Fatalf("u2's count in bucket 2 after the rebuild: %d %v, want 1", n, err)
	}
	if err := s.rdb.HGet(ctx, stock.BucketKeysFor(s.sid, s.pid, 3, saleBuckets).Users, "u2").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("u2 counted in bucket 3, which admitted none of its grabs: %v", err)
	}
	// The resumed give, made again, finds the transfer recorded in the rebuilt bucket.
	if n, err := s.executor(nil).resume(ctx, next); err != nil || n != 0 {
		t.Fatalf("resume after the rebuild: %d %v", n, err)
	}
	if again, err := job.Run(ctx, next); err != nil || again.Summary["missing"] != 0 {
		t.Fatalf("second run: %+v %v, want nothing missing", again.Summary, err)
	}
	if st := s.state(t); !slices.Equal(st.redis, end.redis) || st.inFlight != 0 {
		t.Fatalf("second run changed Redis: %v, in flight %d", st.redis, st.inFlight)
	}
}

// soldIn makes user's grab admitted by bucket b >= 1 and persisted: its order (request id
// key "k-"+user), one unit less in the bucket's row and keys.
func (s *bucketSale) soldIn(t *testing.T, user string, b int) string {
	t.Helper()
	ctx := stacktest.Context(t, 10*time.Second)
	rid := seckill.RequestID(s.sid, s.pid, "k-"+user)
	if err := s.db.WithContext(ctx).Exec(`INSERT INTO orders (request_id, user_id, session_id, prize_id, status, reason, per_user_limit, slot,
		admitted_at, created_at, bucket) VALUES (?, ?, ?, ?, 'succeeded', '', 1, 1, NOW(6), NOW(6), ?)`,
		rid, user, s.sid, s.pid, b).Error; err != nil {
		t.Fatal(err)
	}
	if err := s.db.WithContext(ctx).Exec("UPDATE stock_buckets SET left_stock = left_stock - 1, version = version + 1 WHERE session_id = ? AND prize_id = ? AND bucket = ?",
		s.sid, s.pid, b).Error; err != nil {
		t.Fatal(err)
	}
	if err := s.rdb.HIncrBy(ctx, stock.BucketKeysFor(s.sid, s.pid, b, saleBuckets).Meta, "left", -1).Err(); err != nil {
		t.Fatal(err)
	}
	return rid
}
