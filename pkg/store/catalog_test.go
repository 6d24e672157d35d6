package store_test

import (
	"errors"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

var t0 = time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)

func migrated(t *testing.T) *gorm.DB {
	t.Helper()
	_, db := stacktest.MySQL(t)
	ctx := stacktest.Context(t, 30*time.Second)
	if _, err := store.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	return db
}

func demoActivity(limit int) seckill.Activity {
	return seckill.Activity{
		Name: "demo", WindowStart: t0, WindowEnd: t0.Add(2 * time.Hour),
		Interval: 30 * time.Minute, SessionLength: 10 * time.Minute, PerUserLimit: limit,
		Prizes: []seckill.Prize{{Name: "phone", StockPerSession: 3}, {Name: "case", StockPerSession: 10}},
	}
}

func count(t *testing.T, db *gorm.DB, table string) int64 {
	t.Helper()
	var n int64
	if err := db.Table(table).Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

func TestMigrateIsIdempotent(t *testing.T) {
	_, db := stacktest.MySQL(t)
	ctx := stacktest.Context(t, 30*time.Second)
	first, err := store.Migrate(ctx, db)
	if err != nil || len(first.Applied) == 0 {
		t.Fatalf("first run applied %v, err %v", first.Applied, err)
	}
	again, err := store.Migrate(ctx, db)
	if err != nil || len(again.Applied) != 0 || len(again.Resumed) != 0 {
		t.Fatalf("second run %+v, err %v; want nothing", again, err)
	}
}

func TestCreateActivityMaterialisesSessionsAndStock(t *testing.T) {
	db := migrated(t)
	ctx := stacktest.Context(t, 30*time.Second)
	cat := store.NewCatalog(db, func() time.Time { return t0.Add(-time.Hour) })
	a, err := cat.CreateActivity(ctx, demoActivity(1))
	if err != nil {
		t.Fatal(err)
	}
	sessions, err := cat.Sessions(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(sessions) != 4 {
		t.Fatalf("%d sessions, want 4", len(sessions))
	}
	if !sessions[3].Start.Equal(t0.Add(90*time.Minute)) || !sessions[3].End.Equal(t0.Add(100*time.Minute)) {
		t.Errorf("last session %+v", sessions[3])
	}
	stocks, err := cat.Stocks(ctx, sessions[0].ID, sessions[3].ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(stocks) != 4 {
		t.Fatalf("%d stock rows for 2 sessions × 2 prizes", len(stocks))
	}
	for _, s := range stocks {
		if s.Left != s.Total || s.Version != 0 || s.PerUserLimit != 1 {
			t.Errorf("stock row %+v", s)
		}
	}
}

func TestInvalidActivityWritesNothing(t *testing.T) {
	db := migrated(t)
	ctx := stacktest.Context(t, 30*time.Second)
	cat := store.NewCatalog(db, time.Now)
	bad := demoActivity(0)
	_, err := cat.CreateActivity(ctx, bad)
	var verr seckill.ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("err = %v, want ValidationError", err)
	}
	// A duplicate prize name passes no validation the DB would not also catch; the
	// transaction must leave nothing behind either way.
	for _, table := range []string{"activities", "prizes", "sessions", "session_stocks"} {
		if n := count(t, db, table); n != 0 {
			t.Errorf("%s has %d rows after a rejected create", table, n)
		}
	}
}

// The per-user guard and the stock floor are the database's own: a writer that bypasses
// every check in Go still cannot store them.
func TestDatabaseGuards(t *testing.T) {
	db := migrated(t)
	ctx := stacktest.Context(t, 30*time.Second)
	cat := store.NewCatalog(db, func() time.Time { return t0.Add(-time.Hour) })
	a, err := cat.CreateActivity(ctx, demoActivity(2))
	if err != nil {
		t.Fatal(err)
	}
	sessions, _ := cat.Sessions(ctx, a.ID)
	sid, pid := sessions[0].ID, a.Prizes[0].ID
	insert := func(rid string, limit int, slot any, status, reason string) error {
		return db.WithContext(ctx).Exec(`INSERT INTO orders
			(request_id, user_id, session_id, prize_id, status, reason, per_user_limit, slot, admitted_at, created_at)
			VALUES (?, 'u1', ?, ?, ?, ?, ?, ?, NOW(6), NOW(6))`, rid, sid, pid, status, reason, limit, slot).Error
	}
	if err := insert("r1", 2, 1, "succeeded", ""); err != nil {
		t.Fatal(err)
	}
	if err := insert("r2", 2, 2, "succeeded", ""); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		err  error
	}{
		{"same slot again", insert("r3", 2, 2, "succeeded", "")},
		{"slot above the limit", insert("r4", 2, 3, "succeeded", "")},
		{"limit that is not the stock row's", insert("r5", 3, 3, "succeeded", "")},
		{"duplicate request id", insert("r1", 2, nil, "rejected", "sold_out")},
		{"rejected without a reason", insert("r6", 2, nil, "rejected", "")},
	}
	for _, c := range cases {
		if c.err == nil {
			t.Errorf("%s: database accepted it", c.name)
		}
	}
	// Rejections do not take slots: any number may be stored.
	for _, rid := range []string{"r7", "r8", "r9"} {
		if err := insert(rid, 2, nil, "rejected", "limit"); err != nil {
			t.Errorf("rejected order %s: %v", rid, err)
		}
	}
	if err := db.WithContext(ctx).Exec("UPDATE session_stocks SET left_stock = -1 WHERE session_id = ? AND prize_id = ?", sid, pid).Error; err == nil {
		t.Error("left_stock = -1 accepted")
	}
}

func TestAdjustStockBeforeStartIsAudited(t *testing.T) {
	db := migrated(t)
	ctx := stacktest.Context(t, 30*time.Second)
	now := t0.Add(-time.Hour)
	cat := store.NewCatalog(db, func() time.Time { return now })
	a, err := cat.CreateActivity(ctx, demoActivity(1))
	if err != nil {
		t.Fatal(err)
	}
	sessions, _ := cat.Sessions(ctx, a.ID)
	before, after, err := cat.AdjustStock(ctx, sessions[0].ID, a.Prizes[0].ID, 7, "ops@example", "supplier delivered more", nil)
	if err != nil {
		t.Fatal(err)
	}
	if before.Total != 3 || after.Total != 7 || after.Left != 7 {
		t.Fatalf("before %+v after %+v", before, after)
	}
	audit, err := cat.Audit(ctx, sessions[0].ID, 10)
	if err != nil || len(audit) != 1 || *audit[0].Before != 3 || *audit[0].After != 7 || audit[0].Actor != "ops@example" {
		t.Fatalf("audit %+v err %v", audit, err)
	}

	now = t0 // the first session has started
	if _, _, err := cat.AdjustStock(ctx, sessions[0].ID, a.Prizes[0].ID, 9, "ops", "late", nil); !errors.Is(err, store.ErrStarted) {
		t.Fatalf("adjust after start: err = %v, want ErrStarted", err)
	}
	if _, _, err := cat.AdjustStock(ctx, sessions[1].ID, a.Prizes[0].ID, -1, "ops", "neg", nil); err == nil {
		t.Fatal("negative stock accepted")
	}
	if _, _, err := cat.AdjustStock(ctx, 999999, a.Prizes[0].ID, 1, "ops", "x", nil); !errors.Is(err, seckill.ErrNotFound) {
		t.Fatalf("unknown session: err = %v", err)
	}
}
