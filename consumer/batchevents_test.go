package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// batchEvents is one consumer process's publisher on e: its own metrics, the test's lock
// names.
func (e *env) batchEvents(t *testing.T, locks partitionLock) *batchEvents {
	t.Helper()
	return &batchEvents{progress: store.NewEventProgress(e.db), outbox: store.NewOutbox(e.db), locks: locks,
		writer: e.writer(t, e.topics.Order.Name), offsets: e.admin(t), brokers: e.brokers, topic: e.topics.Order.Name,
		metrics: newMetrics(prometheus.NewRegistry()), log: slog.New(slog.DiscardHandler), now: time.Now}
}

func (e *env) partitionLocks(t *testing.T) mysqlPartitionLock {
	id := stacktest.ID(t)
	return mysqlPartitionLock{db: e.db, name: func(p int) string { return fmt.Sprintf("t-%s-%d", id, p) }}
}

// batch runs one batch through pe as the worker does; publish false stops after the
// commit (a crash before the publish).
func batch(t *testing.T, e *env, p *processor, pe *partitionEvents, msgs []kafka.Message, publish bool) *store.GrabSource {
	t.Helper()
	src := pe.begin(e.ctx)
	evs, err := p.ProcessFrom(e.ctx, msgs, src)
	if err != nil {
		t.Fatal(err)
	}
	if publish {
		pe.finish(e.ctx, src, evs)
	}
	return src
}

// onceEach fails unless the order topic holds exactly one event for each of want orders,
// and returns them by event id.
func onceEach(t *testing.T, e *env, want int) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for _, m := range readAll(t, e.brokers, e.topics.Order) {
		ev, err := event.DecodeOrderEvent(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		seen[ev.EventID]++
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("event %s published %d times", id, n)
		}
	}
	if len(seen) != want {
		t.Fatalf("%d distinct events on the topic, want %d", len(seen), want)
	}
	return seen
}

