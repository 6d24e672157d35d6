package preheat_test

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
	"github.com/seckill-pipeline/seckill/pkg/preheat"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

type env struct {
	ctx  context.Context
	cat  *store.Catalog
	gate *stock.Gate
	rdb  redis.UniversalClient
	db   *gorm.DB
}

func newEnv(t *testing.T) *env {
	t.Helper()
	_, db := stacktest.Migrated(t)
	rdb := stacktest.Redis(t)
	stacktest.CleanupKeys(t, rdb, db)
	ctx := stacktest.Context(t, 30*time.Second)
	gate, err := stock.NewGate(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	return &env{ctx: ctx, cat: store.NewCatalog(db, time.Now), gate: gate, rdb: rdb, db: db}
}

// session creates a one-session activity starting in an hour with one prize of stock 5.
func (e *env) session(t *testing.T) (sid, pid int64) {
	t.Helper()
	start := time.Now().UTC().Add(time.Hour).Truncate(time.Second)
	act, err := e.cat.CreateActivity(e.ctx, seckill.Activity{Name: "preheat test", WindowStart: start,
		WindowEnd: start.Add(10 * time.Minute), Interval: 10 * time.Minute, SessionLength: 10 * time.Minute,
		PerUserLimit: 1, Prizes: []seckill.Prize{{Name: "phone", StockPerSession: 5}}})
	if err != nil {
		t.Fatal(err)
	}
	sessions, err := e.cat.Sessions(e.ctx, act.ID)
	if err != nil || len(sessions) != 1 {
		t.Fatalf("sessions %v %v", sessions, err)
	}
	sid, pid = sessions[0].ID, act.Prizes[0].ID
	t.Cleanup(func() { // the revision key too: everything under the prize's hash tag
		keys, _ := e.rdb.Keys(context.Background(), fmt.Sprintf("sk:{%d:%d}:*", sid, pid)).Result()
		if len(keys) > 0 {
			e.rdb.Del(context.Background(), keys...)
		}
	})
	return sid, pid
}

func (e *env) preheater(g interface {
	Load(ctx context.Context, stocks []seckill.Stock, expireAt time.Time) ([]stock.LoadResult, error)
	Adjust(ctx context.Context, st seckill.Stock, expireAt time.Time) (bool, error)
	UndoAdjust(ctx context.Context, undone, restore seckill.Stock) error
	LoadBucket(ctx context.Context, st seckill.Stock, b, buckets int, ledger seckill.BucketLedger, expireAt time.Time) (stock.LoadResult, error)
}) *preheat.Preheater {
	return preheat.New(e.cat, g, time.Hour, time.Now)
}

// check asserts MySQL's and Redis's totals (Redis -1: no key).
func (e *env) check(t *testing.T, sid, pid int64, mysql, redisTotal int) {
	t.Helper()
	row, err := e.cat.Stock(e.ctx, sid, pid)
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := e.gate.Snapshots(e.ctx, []seckill.SessionPrize{{Session: sid, Prize: pid}})
	if err != nil {
		t.Fatal(err)
	}
	got := -1
	if snaps[0].Loaded {
		got = int(snaps[0].Total)
		if snaps[0].Left != snaps[0].Total {
			t.Fatalf("redis left %d != total %d", snaps[0].Left, snaps[0].Total)
		}
	}
	if row.Total != mysql || row.Left != mysql || got != redisTotal {
		t.Fatalf("mysql total %d left %d, redis total %d; want mysql %d, redis %d", row.Total, row.Left, got, mysql, redisTotal)
	}
}

// hookGate runs a test's step right after the adjustment's Redis step, inside its MySQL
// transaction (before the commit), and can lose the Redis step's reply.
type hookGate struct {
	*stock.Gate
	afterAdjust func()
	loseReply   bool
	loads       chan stock.LoadResult
}

func (g *hookGate) Adjust(ctx context.Context, st seckill.Stock, expireAt time.Time) (bool, error) {
	loaded, err := g.Gate.Adjust(ctx, st, expireAt)
	if f := g.afterAdjust; f != nil {
		g.afterAdjust = nil
		f()
	}
	if g.loseReply && err == nil {
		return false, errors.New("i/o timeout (the script ran; its reply was lost)")
	}
	return loaded, err
}

func (g *hookGate) Load(ctx context.Context, stocks []seckill.Stock, expireAt time.Time) ([]stock.LoadResult, error) {
	res, err := g.Gate.Load(ctx, stocks, expireAt)
	if g.loads != nil {
		for _, r := range res {
			g.loads <- r
		}
	}
	return res, err
}

// A preheat that reads MySQL and reaches Redis between the adjustment's Redis step and its
// commit (it reads the old row: the row lock does not block a plain read) is refused, reads
// again once the adjustment committed, and loads the new total.
func TestPreheatBetweenAdjustmentRedisStepAndCommit(t *testing.T) {
	e := newEnv(t)
	for _, preheated := range []bool{false, true} {
		t.Run(fmt.Sprintf("preheated=%v", preheated), func(t *testing.T) {
			sid, pid := e.session(t)
			if preheated {
				if _, err := e.preheater(e.gate).Session(e.ctx, sid); err != nil {
					t.Fatal(err)
				}
			}
			racer := &hookGate{Gate: e.gate, loads: make(chan stock.LoadResult, 16)}
			done := make(chan error, 1)
			adjuster := &hookGate{Gate: e.gate, afterAdjust: func() {
				go func() {
					_, err := e.preheater(racer).Session(e.ctx, sid)
					done <- err
				}()
				// The adjustment commits only after the racing preheat's first load.
				if first := <-racer.loads; !first.Stale {
					t.Errorf("a preheat that read the row before the commit was not refused: %+v", first)
				}
			}}
			adj, err := e.preheater(adjuster).Adjust(e.ctx, sid, pid, 8, "ops", "", "more units")
			if err != nil {
				t.Fatal(err)
			}
			if adj.RedisUpdated != preheated || adj.After.Total != 8 {
				t.Fatalf("adjustment %+v", adj)
			}
			if err := <-done; err != nil {
				t.Fatalf("racing preheat: %v", err)
			}
			e.check(t, sid, pid, 8, 8)
		})
	}
}

// The adjustment's Redis step ran but its reply was lost: the transaction rolls back, and
// the Redis step is undone under the row lock, so MySQL and Redis both keep the old total
// and a later preheat is not refused by a revision MySQL never committed.
func TestAdjustmentWithLostRedisReplyIsUndone(t *testing.T) {
	e := newEnv(t)
	for _, preheated := range []bool{false, true} {
		t.Run(fmt.Sprintf("preheated=%v", preheated), func(t *testing.T) {
			sid, pid := e.session(t)
			if preheated {
				if _, err := e.preheater(e.gate).Session(e.ctx, sid); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := e.preheater(&hookGate{Gate: e.gate, loseReply: true}).Adjust(e.ctx, sid, pid, 8, "ops", "", "more"); err == nil {
				t.Fatal("adjustment with a lost Redis reply reported success")
			}
			want := -1
			if preheated {
				want = 5
			}
			e.check(t, sid, pid, 5, want)
			res, err := e.preheater(e.gate).Session(e.ctx, sid)
			if err != nil {
				t.Fatalf("preheat after the undone adjustment: %v", err)
			}
			if preheated != slices.Contains(res.Kept, pid) {
				t.Fatalf("preheat result %+v", res)
			}
			e.check(t, sid, pid, 5, 5)
			// A retried adjustment goes through.
			if _, err := e.preheater(e.gate).Adjust(e.ctx, sid, pid, 8, "ops", "", "retry"); err != nil {
				t.Fatal(err)
			}
			e.check(t, sid, pid, 8, 8)
		})
	}
}

// A key loaded at an older revision with nothing admitted (Redis lost the adjustment's
// write, e.g. a restart within the fsync second) takes the newer total at the next
// preheat; one with an admission is never overwritten.
func TestPreheatUpgradesKeyFromOlderRevision(t *testing.T) {
	e := newEnv(t)
	sid, pid := e.session(t)
	p := e.preheater(e.gate)
	if _, err := p.Session(e.ctx, sid); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.cat.AdjustStock(e.ctx, sid, pid, 8, "ops", "", "mysql only", nil); err != nil {
		t.Fatal(err)
	}
	res, err := p.Session(e.ctx, sid)
	if err != nil || !slices.Contains(res.Loaded, pid) {
		t.Fatalf("preheat: %+v %v", res, err)
	}
	e.check(t, sid, pid, 8, 8)

	if v, err := e.gate.Reserve(e.ctx, seckill.Grab{RequestID: seckill.RequestID(sid, pid, "key-early-0001"),
		UserID: "early", SessionID: sid, PrizeID: pid, AdmittedAt: time.Now()}); err != nil || v.Code != stock.Admitted {
		t.Fatalf("reserve: %v %v", v, err)
	}
	if _, _, err := e.cat.AdjustStock(e.ctx, sid, pid, 9, "ops", "", "mysql only", nil); err != nil {
		t.Fatal(err)
	}
	if res, err := p.Session(e.ctx, sid); err != nil || !slices.Contains(res.Kept, pid) {
		t.Fatalf("preheat over an admission: %+v %v", res, err)
	}
	if snaps, _ := e.gate.Snapshots(e.ctx, []seckill.SessionPrize{{Session: sid, Prize: pid}}); snaps[0].Total != 8 || snaps[0].Left != 7 {
		t.Fatalf("a key with an admission was overwritten: %+v", snaps[0])
	}
}
