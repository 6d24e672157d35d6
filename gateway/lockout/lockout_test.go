package lockout

import (
	"fmt"
	"testing"
	"time"
)

func TestLockout(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	l := New(3, time.Minute, 100, func() time.Time { return now })
	for i := 1; i <= 3; i++ {
		if blocked, _ := l.Blocked("10.0.0.1"); blocked {
			t.Fatalf("blocked before failure %d", i)
		}
		if locked := l.Fail("10.0.0.1"); locked != (i == 3) {
			t.Fatalf("failure %d: locked %v", i, locked)
		}
	}
	now = now.Add(20 * time.Second)
	if blocked, wait := l.Blocked("10.0.0.1"); !blocked || wait != 40*time.Second {
		t.Fatalf("after 3 failures: blocked %v for %s, want true for 40s", blocked, wait)
	}
	if blocked, _ := l.Blocked("10.0.0.2"); blocked {
		t.Fatal("another client is blocked")
	}
	now = now.Add(40 * time.Second)
	if blocked, _ := l.Blocked("10.0.0.1"); blocked {
		t.Fatal("still blocked after the window")
	}
	if l.Fail("10.0.0.1") {
		t.Fatal("a new window starts counting from one")
	}
	if New(0, time.Minute, 1, time.Now) != nil {
		t.Fatal("max 0 should turn the lockout off")
	}
	var off *Lockout
	if blocked, _ := off.Blocked("x"); blocked || off.Fail("x") {
		t.Fatal("a nil Lockout refuses")
	}
}

// The table never holds more than maxKeys keys, and a locked-out client is not the one
// evicted while a newer key could be.
func TestLockoutIsBounded(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	l := New(2, time.Minute, 10, func() time.Time { return now })
	l.Fail("guesser")
	l.Fail("guesser")
	for i := range 100 {
		now = now.Add(time.Millisecond)
		l.Fail(fmt.Sprintf("10.1.0.%d", i))
	}
	if n := l.Len(); n > 10 {
		t.Fatalf("%d keys, want at most 10", n)
	}
	// The guesser's entry was the oldest, so it went first: bounded memory costs at most one
	// window of its lockout, never more than a fresh start would give it.
	now = now.Add(2 * time.Minute)
	l.Fail("late")
	if n := l.Len(); n != 1 {
		t.Fatalf("%d keys after every window ended, want 1", n)
	}
}
