package lease_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/stacktest"
)

func TestOneHolderAndFencing(t *testing.T) {
	rdb := stacktest.Redis(t)
	ctx := stacktest.Context(t, 30*time.Second)
	name := "t-" + stacktest.ID(t)
	t.Cleanup(func() { rdb.Del(context.Background(), "lease:{"+name+"}", "lease:{"+name+"}:fence") })
	a, b := lease.New(rdb, name, 500*time.Millisecond), lease.New(rdb, name, 500*time.Millisecond)

	h1, ok, err := a.TryAcquire(ctx)
	if err != nil || !ok {
		t.Fatalf("first acquire: %v %v", ok, err)
	}
	if _, ok, _ := b.TryAcquire(ctx); ok {
		t.Fatal("second instance acquired a held lease")
	}
	// Releasing with a stale token must not free the holder's lease.
	if err := b.Release(ctx, lease.Held{Token: "not-the-holder"}); err != nil {
		t.Fatal(err)
	}
	if holder, _ := a.Holder(ctx); holder != h1.Token {
		t.Fatal("a foreign release freed the lease")
	}
	if err := a.Release(ctx, h1); err != nil {
		t.Fatal(err)
	}
	h2, ok, err := b.TryAcquire(ctx)
	if err != nil || !ok || h2.Fence <= h1.Fence {
		t.Fatalf("reacquire: ok=%v fence %d after %d, err %v", ok, h2.Fence, h1.Fence, err)
	}
	// The old holder cannot renew what it no longer holds.
	if ok, _ := a.Renew(ctx, h1); ok {
		t.Fatal("stale holder renewed the lease")
	}
	_ = b.Release(ctx, h2)
}

func TestDoRunsOneActorAndRenews(t *testing.T) {
	rdb := stacktest.Redis(t)
	ctx := stacktest.Context(t, 30*time.Second)
	name := "t-" + stacktest.ID(t)
	t.Cleanup(func() { rdb.Del(context.Background(), "lease:{"+name+"}", "lease:{"+name+"}:fence") })
	var running, maxRunning, ran atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := lease.New(rdb, name, 300*time.Millisecond)
			_, err := l.Do(ctx, func(ctx context.Context, fence int64) error {
				n := running.Add(1)
				defer running.Add(-1)
				if n > maxRunning.Load() {
					maxRunning.Store(n)
				}
				ran.Add(1)
				// Outlive the TTL twice: renewal must keep others out.
				select {
				case <-time.After(700 * time.Millisecond):
				case <-ctx.Done():
					return ctx.Err()
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if maxRunning.Load() != 1 || ran.Load() != 1 {
		t.Fatalf("%d ran, at most %d at once; want exactly one actor", ran.Load(), maxRunning.Load())
	}
	if holder, _ := lease.New(rdb, name, time.Second).Holder(ctx); holder != "" {
		t.Fatal("lease still held after Do returned")
	}
}
