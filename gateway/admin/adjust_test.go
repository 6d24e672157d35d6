package admin

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-pipeline/seckill/gateway/clientip"
	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/preheat"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// adjustEnv is the admin API on the real stack with its catalog and gate in reach, and a
// session that starts in an hour.
type adjustEnv struct {
	*adminEnv
	cat  *store.Catalog
	gate *stock.Gate
	rdb  redis.UniversalClient
	ctx  context.Context
}

func newAdjustEnv(t *testing.T) *adjustEnv {
	t.Helper()
	_, db := stacktest.Migrated(t)
	rdb := stacktest.Redis(t)
	stacktest.CleanupKeys(t, rdb, db)
	ctx := stacktest.Context(t, 30*time.Second)
	gate, err := stock.NewGate(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	e := &adjustEnv{adminEnv: &adminEnv{db: db, now: time.Now().UTC()}, gate: gate, rdb: rdb, ctx: ctx}
	e.cat = store.NewCatalog(db, e.clock)
	mux := http.NewServeMux()
	newAdmin(e.cat, gate, preheat.New(e.cat, gate, time.Hour, e.clock), tokenNames{adminToken: "admin"}, clientip.Peer, func() {},
		slog.New(slog.DiscardHandler)).register(mux)
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.srv.Close)
	return e
}

func (e *adjustEnv) clock() time.Time { return e.now }

// session creates a one-session activity starting in an hour with one prize of stock 5.
func (e *adjustEnv) session(t *testing.T) (sid, pid int64) {
	t.Helper()
	start := e.now.Add(time.Hour).Truncate(time.Second)
	act, err := e.cat.CreateActivity(e.ctx, seckill.Activity{Name: "adjust test", WindowStart: start,
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
	// Whatever else the gate keeps for the prize shares its hash tag.
	t.Cleanup(func() {
		keys, _ := e.rdb.Keys(context.Background(), fmt.Sprintf("sk:{%d:%d}:*", sid, pid)).Result()
		if len(keys) > 0 {
			e.rdb.Del(context.Background(), keys...)
		}
	})
	return sid, pid
}

func (e *adjustEnv) adjust(t *testing.T, sid, pid int64, total int) (int, map[string]any) {
	t.Helper()
	return e.do(t, "PUT", fmt.Sprintf("/admin/v1/sessions/%d/prizes/%d/stock", sid, pid), adminToken,
		fmt.Sprintf(`{"total": %d, "reason": "test"}`, total))
}

// redisStock reads the gate's left and total (-1, -1 when the key is absent).
func (e *adjustEnv) redisStock(t *testing.T, sid, pid int64) (left, total int64) {
	t.Helper()
	snaps, err := e.gate.Snapshots(e.ctx, []seckill.SessionPrize{{Session: sid, Prize: pid}})
	if err != nil {
		t.Fatal(err)
	}
	if !snaps[0].Loaded {
		return -1, -1
	}
	return snaps[0].Left, snaps[0].Total
}

// An adjustment Redis refuses (grabs were admitted for the prize) is not committed in
// MySQL either: no new total, no version bump, no audit entry.
func TestAdjustRefusedByRedisLeavesMySQLUnchanged(t *testing.T) {
	e := newAdjustEnv(t)
	sid, pid := e.session(t)
	if code, res := e.do(t, "POST", fmt.Sprintf("/admin/v1/sessions/%d/preheat", sid), adminToken, ""); code != http.StatusOK {
		t.Fatalf("preheat: %d %v", code, res)
	}
	rowBefore, err := e.cat.Stock(e.ctx, sid, pid)
	if err != nil {
		t.Fatal(err)
	}
	// An admission Redis knows of and MySQL does not yet (e.g. a gateway whose clock runs
	// ahead admitted it, and its order is still in Kafka).
	v, err := e.gate.Reserve(e.ctx, seckill.Grab{RequestID: seckill.RequestID(sid, pid, "key-early-0001"),
		UserID: "early", SessionID: sid, PrizeID: pid, AdmittedAt: time.Now()})
	if err != nil || v.Code != stock.Admitted {
		t.Fatalf("reserve: %v %v", v, err)
	}

	if code, res := e.adjust(t, sid, pid, 8); code != http.StatusConflict {
		t.Fatalf("adjust with an admission in Redis: %d %v, want 409", code, res)
	}
	row, err := e.cat.Stock(e.ctx, sid, pid)
	if err != nil {
		t.Fatal(err)
	}
	if row.Total != 5 || row.Left != 5 || row.Version != rowBefore.Version {
		t.Fatalf("MySQL after a refused adjustment: total %d left %d version %d; want 5, 5, %d", row.Total, row.Left, row.Version, rowBefore.Version)
	}
	audit, err := e.cat.Audit(e.ctx, sid, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range audit {
		if a.Action == "adjust_stock" {
			t.Fatalf("audit records an adjustment that did not happen: %+v", a)
		}
	}
	if left, total := e.redisStock(t, sid, pid); left != 4 || total != 5 {
		t.Fatalf("redis left %d total %d; want 4, 5", left, total)
	}
}

// stalledCatalog lets a test act between a preheat's MySQL read and its Redis load.
type stalledCatalog struct {
	*store.Catalog
	afterRead func() // runs once, after the first Stocks read
}

func (c *stalledCatalog) Stocks(ctx context.Context, sessionIDs ...int64) ([]seckill.Stock, error) {
	st, err := c.Catalog.Stocks(ctx, sessionIDs...)
	if f := c.afterRead; f != nil {
		c.afterRead = nil
		f()
	}
	return st, err
}

// Whichever order a preheat and a stock adjustment run in, Redis ends with the adjusted
// total, including a preheat that read the old total before the adjustment committed and
// reaches Redis after it.
func TestPreheatAndAdjustmentInAnyOrder(t *testing.T) {
	e := newAdjustEnv(t)
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, sid, pid int64, preheat func(afterRead func()) error)
	}{
		{"preheat, then adjustment", func(t *testing.T, sid, pid int64, preheat func(func()) error) {
			if err := preheat(nil); err != nil {
				t.Fatal(err)
			}
			if code, res := e.adjust(t, sid, pid, 8); code != http.StatusOK || res["redis_updated"] != true {
				t.Fatalf("adjust: %d %v", code, res)
			}
		}},
		{"adjustment, then preheat", func(t *testing.T, sid, pid int64, preheat func(func()) error) {
			if code, res := e.adjust(t, sid, pid, 8); code != http.StatusOK {
				t.Fatalf("adjust: %d %v", code, res)
			}
			if err := preheat(nil); err != nil {
				t.Fatal(err)
			}
		}},
		{"preheat reads the old total, adjustment commits, preheat loads", func(t *testing.T, sid, pid int64, preheat func(func()) error) {
			err := preheat(func() {
				if code, res := e.adjust(t, sid, pid, 8); code != http.StatusOK {
					t.Errorf("adjust: %d %v", code, res)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sid, pid := e.session(t)
			runPreheat := func(afterRead func()) error {
				cat := &stalledCatalog{Catalog: e.cat, afterRead: afterRead}
				_, err := preheat.New(cat, e.gate, time.Hour, e.clock).Session(e.ctx, sid)
				return err
			}
			tc.run(t, sid, pid, runPreheat)
			row, err := e.cat.Stock(e.ctx, sid, pid)
			if err != nil || row.Total != 8 {
				t.Fatalf("MySQL total %d (%v), want 8", row.Total, err)
			}
			if left, total := e.redisStock(t, sid, pid); left != 8 || total != 8 {
				t.Fatalf("redis left %d total %d after both ran; want 8, 8", left, total)
			}
		})
	}
}
