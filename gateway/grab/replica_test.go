package grab

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
)

// countingWaiter counts the replica waits the handler asks for.
type countingWaiter struct {
	next  ReplicaWaiter
	calls atomic.Int64
}

func (c *countingWaiter) AwaitReplica(ctx context.Context, sid, pid int64, rid string, timeout time.Duration) error {
	c.calls.Add(1)
	return c.next.AwaitReplica(ctx, sid, pid, rid, timeout)
}

// With the wait on, a grab Kafka acknowledged costs the one Redis round trip of the admission
// script and no wait; a grab whose produce failed waits for a replica: on a Redis with replicas
// (the cluster profile) it is answered 202, on one without (the single profile) 503 with the
// request id, and the grab stays queued for the client to poll; a retry with the same key once
// Kafka is back is answered 202 without a wait.
func TestReplicaWaitOnlyAfterAFailedProduce(t *testing.T) {
	kafkaDown := &flakyWriter{}
	waits := &countingWaiter{}
	e := newGrabEnv(t, 10, 5, 5, func(a *API) {
		a.events = kafkaDown
		waits.next = a.gate.(ReplicaWaiter)
		a.replica, a.replicaWait = waits, 300*time.Millisecond
	})
	ctx := stacktest.Context(t, 30*time.Second)
	replicated, err := stock.HasReplicas(ctx, e.rdb)
	if err != nil {
		t.Fatal(err)
	}
	trips := &stacktest.RoundTrips{}
	e.rdb.AddHook(trips)

	expect(t, "Kafka up", e.grab(t, e.open, e.prizeA, "alice", "alice-key-0001"), 202, "")
	if n := trips.N(); n != 1 {
		t.Fatalf("a grab Kafka acknowledged made %d Redis round trips, want 1 (the admission script)", n)
	}
	if n := waits.calls.Load(); n != 0 {
		t.Fatalf("a grab Kafka acknowledged waited for a replica %d times", n)
	}

	kafkaDown.fail.Store(true)
	rid := seckill.UserRequestID(e.open.ID, e.prizeA, "bob", "bob-key-00001")
	a := e.grab(t, e.open, e.prizeA, "bob", "bob-key-00001")
	if n := waits.calls.Load(); n != 1 {
		t.Fatalf("a grab whose produce failed waited %d times, want 1", n)
	}
	if replicated {
		expect(t, "produce failed, a replica confirmed", a, 202, "")
		if got := testutil.ToFloat64(e.api.metrics.replicaWaits.WithLabelValues("confirmed")); got != 1 {
			t.Fatalf("confirmed waits = %v, want 1", got)
		}
	} else {
		expect(t, "produce failed, no replica", a, 503, "unavailable")
		if a.body["request_id"] != rid || a.hdr.Get("Location") != statusPath(rid) {
			t.Fatalf("503 without the request id to poll: %v %v", a.body, a.hdr)
		}
		if got := testutil.ToFloat64(e.api.metrics.replicaWaits.WithLabelValues("timeout")); got != 1 {
			t.Fatalf("timed-out waits = %v, want 1", got)
		}
		// Nothing was undone: the grab is queued, and the client finds it.
		poll := e.request(t, "GET", statusPath(rid), e.token(t, "bob"), "", "")
		if poll.code != 200 || poll.body["status"] != "queued" {
			t.Fatalf("poll after the 503: %d %v, want 200 queued", poll.code, poll.body)
		}
	}

	kafkaDown.fail.Store(false)
	again := e.grab(t, e.open, e.prizeA, "bob", "bob-key-00001")
	expect(t, "retry with the same key, Kafka back", again, 202, "")
	if again.body["request_id"] != rid || waits.calls.Load() != 1 {
		t.Fatalf("retry: %v, %d waits (want the same request id and no new wait)", again.body, waits.calls.Load())
	}
}

// BenchmarkFailedProducePath is a grab whose produce fails at once (the relay takes it), with
// the replica wait off and on: the difference is what the wait adds to that path (in
// production the path has also waited SECKILL_PRODUCE_TIMEOUT for Kafka). On the cluster
// profile (a Redis without replicas turns "on" into a timeout per grab):
//
//	go test -run '^$' -bench FailedProducePath -benchtime 300x ./gateway/
func BenchmarkFailedProducePath(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "wait off"
		if on {
			name = "wait on"
		}
		b.Run(name, func(b *testing.B) {
			kafkaDown := &flakyWriter{}
			kafkaDown.fail.Store(true)
			e := newGrabEnv(b, b.N+1, 1, 1, func(a *API) {
				a.events = kafkaDown
				if on {
					a.replica, a.replicaWait = a.gate.(ReplicaWaiter), time.Second
				}
			})
			toks := make([]string, b.N)
			for i := range toks {
				toks[i] = e.token(b, fmt.Sprintf("bench-user-%d", i))
			}
			b.ResetTimer()
			for i := range b.N {
				a := e.request(b, "POST", fmt.Sprintf("/api/v1/sessions/%d/prizes/%d/grab", e.open.ID, e.prizeA), toks[i],
					fmt.Sprintf("bench-key-%06d", i), "")
				if a.code != 202 {
					b.Fatalf("grab %d: %d %v", i, a.code, a.body)
				}
			}
		})
	}
}
