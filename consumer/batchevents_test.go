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
		pe.finish(e.ctx, src, evs, time.Now())
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
	if err := second.publish(e.ctx, second.held, evs); err != nil { // killed before the progress write
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
	old.finish(e.ctx, src, evs, time.Now()) // must neither publish nor record
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

func TestSplitFound(t *testing.T) {
	evs := []store.SeqEvent{{OutboxEvent: store.OutboxEvent{EventID: "a"}}, {OutboxEvent: store.OutboxEvent{EventID: "b"}},
		{OutboxEvent: store.OutboxEvent{EventID: "c"}}}
	missing, found := splitFound(evs, map[string]bool{"b": true, "x": true})
	if found != 1 || len(missing) != 2 || missing[0].EventID != "a" || missing[1].EventID != "c" {
		t.Fatalf("missing %+v, found %d; want a and c missing, b found", missing, found)
	}
}

// failFirst fails its first write without writing: a produce error.
type failFirst struct {
	producer
	failed atomic.Bool
}

func (f *failFirst) WriteMessages(ctx context.Context, msgs ...kafka.Message) error {
	if f.failed.CompareAndSwap(false, true) {
		return fmt.Errorf("injected produce error")
	}
	return f.producer.WriteMessages(ctx, msgs...)
}

// A batch whose publish failed is recovered even when no grab follows it: the idle worker
// retries, and publishes each event once.
func TestIdlePartitionRecoversAFailedPublish(t *testing.T) {
	e := newEnv(t, 10, 10, 1)
	msgs := e.admit(t, 3)
	for i := range msgs {
		msgs[i].Topic = ""
	}
	if err := e.writer(t, e.topics.Grab.Name).WriteMessages(e.ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	b := e.batchEvents(t, e.partitionLocks(t))
	b.writer = &failFirst{producer: b.writer}
	b.retryEvery = 50 * time.Millisecond
	g := &groupConsumer{brokers: e.brokers, groupID: "t-" + stacktest.ID(t), topic: e.topics.Grab.Name, batchSize: 100,
		batchWait: 10 * time.Millisecond, readAhead: 4 << 20, proc: e.processor(t, store.NewOrders(e.db)), events: b, log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	deadline := time.Now().Add(60 * time.Second)
	for e.count(t, "1=1") < 3 || e.pending(t) > 0 {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("%d orders, %d events pending after 60 s", e.count(t, "1=1"), e.pending(t))
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !b.writer.(*failFirst).failed.Load() {
		t.Fatal("the publish never failed: the test tests nothing")
	}
	onceEach(t, e, 3)
}

// A batch's finish runs beside the next batch's transaction. When it fails, the next batch,
// persisted meanwhile under the claim with the next sequence number, is not published from
// memory: recording it would record the failed batch's events as published too. The next
// turn recovers both batches, each event once.
func TestFailedFinishBesideTheNextBatch(t *testing.T) {
	e := newEnv(t, 10, 10, 1)
	msgs := e.admit(t, 5)
	p := e.processor(t, store.NewOrders(e.db))
	b := e.batchEvents(t, e.partitionLocks(t))
	b.writer = &failFirst{producer: b.writer}
	pe := b.open(4)
	defer pe.close()
	if err := pe.run(e.ctx, p, msgs[:2]); err != nil { // its publish fails, beside the next batch
		t.Fatal(err)
	}
	if pe.inflight == nil {
		t.Fatal("run waited for its own finish: nothing runs beside the next batch")
	}
	if err := pe.run(e.ctx, p, msgs[2:]); err != nil {
		t.Fatal(err)
	}
	if n := e.count(t, "grab_partition = 4 AND grab_seq = 1"); n != 3 {
		t.Fatalf("%d orders of the second batch numbered 1, want 3 (numbered past the batch finishing)", n)
	}
	if n := testutil.ToFloat64(b.metrics.published); n != 0 || !pe.dirty || pe.inflight != nil {
		t.Fatalf("after the failed finish: %v published, dirty %v, in flight %v; want nothing published and the partition dirty",
			n, pe.dirty, pe.inflight != nil)
	}
	if n := e.pending(t); n != 5 {
		t.Fatalf("%d events pending, want both batches' 5", n)
	}
	pe.idle(e.ctx) // no grab follows: the idle turn recovers
	if n := e.pending(t); n != 0 || pe.dirty {
		t.Fatalf("%d events pending after the recovery (dirty %v), want 0", n, pe.dirty)
	}
	onceEach(t, e, 5)
	if src := pe.begin(e.ctx); src == nil || src.Seq != 2 {
		t.Fatalf("next source %+v, want sequence 2", src)
	}
}

// failsAfter persists the first n messages of a batch and then fails, as a batch whose later
// group could not be written (the worker stopping while MySQL is down, a dead-letter produce
// refused) after its earlier groups committed.
type failsAfter struct {
	p *processor
	n int
}

func (f failsAfter) ProcessFrom(ctx context.Context, msgs []kafka.Message, src *store.GrabSource) ([]store.OutboxEvent, error) {
	if _, err := f.p.ProcessFrom(ctx, msgs[:f.n], src); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("injected: a later group failed")
}

// A batch that fails part way leaves committed orders behind; the worker stops after it.
// Their events go out before it does, once each, not when the partition next has an owner.
func TestFailedBatchPublishesWhatItCommitted(t *testing.T) {
	e := newEnv(t, 10, 10, 1)
	msgs := e.admit(t, 4)
	pe := e.batchEvents(t, e.partitionLocks(t)).open(5)
	defer pe.close()
	if err := pe.run(e.ctx, failsAfter{p: e.processor(t, store.NewOrders(e.db)), n: 2}, msgs); err == nil {
		t.Fatal("run returned no error for a failed batch")
	}
	onceEach(t, e, 2)
	if n := e.pending(t); n != 0 {
		t.Fatalf("%d events pending after the failed batch, want 0", n)
	}
}

// A batch published long after its first commit (retries, an outage) is stamped, so the
// payment clock of its orders starts at the publication; a prompt one is not.
func TestSlowBatchIsStampedPublished(t *testing.T) {
	e := newEnv(t, 10, 10, 1)
	msgs := e.admit(t, 4)
	p := e.processor(t, store.NewOrders(e.db))
	b := e.batchEvents(t, e.partitionLocks(t))
	clock := time.Now()
	b.now = func() time.Time { return clock }
	pe := b.open(6)
	defer pe.close()
	if err := pe.run(e.ctx, p, msgs[:2]); err != nil {
		t.Fatal(err)
	}
	pe.wait() // the finish runs beside the next batch: let it end, as the next batch does
	if n := e.count(t, "event_published_at IS NOT NULL"); n != 0 {
		t.Fatalf("%d orders of a prompt batch stamped, want 0", n)
	}
	slow := slowProcessor{p: p, advance: func() { clock = clock.Add(stampAfter + time.Millisecond) }}
	if err := pe.run(e.ctx, slow, msgs[2:]); err != nil {
		t.Fatal(err)
	}
	pe.wait()
	if n := e.count(t, "event_published_at IS NOT NULL"); n != 2 {
		t.Fatalf("%d orders stamped, want the slow batch's 2", n)
	}
	onceEach(t, e, 4)
}

// slowProcessor moves the test's clock while it persists.
type slowProcessor struct {
	p       *processor
	advance func()
}

func (s slowProcessor) ProcessFrom(ctx context.Context, msgs []kafka.Message, src *store.GrabSource) ([]store.OutboxEvent, error) {
	s.advance()
	return s.p.ProcessFrom(ctx, msgs, src)
}

// failingLock cannot be taken: MySQL refuses.
type failingLock struct{ attempts int }

func (f *failingLock) Acquire(context.Context, int) (func(context.Context) error, func(), bool, error) {
	f.attempts++
	return nil, nil, false, fmt.Errorf("injected: mysql unavailable")
}

// Failing attempts to take the partition back off, timed from each attempt's end.
func TestFailingTakeBacksOff(t *testing.T) {
	lock := &failingLock{}
	b := &batchEvents{locks: lock, retryEvery: 10 * time.Millisecond, log: slog.New(slog.DiscardHandler), now: time.Now}
	pe := b.open(0)
	for i := 0; i < 3; i++ {
		pe.lastTry = time.Time{}
		if src := pe.begin(context.Background()); src != nil {
			t.Fatalf("source %+v without the lock", src)
		}
	}
	if lock.attempts != 3 || pe.failures != 3 {
		t.Fatalf("%d attempts, %d failures; want 3 and 3", lock.attempts, pe.failures)
	}
	// Three failures: the next attempt waits 10 ms × 2³ = 80 ms from the last one's end.
	pe.lastTry = time.Now().Add(-50 * time.Millisecond)
	pe.begin(context.Background())
	if lock.attempts != 3 {
		t.Fatalf("attempted again 50 ms after three failures, want a wait of 80 ms")
	}
	pe.lastTry = time.Now().Add(-100 * time.Millisecond)
	pe.begin(context.Background())
	if lock.attempts != 4 {
		t.Fatalf("%d attempts 100 ms after three failures, want the fourth", lock.attempts)
	}
}

// finish publishes a batch's events and records its progress, and returns when that is done
// (start, then wait): a batch's whole finish, for tests that drive one step at a time.
func (pe *partitionEvents) finish(ctx context.Context, src *store.GrabSource, evs []store.OutboxEvent, began time.Time) {
	pe.start(ctx, src, evs, began)
	pe.wait()
}