func (e *env) pending(t *testing.T) int64 {
	t.Helper()
	n, err := store.NewOutbox(e.db).CountPending(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The normal path: a batch's events go out from memory right after its commit, one
// progress write records them, no order is stamped, a redelivered batch publishes nothing.
func TestBatchEventsPublishedFromMemoryOnce(t *testing.T) {
	e := newEnv(t, 3, 5, 1)
	msgs := e.admit(t, 5)
	p := e.processor(t, store.NewOrders(e.db))
	b := e.batchEvents(t, e.partitionLocks(t))
	pe := b.open(0)
	defer pe.close()
	if src := batch(t, e, p, pe, msgs, true); src == nil || src.Seq != 0 {
		t.Fatalf("source %+v, want the partition claimed at sequence 0", src)
	}
	if src := batch(t, e, p, pe, msgs, true); src == nil || src.Seq != 1 {
		t.Fatalf("second source %+v, want sequence 1", src)
	}
	onceEach(t, e, 5)
	if n := testutil.ToFloat64(b.metrics.published); n != 5 {
		t.Fatalf("published counted %v, want 5", n)
	}
	if n := e.count(t, "event_published_at IS NOT NULL"); n != 0 {
		t.Fatalf("%d orders stamped, want none on the batch path", n)
	}
	if n := e.count(t, "grab_partition = 0 AND grab_seq = 0"); n != 5 {
		t.Fatalf("%d orders of batch 0, want 5", n)
	}
	if n := e.pending(t); n != 0 {
		t.Fatalf("%d events pending, want 0", n)
	}
}

// A process killed after the commit and before the publish, and another killed after the
// publish and before the progress write: the next owner publishes exactly what is missing.
func TestBatchEventsRecoveredAfterCrashes(t *testing.T) {
	e := newEnv(t, 10, 10, 1)
	msgs := e.admit(t, 5)
	p := e.processor(t, store.NewOrders(e.db))
	locks := e.partitionLocks(t)

	first := e.batchEvents(t, locks).open(2)
	batch(t, e, p, first, msgs[:2], false) // killed before the publish
	first.close()                          // the lock dies with the process's connection
	if n := e.pending(t); n != 2 {
		t.Fatalf("%d pending after the first crash, want 2", n)
	}

	b2 := e.batchEvents(t, locks)
	second := b2.open(2)
	src := second.begin(e.ctx) // takes the partition: recovers the first batch
	if src == nil || src.Seq != 1 {
		t.Fatalf("source %+v after recovery, want sequence 1", src)
	}
	evs, err := p.ProcessFrom(e.ctx, msgs[2:], src)
	if err != nil || len(evs) != 3 {
		t.Fatalf("%d events, %v", len(evs), err)
	}
	if err := second.publish(e.ctx, evs); err != nil { // killed before the progress write
		t.Fatal(err)
	}
	second.close()
	if n := testutil.ToFloat64(b2.metrics.published); n != 5 {
		t.Fatalf("second process published %v, want 2 recovered + 3", n)
	}

	b3 := e.batchEvents(t, locks)
	third := b3.open(2)
	defer third.close()
	if src := third.begin(e.ctx); src == nil || src.Seq != 2 {
		t.Fatalf("source %+v after the second recovery, want sequence 2", src)
	}
	if n, r := testutil.ToFloat64(b3.metrics.published), testutil.ToFloat64(b3.metrics.recovered); n != 0 || r != 3 {
		t.Fatalf("third process published %v and found %v on the topic, want 0 and 3", n, r)
	}
	onceEach(t, e, 5)
	if n := e.pending(t); n != 0 {
		t.Fatalf("%d events pending, want 0", n)
	}
}

// losableLock is a partition lock a test can make its holder lose (its connection killed).
type losableLock struct {
	mysqlPartitionLock
	lost    atomic.Bool
	release func()
}

func (l *losableLock) Acquire(ctx context.Context, partition int) (func(context.Context) error, func(), bool, error) {
	held, release, ok, err := l.mysqlPartitionLock.Acquire(ctx, partition)
	if !ok || err != nil {
		return held, release, ok, err
	}
	l.release = release
	return func(ctx context.Context) error {
		if l.lost.Load() {
			return fmt.Errorf("lock lost")
		}
		return held(ctx)
	}, release, true, nil
}

// Two consumers hold one grab partition during a rebalance: the new owner persists on the
// stamp path while the old one holds the lock; an old owner that lost the lock after its
// commit does not publish, and the new owner's recovery publishes its orders once.
func TestBatchEventsRebalanceAndALostLock(t *testing.T) {
	e := newEnv(t, 10, 10, 1)
	msgs := e.admit(t, 6)
	p := e.processor(t, store.NewOrders(e.db))
	locks := e.partitionLocks(t)
	oldLock := &losableLock{mysqlPartitionLock: locks}
	old := e.batchEvents(t, oldLock).open(1)
	defer old.close()
	batch(t, e, p, old, msgs[:2], true)

	newer := e.batchEvents(t, locks).open(1)
	defer newer.close()
	if src := batch(t, e, p, newer, msgs[2:3], true); src != nil {
		t.Fatalf("new owner got source %+v while the old one holds the lock", src)
	}
	if n := e.count(t, "grab_partition IS NULL AND event_published_at IS NULL"); n != 1 {
		t.Fatalf("%d orders for the relay, want the new owner's 1", n)
	}

	// The old owner commits a batch, then loses the lock before publishing it.
	src := old.begin(e.ctx)
	evs, err := p.ProcessFrom(e.ctx, msgs[3:5], src)
	if err != nil || len(evs) != 2 {
		t.Fatalf("%d events, %v", len(evs), err)
	}
	oldLock.lost.Store(true)
	oldLock.release()
	if src := newer.begin(e.ctx); src == nil || src.Seq != 2 { // takes over, recovers the 2
		t.Fatalf("new owner's source %+v, want sequence 2 after recovering", src)
	}
	old.finish(e.ctx, src, evs) // must neither publish nor record
	batch(t, e, p, newer, msgs[5:], true)
	if src := old.begin(e.ctx); src != nil {
		t.Fatalf("old owner got source %+v after losing the lock", src)
	}
	seen := onceEach(t, e, 5) // the relay's one is not published here
	if _, ok := seen[evs[0].EventID]; !ok {
		t.Fatalf("the lost owner's orders were not recovered: %v", seen)
	}
	if n := e.pending(t); n != 1 {
		t.Fatalf("%d events pending, want the relay's 1", n)
	}
}
