package draw_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/draw"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
)

// The entry script and the phases against the stack's Redis: refused and counted before the
// window, one entry per user in it, none after it or after the freeze whatever the clock
// says; the admission script admits only the draw's request ids until the phase is fcfs;
// phases only move forward, under the fence.
func TestEntriesAndPhases(t *testing.T) {
	rdb := stacktest.Redis(t)
	ctx := stacktest.Context(t, time.Minute)
	g, err := stock.NewGate(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	e, err := draw.NewEntries(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	var sid int64
	fmt.Sscanf(stacktest.ID(t)[:10], "%x", &sid)
	const pid = 7
	from := time.Now().Truncate(time.Millisecond).Add(time.Hour)
	until := from.Add(10 * time.Second)
	k := stock.KeysFor(sid, pid)
	t.Cleanup(func() {
		rdb.Del(context.Background(), k.Meta, k.Users, k.Reserved, k.Outcomes, k.Fence,
			"sk:{"+fmt.Sprint(sid)+":7}:entries", "sk:{"+fmt.Sprint(sid)+":7}:early")
	})

	enter := func(user string, at time.Time, want draw.EnterCode) draw.EnterResult {
		t.Helper()
		r, err := e.Enter(ctx, sid, pid, user, at)
		if err != nil || r.Code != want {
			t.Fatalf("enter %s at %s: %+v %v, want code %d", user, at.Sub(from), r, err, want)
		}
		return r
	}
	reserve := func(rid, user string, want stock.Code) {
		t.Helper()
		v, err := g.Reserve(ctx, seckill.Grab{RequestID: rid, UserID: user, SessionID: sid, PrizeID: pid, AdmittedAt: time.Now()})
		if err != nil || v.Code != want {
			t.Fatalf("reserve %s of %s: %s %v, want %s", rid, user, v.Code, err, want)
		}
	}

	enter("u1", from, draw.NotArmed) // no keys yet
	if _, err := e.SetPhase(ctx, sid, pid, draw.NoFence, draw.GateEntering, from, until); !errors.Is(err, seckill.ErrNotLoaded) {
		t.Fatalf("arming keys not loaded: %v, want ErrNotLoaded", err)
	}
	res, err := g.Load(ctx, []seckill.Stock{{SessionID: sid, PrizeID: pid, Total: 2, Left: 2, PerUserLimit: 1}}, time.Now().Add(2*time.Hour))
	if err != nil || !res[0].Loaded {
		t.Fatalf("load: %v %v", res, err)
	}
	enter("u1", from, draw.NotArmed) // loaded, not armed
	if ph, err := e.SetPhase(ctx, sid, pid, draw.NoFence, draw.GateEntering, from, until); err != nil || ph != draw.GateEntering {
		t.Fatalf("arm: %q %v", ph, err)
	}
	// Without the lease a phase is only ever set where none is (a preheat's arming, the draw
	// loop restoring what a rebuild lost): it never moves one.
	if ph, err := e.SetPhase(ctx, sid, pid, draw.NoFence, draw.GateDrawing, from, until); err != nil || ph != draw.GateEntering {
		t.Fatalf("moving past entering without a fence: %q %v, want the phase left at entering", ph, err)
	}

	// Before the window: refused and counted per user.
	if r := enter("u1", from.Add(-time.Second), draw.Early); r.Early != 1 {
		t.Fatalf("first early entry counted %d", r.Early)
	}
	if r := enter("u1", from.Add(-time.Millisecond), draw.Early); r.Early != 2 {
		t.Fatalf("second early entry counted %d", r.Early)
	}
	// In the window: one entry per user; a repeat keeps the first time.
	first := enter("u1", from.Add(time.Second), draw.Entered)
	if again := enter("u1", from.Add(2*time.Second), draw.Again); !again.At.Equal(first.At) {
		t.Fatalf("a repeat moved the entry from %s to %s", first.At, again.At)
	}
	enter("u2", from.Add(3*time.Second), draw.Entered)
	// A grab cannot take a unit while the draw holds the prize; the draw's own id can.
	reserve(seckill.UserRequestID(sid, pid, "u3", "key-00000001"), "u3", stock.Drawn)
	// After the window by this gateway's clock: closed; an entrant hears when they entered.
	if r := enter("u1", until, draw.Closed); !r.At.Equal(first.At) {
		t.Fatalf("closed, an entrant: %+v", r)
	}
	if r := enter("u3", until, draw.Closed); !r.At.IsZero() {
		t.Fatalf("closed, not an entrant: %+v", r)
	}

	// The freeze: no entry after it, even by a clock still inside the window.
	if ph, err := e.SetPhase(ctx, sid, pid, 5, draw.GateDrawing, time.Time{}, until); err != nil || ph != draw.GateDrawing {
		t.Fatalf("freeze: %q %v", ph, err)
	}
	enter("u4", from.Add(4*time.Second), draw.Closed)
	if _, err := e.SetPhase(ctx, sid, pid, 4, draw.GateWaitlist, time.Time{}, until); !errors.Is(err, draw.ErrFenced) {
		t.Fatalf("an older fence: %v, want ErrFenced", err)
	}
	if ph, err := e.SetPhase(ctx, sid, pid, 5, draw.GateEntering, from, until); err != nil || ph != draw.GateDrawing {
		t.Fatalf("moving back: %q %v, want the phase left at drawing", ph, err)
	}
	got, err := e.Scan(ctx, sid, pid)
	if err != nil || len(got) != 2 {
		t.Fatalf("scan: %+v %v", got, err)
	}
	for _, en := range got {
		if want := map[string]int64{"u1": 2, "u2": 0}[en.User]; en.Early != want {
			t.Errorf("scan: %s early %d, want %d", en.User, en.Early, want)
		}
	}
	reserve(seckill.DrawRequestID(sid, pid, "u2"), "u2", stock.Admitted)
	reserve(seckill.DrawRequestID(sid, pid, "u2"), "u2", stock.Seen) // the draw repeating a round
	reserve(seckill.UserRequestID(sid, pid, "u3", "key-00000002"), "u3", stock.Drawn)

	// Nobody waits any more: what is left goes first come, first served.
	if ph, err := e.SetPhase(ctx, sid, pid, 5, draw.GateFirstCome, time.Time{}, until); err != nil || ph != draw.GateFirstCome {
		t.Fatalf("first come: %q %v", ph, err)
	}
	enter("u5", from.Add(time.Second), draw.FirstCome)
	reserve(seckill.UserRequestID(sid, pid, "u3", "key-00000003"), "u3", stock.Admitted)

	// A rebuild recreates the keys without the phase: restored without the lease, it takes.
	if err := rdb.HDel(ctx, k.Meta, "draw").Err(); err != nil {
		t.Fatal(err)
	}
	if ph, err := e.SetPhase(ctx, sid, pid, draw.NoFence, draw.GateWaitlist, from, until); err != nil || ph != draw.GateWaitlist {
		t.Fatalf("restoring a lost phase: %q %v", ph, err)
	}
	reserve(seckill.UserRequestID(sid, pid, "u6", "key-00000004"), "u6", stock.Drawn)
}
