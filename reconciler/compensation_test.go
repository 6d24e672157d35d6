package main

import "testing"

// A replayed event whose request id already has an order is settled under the order's
// owner as MySQL stores it; an event naming another user cannot make Redis say the order is
// theirs.
func TestReplayedRedeliverySettlesUnderTheOrderOwner(t *testing.T) {
	e := newRecEnv(t, 5, 1)
	g := e.grab("alice", false)
	e.publish(e.topics.Compensation.Name, g)
	if rep, err := e.once(); err != nil || jobOf(rep, "compensation").Summary["succeeded"] != 1 {
		t.Fatalf("first replay: %v %+v", err, jobOf(rep, "compensation"))
	}
	forged := g
	forged.UserID = "mallory"
	e.publish(e.topics.Compensation.Name, forged)
	rep, err := e.once()
	if err != nil || jobOf(rep, "compensation").Summary["existing"] != 1 {
		t.Fatalf("forged replay: %v %+v", err, jobOf(rep, "compensation"))
	}
	l, err := e.gate.Lookup(e.ctx, g.RequestID)
	if err != nil || l.Owner != "alice" || l.Status.State != "succeeded" {
		t.Fatalf("after a forged redelivery: %+v %v; want alice's succeeded order", l, err)
	}
	if n := e.orders("1=1"); n != 1 {
		t.Fatalf("%d orders, want 1", n)
	}
}
