package store_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

func migrationByVersion(t *testing.T, v int) store.Migration {
	t.Helper()
	migs, err := store.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range migs {
		if m.Version == v {
			return m
		}
	}
	t.Fatalf("no migration %d", v)
	return store.Migration{}
}

func exec(t *testing.T, db *gorm.DB, sql string, args ...any) {
	t.Helper()
	if err := db.Exec(sql, args...).Error; err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func schemaHas(t *testing.T, db *gorm.DB, query, table, name string) bool {
	t.Helper()
	var n int64
	if err := db.Raw(query, table, name).Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// A migration interrupted between two statements (the process died, the connection
// dropped) is reported by name and finished by the next run; its guarded statements run
// again only where their change is missing.
func TestMigrateResumesAnInterruptedMigration(t *testing.T) {
	db := migrated(t)
	ctx := stacktest.Context(t, 60*time.Second)
	// 0008 as a run that stopped before its last ALTERs: the row says unfinished, and the
	// last column and index it adds are not there.
	exec(t, db, "UPDATE schema_migrations SET finished = 0 WHERE version = 8")
	exec(t, db, "ALTER TABLE exception_cases DROP INDEX ix_exception_session")
	exec(t, db, "ALTER TABLE exception_cases DROP COLUMN state_note")

	res, err := store.Migrate(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Resumed, []string{"0008_exception_workbench"}) || !slices.Equal(res.Applied, []int{8}) {
		t.Fatalf("migrate: %+v; want 0008 resumed and applied", res)
	}
	if !schemaHas(t, db, "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = ?", "exception_cases", "state_note") {
		t.Error("state_note not added again")
	}
	if !schemaHas(t, db, "SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND INDEX_NAME = ?", "exception_cases", "ix_exception_session") {
		t.Error("ix_exception_session not added again")
	}
	var finished int
	if err := db.Raw("SELECT finished FROM schema_migrations WHERE version = 8").Scan(&finished).Error; err != nil || finished != 1 {
		t.Fatalf("0008 finished = %d (%v); want 1", finished, err)
	}
	if again, err := store.Migrate(ctx, db); err != nil || len(again.Applied)+len(again.Resumed) != 0 {
		t.Fatalf("a third run: %+v, %v; want nothing to do", again, err)
	}
}

// An applied migration whose file changed is refused by name: the database did not run
// what the file now says. A row from before checksums were kept adopts the file's.
func TestMigrateRefusesAnEditedMigration(t *testing.T) {
	db := migrated(t)
	ctx := stacktest.Context(t, 60*time.Second)
	m1 := migrationByVersion(t, 1)
	exec(t, db, "UPDATE schema_migrations SET checksum = '' WHERE version = 1")
	if _, err := store.Migrate(ctx, db); err != nil {
		t.Fatalf("a row without a checksum: %v", err)
	}
	var sum string
	if err := db.Raw("SELECT checksum FROM schema_migrations WHERE version = 1").Scan(&sum).Error; err != nil || sum != m1.Checksum {
		t.Fatalf("checksum %q (%v); want the file's %q", sum, err, m1.Checksum)
	}

	exec(t, db, "UPDATE schema_migrations SET checksum = ? WHERE version = 7", strings.Repeat("0", 64))
	_, err := store.Migrate(ctx, db)
	if err == nil || !strings.Contains(err.Error(), "migration 0007_payment_feedback was edited after it was applied") {
		t.Fatalf("migrate over an edited 0007: %v; want a refusal naming it", err)
	}
}

// A database migrated before checksums were kept (schema_migrations without checksum and
// finished) migrates on: every recorded migration counts as finished and adopts its file's
// checksum.
func TestMigrateUpgradesTheOldBookkeeping(t *testing.T) {
	db := migrated(t)
	ctx := stacktest.Context(t, 60*time.Second)
	exec(t, db, "ALTER TABLE schema_migrations DROP COLUMN checksum")
	exec(t, db, "ALTER TABLE schema_migrations DROP COLUMN finished")
	res, err := store.Migrate(ctx, db)
	if err != nil || len(res.Applied)+len(res.Resumed) != 0 {
		t.Fatalf("migrate: %+v, %v; want nothing applied", res, err)
	}
	var blank int64
	if err := db.Raw("SELECT COUNT(*) FROM schema_migrations WHERE checksum = '' OR finished <> 1").Scan(&blank).Error; err != nil || blank != 0 {
		t.Fatalf("%d rows without a checksum or unfinished (%v)", blank, err)
	}
}
