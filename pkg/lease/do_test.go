package lease

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// Unit tests of Do's timing (do) in a synctest bubble: the clock is the bubble's, so a TTL
// of seconds passes in no wall time and every instant below is exact. MySQL cannot be in a
// bubble, so the row is a fake that keeps the statements' rules on the bubble's clock: taken
// only once expired (expires_at < NOW(6)) with the next fencing number, renewed and released
// only by the holder of the current fence. The expiry MySQL itself judges is
// TestPausedHolderIsFencedOutAfterTakeover's, against the real server.

// fakeTable is one leases row shared by the holders of a test.
type fakeTable struct {
	mu      sync.Mutex
	holder  string
	fence   int64
	expires time.Time
	tokens  int
}

// fakeRow is one process's view of the row: its TTL, and how its renewals fare.
type fakeRow struct {
	t   *fakeTable
	ttl time.Duration

	mu           sync.Mutex
	renewals     []time.Time // every renewal the row accepted
	hang         bool        // a renewal blocks until its context ends (MySQL unreachable)
	releaseHangs bool        // a release does too
	fail         error       // a renewal fails with this error
}

func (r *fakeRow) TryAcquire(context.Context) (Held, bool, error) {
	t := r.t
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	if t.holder != "" && !t.expires.Before(now) {
		return Held{}, false, nil
	}
	t.tokens++
	t.fence++
	t.holder, t.expires = string(rune('a'-1+t.tokens)), now.Add(r.ttl)
	return Held{Token: t.holder, Fence: Fence{Name: "r", Number: t.fence}}, true, nil
}

func (r *fakeRow) Renew(ctx context.Context, h Held) (bool, error) {
	r.mu.Lock()
	hang, fail := r.hang, r.fail
	r.mu.Unlock()
	if hang {
		<-ctx.Done()
		return false, ctx.Err()
	}
	if fail != nil {
		return false, fail
	}
	t := r.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.holder != h.Token || t.fence != h.Fence.Number {
		return false, nil
	}
	t.expires = time.Now().Add(r.ttl)
	r.mu.Lock()
	r.renewals = append(r.renewals, time.Now())
	r.mu.Unlock()
	return true, nil
}

func (r *fakeRow) Release(ctx context.Context, h Held) error {
	r.mu.Lock()
	hang := r.releaseHangs
	r.mu.Unlock()
	if hang {
		<-ctx.Done()
		return ctx.Err()
	}
	t := r.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.holder == h.Token && t.fence == h.Fence.Number {
		t.holder, t.expires = "", time.Now().Add(-time.Microsecond)
	}
	return nil
}

func (r *fakeRow) set(f func(r *fakeRow)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(r)
}

// takeOver is another process drawing a newer fence, as after a pause past the TTL.
func (t *fakeTable) takeOver() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.fence++
	t.holder = "other"
}

// A holder renews every third of the TTL for as long as its work runs, and another process
// trying meanwhile finds the lease busy and runs nothing; once Do returns the lease is free.
func TestDoRenewsEveryThirdOfTheTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 3 * time.Second
		start := time.Now()
		table := &fakeTable{}
		a, b := &fakeRow{t: table, ttl: ttl}, &fakeRow{t: table, ttl: ttl}
		done := make(chan error)
		go func() {
			acquired, err := do(context.Background(), a, ttl, func(ctx context.Context, f Fence) error {
				time.Sleep(9*time.Second + 500*time.Millisecond) // three TTLs and more
				return ctx.Err()
			})
			if !acquired {
				err = errors.New("not acquired")
			}
			done <- err
		}()
		time.Sleep(5 * time.Second) // long past the first TTL, renewed meanwhile
		ran := false
		acquired, err := do(context.Background(), b, ttl, func(context.Context, Fence) error { ran = true; return nil })
		if acquired || ran || err != nil {
			t.Fatalf("second process on a renewed lease: acquired %v, ran %v, err %v", acquired, ran, err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		var at []time.Duration
		for _, r := range a.renewals {
			at = append(at, r.Sub(start))
		}
		want := []time.Duration{1 * time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second, 5 * time.Second,
			6 * time.Second, 7 * time.Second, 8 * time.Second, 9 * time.Second}
		if !slices.Equal(at, want) {
			t.Fatalf("renewals at %v, want every ttl/3: %v", at, want)
		}
		if acquired, err := do(context.Background(), b, ttl, func(context.Context, Fence) error { return nil }); !acquired || err != nil {
			t.Fatalf("after the release: acquired %v, err %v", acquired, err)
		}
	})
}

