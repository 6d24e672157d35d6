package store_test

import (
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

func TestNamedLockOneHolder(t *testing.T) {
	_, db := stacktest.MySQL(t)
	ctx := stacktest.Context(t, 10*time.Second)
	name := "t-" + stacktest.ID(t)
	a, ok, err := store.TryLock(ctx, db, name)
	if err != nil || !ok {
		t.Fatalf("first: %v %v", ok, err)
	}
	if err := a.Held(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := store.TryLock(ctx, db, name); ok {
		t.Fatal("second holder got a held lock")
	}
	a.Release(ctx)
	b, ok, err := store.TryLock(ctx, db, name)
	if err != nil || !ok {
		t.Fatalf("after release: %v %v", ok, err)
	}
	// The holder's connection killed (as by a server restart): the lock is gone and the
	// holder can tell.
	if err := db.Exec("KILL CONNECTION IS_USED_LOCK(?)", name).Error; err != nil {
		t.Fatal(err)
	}
	if err := b.Held(ctx); err == nil {
		t.Fatal("Held reports a lock whose connection was killed")
	}
	b.Release(ctx)
}
