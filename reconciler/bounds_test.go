package main

import (
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/stock"
)

// A reservation whose event never reached Kafka is re-published within the stated bound
// even though its partition is never idle (here: consumers stopped with an event in flight,
// as under sustained traffic the lag never reaches 0). Time passing is stood for by the
// admission times and the bound, not by sleeping: the reservations are admitted 400 ms ago
// (stale, but younger than the 1500 ms bound), and the second run has a bound of 300 ms,
// which they are older than. The bound's instant is TestStaleThresholds', on a fake clock.
func TestStaleRepublishedWithinBoundWhilePartitionBusy(t *testing.T) {
	e := newRecEnv(t, 5, 1)
	e.env["SECKILL_REPUBLISH_BOUND"] = "1500ms"
	admitted := time.Now().Add(-400 * time.Millisecond)
	e.grabAt("busy", true, admitted) // on the topic, never consumed: the partition's lag stays 1
	lost := e.grabAt("lost", false, admitted)
	rep, err := e.once()
	if err != nil {
		t.Fatal(err)
	}
	if s := jobOf(rep, "stale"); s.Summary["republished"] != 0 || s.Summary["in_flight"] != 2 {
		t.Fatalf("stale job before the bound: %+v", s)
	}
	e.env["SECKILL_REPUBLISH_BOUND"] = "300ms" // now older than the bound; the partition is still busy
	rep, err = e.once()
	if err != nil {
		t.Fatal(err)
	}
	if s := jobOf(rep, "stale"); s.Summary["republished"] != 2 {
		t.Fatalf("stale job past the bound with the partition busy: %+v", s)
	}
	e.startConsumer()
	e.waitOrders(2)
	e.waitSettled()
	if n := e.orders("1=1"); n != 2 {
		t.Fatalf("%d orders, want 2 (the re-published duplicate deduped)", n)
	}
	if l, _ := e.gate.Lookup(e.ctx, lost.RequestID); l.Status.State != "succeeded" {
		t.Fatalf("lost grab's status %+v", l)
	}
}

// The rebuild reads the compensation backlog after waiting for the consumers, not before:
// a grab compensated during the wait is admitted but not in MySQL, and rebuilding then
// would hand its unit out twice.
func TestRebuildRechecksCompensationAfterWait(t *testing.T) {
	e := newRecEnv(t, 10, 1)
	e.grab("a", true) // in flight; no consumer yet
	late := e.grab("late", false)
	k := stock.KeysFor(e.session, e.prize)
	e.rdb.Del(e.ctx, k.Meta, k.Users, k.Reserved, k.Outcomes)
	e.env["SECKILL_CATCHUP_WAIT"] = "30s"
	type outcome struct {
		rep report
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		rep, err := e.once()
		done <- outcome{rep, err}
	}()
	time.Sleep(1500 * time.Millisecond) // the run is waiting for the consumers
	e.publish(e.topics.Compensation.Name, late)
	e.startConsumer()
	o := <-done
	if o.err == nil || jobOf(o.rep, "rebuild").Summary["rebuilt"] != 0 {
		t.Fatalf("rebuild with a grab waiting on the compensation topic: %v %+v", o.err, jobOf(o.rep, "rebuild"))
	}
	if n, err := e.rdb.Exists(e.ctx, k.Meta).Result(); err != nil || n != 0 {
		t.Fatal("keys rebuilt while a compensated grab was not in MySQL")
	}
	// The next run replays it first, then rebuilds with its unit counted.
	rep, err := e.once()
	if err != nil || jobOf(rep, "rebuild").Summary["rebuilt"] != 1 {
		t.Fatalf("next run: %v %+v", err, rep)
	}
	if e.redisLeft() != 8 || e.dbLeft() != 8 {
		t.Fatalf("redis left %d, db left %d, want 8", e.redisLeft(), e.dbLeft())
	}
}