// A lease lost mid-run (another process drew a newer fence: this one was paused, or MySQL
// expired it) is noticed at the next renewal: work's context ends then, with ErrLost as its
// cause, Do reports ErrLost, and its release leaves the new holder's lease alone.
func TestDoStopsWorkAtTheRenewalThatFindsTheLeaseLost(t *testing.T) {
	for _, tc := range []struct {
		name string
		lose func(table *fakeTable, row *fakeRow)
	}{
		{"taken over", func(table *fakeTable, _ *fakeRow) { table.takeOver() }},
		{"renewal failed", func(_ *fakeTable, row *fakeRow) {
			row.set(func(r *fakeRow) { r.fail = errors.New("mysql: connection refused") })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const ttl = 3 * time.Second
				start := time.Now()
				table := &fakeTable{}
				a := &fakeRow{t: table, ttl: ttl}
				var stopped time.Duration
				var cause error
				go func() {
					time.Sleep(4*time.Second + 500*time.Millisecond) // renewed at 1 s .. 4 s
					tc.lose(table, a)
				}()
				acquired, err := do(context.Background(), a, ttl, func(ctx context.Context, f Fence) error {
					select {
					case <-ctx.Done():
						stopped, cause = time.Since(start), context.Cause(ctx)
						return nil // work that notices the loss and stops without an error of its own
					case <-time.After(time.Minute):
						return errors.New("work ran on after the lease was lost")
					}
				})
				if !acquired || !errors.Is(err, ErrLost) {
					t.Fatalf("Do: acquired %v, err %v; want ErrLost", acquired, err)
				}
				if stopped != 5*time.Second || !errors.Is(cause, ErrLost) {
					t.Fatalf("work stopped at %v (cause %v), want at the renewal at 5s with ErrLost", stopped, cause)
				}
				table.mu.Lock()
				holder := table.holder
				table.mu.Unlock()
				if tc.name == "taken over" && holder != "other" {
					t.Fatalf("the lost holder's release freed the new holder's lease (holder %q)", holder)
				}
			})
		})
	}
}

// A renewal that hangs is given up after a third of the TTL, and work's context ends then:
// before the last accepted renewal expires, so before a second process can take the lease.
// Where the release goes through, the second takes it right after; where MySQL is
// unreachable for the first holder (its release hangs too), only once it expired. Either
// way the takeover draws a newer fence and starts after the first holder's work stopped.
func TestDoStopsWorkBeforeTheLeaseCanBeTakenOver(t *testing.T) {
	for _, tc := range []struct {
		name           string
		releaseHangs   bool
		wantBStarted   time.Duration
		wantAErrIsLost bool
	}{
		// b tries every 100 ms from 50 ms on; a releases at 4 s.
		{name: "renewal hangs, release goes through", wantBStarted: 4050 * time.Millisecond, wantAErrIsLost: true},
		// The lease expires at 5 s (expires_at < NOW(6): free from just after). Do reports the
		// failed release, which hides ErrLost (both mean the run did not end well).
		{name: "mysql unreachable for the holder", releaseHangs: true, wantBStarted: 5050 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const ttl = 3 * time.Second
				start := time.Now()
				table := &fakeTable{}
				a, b := &fakeRow{t: table, ttl: ttl}, &fakeRow{t: table, ttl: ttl}
				var aStopped, bStarted time.Duration
				var aFence, bFence int64
				go func() {
					time.Sleep(2*time.Second + 500*time.Millisecond) // renewed at 1 s and 2 s
					a.set(func(r *fakeRow) { r.hang, r.releaseHangs = true, tc.releaseHangs })
				}()
				aDone := make(chan error)
				go func() {
					_, err := do(context.Background(), a, ttl, func(ctx context.Context, f Fence) error {
						aFence = f.Number
						<-ctx.Done()
						aStopped = time.Since(start)
						return nil
					})
					aDone <- err
				}()
				synctest.Wait() // the first holder took the lease and works
				// The second process tries every 100 ms, as a scheduler would (more often than one),
				// off the whole seconds at which the first one acts: one instant, one order.
				time.Sleep(50 * time.Millisecond)
				for {
					acquired, err := do(context.Background(), b, ttl, func(ctx context.Context, f Fence) error {
						bStarted, bFence = time.Since(start), f.Number
						return nil
					})
					if err != nil {
						t.Fatal(err)
					}
					if acquired {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				if err := <-aDone; err == nil || errors.Is(err, ErrLost) != tc.wantAErrIsLost {
					t.Fatalf("first holder's Do: %v, want an error (ErrLost: %v)", err, tc.wantAErrIsLost)
				}
				lastRenewal := a.renewals[len(a.renewals)-1].Sub(start)
				if lastRenewal != 2*time.Second || aStopped != 4*time.Second {
					t.Fatalf("last renewal at %v, work stopped at %v; want 2s and 4s (the hung renewal at 3s given up after ttl/3)", lastRenewal, aStopped)
				}
				if aStopped >= lastRenewal+ttl {
					t.Fatalf("first holder stopped at %v, after its lease expired at %v", aStopped, lastRenewal+ttl)
				}
				if bStarted != tc.wantBStarted || bStarted <= aStopped {
					t.Fatalf("second holder started at %v, want %v (the first stopped at %v)", bStarted, tc.wantBStarted, aStopped)
				}
				if bFence != aFence+1 {
					t.Fatalf("takeover drew fence %d after %d", bFence, aFence)
				}
			})
		})
	}
}
