package store_test

import (
	"strings"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

func TestGormRoundTripOnMariaDB(t *testing.T) {
	_, db := stacktest.MySQL(t)
	ctx := stacktest.Context(t, 10*time.Second)

	var version string
	if err := db.WithContext(ctx).Raw("SELECT VERSION()").Scan(&version).Error; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(version, "MariaDB") {
		t.Errorf("server version %q is not MariaDB", version)
	}

	type probe struct {
		ID      uint64 `gorm:"primaryKey"`
		Name    string `gorm:"size:64"`
		Created time.Time
	}
	if err := db.WithContext(ctx).AutoMigrate(&probe{}); err != nil {
		t.Fatal(err)
	}
	in := probe{Name: "round-trip", Created: time.Now().UTC().Truncate(time.Second)}
	if err := db.WithContext(ctx).Create(&in).Error; err != nil {
		t.Fatal(err)
	}
	var out probe
	if err := db.WithContext(ctx).First(&out, in.ID).Error; err != nil {
		t.Fatal(err)
	}
	if out.Name != in.Name || !out.Created.Equal(in.Created) {
		t.Fatalf("read back %+v, wrote %+v", out, in)
	}
	// clientFoundRows: an UPDATE that matches but changes nothing still counts the row,
	// which the consumer's optimistic locking relies on.
	res := db.WithContext(ctx).Model(&probe{}).Where("id = ?", in.ID).Update("name", "round-trip")
	if res.Error != nil || res.RowsAffected != 1 {
		t.Fatalf("no-op update: rows=%d err=%v, want 1 matched row", res.RowsAffected, res.Error)
	}
}

// A sampler keeps no session open between samples: the replica it samples may be promoted,
// then fenced by a switchover that waits until no service session is left on it.
func TestSamplerKeepsNoIdleSession(t *testing.T) {
	dsn, _ := stacktest.MySQL(t)
	ctx := stacktest.Context(t, 10*time.Second)
	pool, err := store.Sampler(stacktest.MySQLConn(t, dsn))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for i := 0; i < 3; i++ {
		var one int
		if err := pool.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
			t.Fatal(err)
		}
		if open := pool.Stats().OpenConnections; open != 0 {
			t.Fatalf("sample %d: %d sessions left open, want 0", i, open)
		}
	}
}
