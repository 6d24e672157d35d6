package main

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	leasepkg "github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/stock"
)

// A reconciler paused (SIGSTOP) while holding the lease, past the lease's TTL, is taken over
// by another; when it resumes it cannot write anything: the new holder's rebuild is the only
// one, audited once, and Redis carries the new holder's fence.
func TestPausedReconcilerCannotWriteAfterTakeover(t *testing.T) {
	e := newRecEnv(t, 10, 1)
	e.startConsumer()
	e.grab("a", true)
	e.waitOrders(1)
	e.waitSettled()
	if err := e.consumer.Stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	e.grab("b", true) // in flight: the paused holder's rebuild waits for it
	k := stock.KeysFor(e.session, e.prize)
	e.rdb.Del(e.ctx, k.Meta, k.Users, k.Reserved, k.Outcomes)

	env := map[string]string{"SECKILL_CATCHUP_WAIT": "60s"}
	for k, v := range e.env {
		if _, ok := env[k]; !ok {
			env[k] = v
		}
	}
	paused := stacktest.Start(t, "reconciler", env, "--once")
	lease := leasepkg.New(e.db, e.env["SECKILL_RECONCILER_LEASE"], time.Second)
	deadline := time.Now().Add(20 * time.Second)
	var firstFence int64
	for firstFence == 0 {
		if _, fence, _ := lease.Holder(e.ctx); fence > 0 {
			firstFence = fence
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("reconciler never took the lease:\n%s", paused.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Real waits, both: a process (not a fake clock) is paused, and MySQL (not Go) expires its
	// lease. The in-process timing of a lost lease is TestRunStopsWhenTheLeaseIsLostMidRun's
	// and pkg/lease's TestDo* tests', in synctest bubbles.
	time.Sleep(500 * time.Millisecond) // into the rebuild job's wait for the consumers
	paused.Signal(syscall.SIGSTOP)
	// The paused holder's lease expires (2 s TTL): polled, so the wait ends as MySQL says so.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if holder, _, err := lease.Holder(e.ctx); err == nil && holder == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the paused holder's lease did not expire in 20s")
		}
	}

	e.startConsumer()
	e.waitOrders(2)
	rep, err := e.once()
	if err != nil || rep.Lease != "held" || rep.Fence <= firstFence || jobOf(rep, "rebuild").Summary["rebuilt"] != 1 {
		t.Fatalf("takeover run: %v %+v (paused holder's fence %d)", err, rep, firstFence)
	}

	paused.Signal(syscall.SIGCONT)
	if err := paused.Wait(30 * time.Second); err == nil {
		t.Fatalf("the resumed holder reported success:\n%s", paused.Output())
	}
	out := paused.Output()
	if !strings.Contains(out, "lease lost") && !strings.Contains(out, "stale fence") {
		t.Fatalf("the resumed holder did not notice the takeover:\n%s", out)
	}
	if n := e.audits("rebuild_redis_stock"); n != 1 {
		t.Fatalf("%d rebuild audits, want only the new holder's", n)
	}
	if f, _ := e.rdb.Get(e.ctx, k.Fence).Int64(); f != rep.Fence {
		t.Fatalf("redis fence %d, want the new holder's %d", f, rep.Fence)
	}
	if e.redisLeft() != 8 || e.dbLeft() != 8 {
		t.Fatalf("redis left %d, db left %d, want 8", e.redisLeft(), e.dbLeft())
	}
}
