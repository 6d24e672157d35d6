package store_test

import (
	"strings"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// The test database is created with the server's default character set and collation
// (case-insensitive on a stock MariaDB or MySQL); the schema must pin byte comparison itself,
// so request ids and users that differ only in case are distinct orders.
func TestCaseVariantIdsAndUsersAreDistinctOrders(t *testing.T) {
	db := migrated(t)
	ctx := stacktest.Context(t, 30*time.Second)
	var serverDefault string
	if err := db.WithContext(ctx).Raw("SELECT DEFAULT_COLLATION_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = DATABASE()").
		Scan(&serverDefault).Error; err != nil {
		t.Fatal(err)
	}
	t.Logf("database default collation (the server's): %s", serverDefault)

	now := t0.Add(-time.Hour)
	cat := store.NewCatalog(db, func() time.Time { return now })
	act := demoActivity(1)
	act.WindowStart, act.WindowEnd = now.Add(-time.Minute), now.Add(time.Hour)
	act.Interval, act.SessionLength = time.Hour, time.Hour
	act.Prizes = []seckill.Prize{{Name: "phone", StockPerSession: 10}}
	created, err := cat.CreateActivity(ctx, act)
	if err != nil {
		t.Fatal(err)
	}
	sessions, err := cat.Sessions(ctx, created.ID)
	if err != nil {
		t.Fatal(err)
	}
	sid, pid := sessions[0].ID, created.Prizes[0].ID
	grab := func(rid, user string) seckill.Grab {
		return seckill.Grab{RequestID: rid, UserID: user, SessionID: sid, PrizeID: pid, AdmittedAt: now}
	}
	// Same key text in two cases from two users, and two users "Bob" and "bob" (limit 1 each).
	grabs := []seckill.Grab{grab("k-abc", "alice"), grab("k-ABC", "carol"), grab("k-1", "Bob"), grab("k-2", "bob")}
	res, err := store.NewOrders(db).Persist(ctx, sid, pid, grabs, now)
	if err != nil {
		t.Fatalf("persist case variants: %v", err)
	}
	if res.Succeeded != 4 {
		t.Fatalf("succeeded %d of 4 case-variant grabs: %+v", res.Succeeded, res.Outcomes)
	}
	var n int64
	if err := db.WithContext(ctx).Table("orders").Where("status = 'succeeded'").Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	if n != 4 {
		t.Fatalf("%d succeeded orders, want 4", n)
	}
	// A redelivery of one of them is still recognised as the same request (exact bytes).
	again, err := store.NewOrders(db).Persist(ctx, sid, pid, []seckill.Grab{grab("k-ABC", "carol")}, now)
	if err != nil || again.Existing != 1 {
		t.Fatalf("redelivery: %+v, %v", again, err)
	}
}

// Migrate refuses a schema where a text column was left on a case-insensitive collation,
// naming the column.
func TestMigrateVerifiesCollations(t *testing.T) {
	db := migrated(t)
	ctx := stacktest.Context(t, 30*time.Second)
	if err := db.WithContext(ctx).Exec("ALTER TABLE orders MODIFY user_id VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NOT NULL").Error; err != nil {
		t.Fatal(err)
	}
	_, err := store.Migrate(ctx, db)
	if err == nil || !strings.Contains(err.Error(), "orders.user_id (utf8mb4_general_ci)") {
		t.Fatalf("migrate over a case-insensitive column: %v; want a refusal naming orders.user_id", err)
	}
}
