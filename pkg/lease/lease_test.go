package lease_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/lease"
)

func TestOneHolderAndFencing(t *testing.T) {
	_, db := stacktest.Migrated(t)
	ctx := stacktest.Context(t, 30*time.Second)
	a, b := lease.New(db, "r", 500*time.Millisecond), lease.New(db, "r", 500*time.Millisecond)

	h1, ok, err := a.TryAcquire(ctx)
	if err != nil || !ok {
		t.Fatalf("first acquire: %v %v", ok, err)
	}
	if _, ok, _ := b.TryAcquire(ctx); ok {
		t.Fatal("second instance acquired a held lease")
	}
	// Releasing with a stale token must not free the holder's lease.
	if err := b.Release(ctx, lease.Held{Token: "not-the-holder", Fence: h1.Fence}); err != nil {
		t.Fatal(err)
	}
	if holder, _, _ := a.Holder(ctx); holder != h1.Token {
		t.Fatal("a foreign release freed the lease")
	}
	if err := h1.Fence.Check(ctx); err != nil {
		t.Fatalf("holder's own fence refused: %v", err)
	}
	if err := a.Release(ctx, h1); err != nil {
		t.Fatal(err)
	}
	h2, ok, err := b.TryAcquire(ctx)
	if err != nil || !ok || h2.Fence.Number <= h1.Fence.Number {
		t.Fatalf("reacquire: ok=%v fence %d after %d, err %v", ok, h2.Fence.Number, h1.Fence.Number, err)
	}
	// The old holder can neither renew nor pass a fence check any more.
	if ok, _ := a.Renew(ctx, h1); ok {
		t.Fatal("stale holder renewed the lease")
	}
	if err := h1.Fence.Check(ctx); !errors.Is(err, lease.ErrStale) {
		t.Fatalf("stale fence check: %v, want ErrStale", err)
	}
	_ = b.Release(ctx, h2)
}

// A holder that stops renewing (a process paused by SIGSTOP, a long GC pause) keeps its
// fence only until someone else takes the expired lease; from then on every check fails.
func TestPausedHolderIsFencedOutAfterTakeover(t *testing.T) {
	_, db := stacktest.Migrated(t)
	ctx := stacktest.Context(t, 30*time.Second)
	// The expiry is MySQL's (expires_at against NOW(6)), so this test waits on the server's
	// clock, not a fake one: a TTL of 20 ms keeps the wait short, and waitExpired ends it as
	// soon as MySQL says the lease expired. Do's timing is TestDoStopsWorkBeforeTheLeaseCanBeTakenOver's.
	a, b := lease.New(db, "r", 20*time.Millisecond), lease.New(db, "r", 20*time.Millisecond)
	h1, ok, err := a.TryAcquire(ctx)
	if err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	waitExpired(ctx, t, a) // "paused" past the TTL, nobody took over yet
	if err := h1.Fence.Check(ctx); err != nil {
		t.Fatalf("expired but not retaken: %v; nobody else acted, the fence is still current", err)
	}
	h2, ok, err := b.TryAcquire(ctx)
	if err != nil || !ok {
		t.Fatalf("takeover of an expired lease: %v %v", ok, err)
	}
	if err := h1.Fence.Check(ctx); !errors.Is(err, lease.ErrStale) {
		t.Fatalf("paused holder after takeover: %v, want ErrStale", err)
	}
	if ok, _ := a.Renew(ctx, h1); ok {
		t.Fatal("paused holder renewed after takeover")
	}
	if err := h2.Fence.Check(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitExpired polls until MySQL holds l expired (Holder reads it with TryAcquire's
// condition), so a test waits no longer than the server's clock takes.
func waitExpired(ctx context.Context, t *testing.T, l *lease.Lease) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		holder, _, err := l.Holder(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if holder == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the lease has not expired after 10s")
		}
	}
}

// Renewal against the real server: the work outlives the TTL twice on the wall clock, so
// MySQL's expiry would let another instance in if a renewal did not land. The renewal's
// timing itself (every ttl/3, each given ttl/3) is TestDoRenewsEveryThirdOfTheTTL's, in a
// synctest bubble.
func TestDoRunsOneActorAndRenews(t *testing.T) {
	_, db := stacktest.Migrated(t)
	ctx := stacktest.Context(t, 30*time.Second)
	var running, maxRunning, ran atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := lease.New(db, "r", 300*time.Millisecond)
			_, err := l.Do(ctx, func(ctx context.Context, _ lease.Fence) error {
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
	if holder, _, _ := lease.New(db, "r", time.Second).Holder(ctx); holder != "" {
		t.Fatal("lease still held after Do returned")
	}
}

// A renewal that reaches the server after the release (its client gave up on it, the
// statement ran anyway) must not bring the lease back.
func TestLateRenewalCannotResurrectAReleasedLease(t *testing.T) {
	_, db := stacktest.Migrated(t)
	ctx := stacktest.Context(t, 30*time.Second)
	l := lease.New(db, "r", 10*time.Second)
	h, ok, err := l.TryAcquire(ctx)
	if err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	if err := l.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	if ok, _ := l.Renew(ctx, h); ok {
		t.Fatal("a renewal after the release succeeded")
	}
	if holder, _, _ := l.Holder(ctx); holder != "" {
		t.Fatal("the released lease is held again")
	}
	if _, ok, err := lease.New(db, "r", time.Second).TryAcquire(ctx); err != nil || !ok {
		t.Fatalf("another instance could not take the released lease: %v %v", ok, err)
	}
}
