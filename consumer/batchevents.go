package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"
	"gorm.io/gorm"

	"github.com/seckill-pipeline/seckill/pkg/store"
	"github.com/seckill-pipeline/seckill/pkg/tracing"
)

// progressStore is the grab partitions' event progress: *store.EventProgress.
type progressStore interface {
	Claim(ctx context.Context, partition int) (store.Progress, error)
	Advance(ctx context.Context, partition int, epoch, next int64, scanFrom map[int]int64) (bool, error)
	Unrecorded(ctx context.Context, partition int, from int64) ([]store.SeqEvent, error)
}

// partitionLock is a grab partition's named lock: Acquire takes it if free.
type partitionLock interface {
	Acquire(ctx context.Context, partition int) (held func(context.Context) error, release func(), ok bool, err error)
}

// batchEvents publishes the creation events of the orders a grab partition's worker
// persisted from memory, right after the commit, and records progress once per batch
// (docs/design.md, "How order events reach the topic"). A worker publishes only while it
// holds its partition's named lock and the claim (epoch) it took with it; a worker that
// holds neither persists its batches on the stamp path, for the relay.
type batchEvents struct {
	progress progressStore
	outbox   interface { // stamps the orders a recovery published or found
		MarkPublished(ctx context.Context, ids []int64, at time.Time) error
	}
	locks   partitionLock
	writer  producer
	offsets topicOffsets
	brokers []string
	dialer  *kafka.Dialer
	topic   string // the order topic
	metrics *metrics
	log     *slog.Logger
	now     func() time.Time
	// rescanEvery is how often the stored scan start moves up to the topic's end, so a
	// recovery reads little.
	rescanEvery time.Duration
	// retryEvery spaces attempts to take the lock or to recover, which cost a round trip or a
	// topic scan, while they fail: meanwhile batches go to the relay.
	retryEvery time.Duration
	tr         *tracing.Tracing // the order events' produce spans; nil: off
}

// partitionEvents is one worker's state for its grab partition.
type partitionEvents struct {
	*batchEvents
	partition int
	held      func(context.Context) error
	release   func()
	epoch     int64
	seq       int64         // the progress row's next_seq as this worker last read or wrote it
	next      int64         // the next batch's sequence number: seq, or past a batch finishing
	scanFrom  map[int]int64 // the progress row's scan_from
	dirty     bool          // a batch past seq may be unpublished: recover before the next
	lastTry   time.Time     // when the last attempt to take or recover ended
	failures  int           // attempts failed in a row: the wait before the next doubles
	lastScan  time.Time
	// inflight is the previous batch's finish (publish, progress write), running beside this
	// batch's transaction; nil when none. Only wait applies its result to the fields above,
	// so the worker's goroutine is the only one that writes them.
	inflight chan finishResult
}

const (
	// stampAfter: a batch published later than this after its first commit is stamped too,
	// so the payment clock of its orders (their commit time otherwise) starts when downstream
	// could first see them; only a batch slowed by retries or an outage pays the write.
	stampAfter = 500 * time.Millisecond
	// abandonRecovery bounds the recovery a failed batch runs before its worker stops.
	abandonRecovery = 30 * time.Second
	// maxRetryDoublings caps the backoff of failing attempts at retryEvery × 32.
	maxRetryDoublings = 5
)

// open returns the state of a worker that just got partition. Nothing is taken until the
// first batch.
func (b *batchEvents) open(partition int) *partitionEvents {
	return &partitionEvents{batchEvents: b, partition: partition}
}

// finishResult is what one batch's finish did, for wait to apply.
type finishResult struct {
	next     int64         // the progress written, on success
	scanFrom map[int]int64 // the scan start written with it, or nil
	lost     bool          // the lock or the claim is gone: close, and take again
	events   int
	err      error
}

// close waits for a finish in flight and releases the partition's lock.
func (pe *partitionEvents) close() {
	pe.wait()
	if pe.release != nil {
		pe.release()
		pe.held, pe.release = nil, nil
	}
}

// settled reports whether every batch this worker persisted is recorded under its claim. A
// finish in flight is not settled yet: it may fail, and an idle partition must then recover
// without waiting for the next grab (idle).
func (pe *partitionEvents) settled() bool { return pe.inflight == nil && pe.held != nil && !pe.dirty }

// idle is the worker's turn while no grab comes: the finish in flight ends, and a partition
// not settled is taken or recovered.
func (pe *partitionEvents) idle(ctx context.Context) {
	pe.wait()
	pe.begin(ctx)
}

// begin returns the source the next batch is persisted under, or nil (stamp path) while the
// lock is held elsewhere (a previous owner finishing its batch), MySQL or the order topic
// is unreachable, or a recovery failed.
func (pe *partitionEvents) begin(ctx context.Context) *store.GrabSource {
	// With a finish in flight the lock was held and the partition clean when it started, and
	// only wait changes that: this batch is numbered past the finishing one.
	if pe.inflight == nil && (pe.held == nil || pe.dirty) {
		if time.Since(pe.lastTry) < pe.retryEvery<<min(pe.failures, maxRetryDoublings) {
			return nil
		}
		err := pe.take(ctx)
		// Timed from the attempt's end, and doubled while attempts fail: a recovery that
		// fails slowly (a topic scan, a produce timing out) must not run again before the
		// very next batch while the order topic is degraded.
		pe.lastTry = time.Now()
		if err != nil {
			pe.failures++
			pe.log.Warn("order events of this grab partition go to the relay for now", "partition", pe.partition,
				"failures", pe.failures, "error", err.Error())
			return nil
		}
		pe.failures = 0
		if pe.held == nil {
			return nil
		}
	}
	return &store.GrabSource{Partition: pe.partition, Epoch: pe.epoch, Seq: pe.next}
}

// take acquires the lock and claims the partition if not held yet, then recovers.
func (pe *partitionEvents) take(ctx context.Context) error {
	if pe.held == nil {
		held, release, ok, err := pe.locks.Acquire(ctx, pe.partition)
		if err != nil || !ok {
			return err
		}
		pe.held, pe.release = held, release
		// The claim waits for a persistence transaction of the previous holder still in
		// flight; the lock, for that holder's publish.
		p, err := pe.progress.Claim(ctx, pe.partition)
		if err != nil {
			pe.close()
			return err
		}
		pe.epoch, pe.seq, pe.scanFrom, pe.dirty = p.Epoch, p.NextSeq, p.ScanFrom, true
	}
	if err := pe.recover(ctx); err != nil {
		return err
	}
	pe.dirty, pe.next = false, pe.seq
	return nil
}

// recover publishes the events of the partition's orders past its progress that are not on
// the topic (read from scan_from to the end), stamps them all, and moves progress past them.
func (pe *partitionEvents) recover(ctx context.Context) error {
	evs, err := pe.progress.Unrecorded(ctx, pe.partition, pe.seq)
	if err != nil {
		return err
	}
	if len(evs) == 0 {
		return nil
	}
	// The end offsets are read before anything is published: every event published from
	// here on lies at or above them, so they are the next scan start.
	bounds, err := topicBounds(ctx, pe.offsets, pe.topic)
	if err != nil {
		return err
	}
	onTopic := map[string]bool{}
	ends := make(map[int]int64, len(bounds))
	for p, b := range bounds {
		ends[p] = b.End
		start := max(pe.scanFrom[p], b.First)
		if start >= b.End {
			continue
		}
		ids, err := readEventIDs(ctx, pe.brokers, pe.dialer, pe.topic, p, start, b.End)
		if err != nil {
			return err
		}
		for _, id := range ids {
			onTopic[id] = true
		}
	}
	missing, found := splitFound(evs, onTopic)
	if len(missing) > 0 {
		if err := pe.publish(ctx, pe.held, missing); err != nil {
			if errors.Is(err, errLockLost) {
				pe.close() // take it again, and recover, before publishing more
			}
			return err
		}
	}
	ids := make([]int64, len(evs))
	for i, e := range evs {
		ids[i] = e.ID
	}
	// Stamped, their payment clocks start now, not when they were stored.
	mctx := context.WithoutCancel(ctx)
	if err := pe.outbox.MarkPublished(mctx, ids, pe.now()); err != nil {
		return err
	}
	next := evs[len(evs)-1].Seq + 1
	if err := pe.advance(mctx, next, ends); err != nil {
		return err
	}
	pe.metrics.recovered.Add(float64(found))
	pe.log.Info("order events of a grab partition recovered", "partition", pe.partition,
		"published", len(missing), "already_on_topic", found)
	return nil
}

// splitFound returns the events not on the topic and how many are.
func splitFound(evs []store.SeqEvent, onTopic map[string]bool) ([]store.OutboxEvent, int) {
	var missing []store.OutboxEvent
	found := 0
	for _, e := range evs {
		if onTopic[e.EventID] {
			found++
			continue
		}
		missing = append(missing, e.OutboxEvent)
	}
	return missing, found
}

// run persists one batch of the partition under its claim and publishes what it committed.
// The publish runs beside the next batch's transaction (start); the previous batch's finish
// ends before this batch's starts, so batches are recorded in order and one whose events
// are not all on the topic is never passed (wait).
func (pe *partitionEvents) run(ctx context.Context, sp sourcedProcessor, msgs []kafka.Message) error {
	src := pe.begin(ctx)
	began := pe.now()
	evs, err := sp.ProcessFrom(ctx, msgs, src)
	pe.wait()
	if err != nil {
		pe.abandon(ctx, src)
		return err
	}
	pe.start(ctx, src, evs, began)
	return nil
}

// abandon follows a batch that failed part way: the groups before the failing one may be
// committed under the claim with their events unpublished, and the worker stops after this
// batch (it is redelivered to the partition's next owner). They are recovered now, within
// abandonRecovery, rather than left to that owner, which may be a generation away.
func (pe *partitionEvents) abandon(ctx context.Context, src *store.GrabSource) {
	if src == nil {
		return
	}
	pe.dirty = true
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abandonRecovery)
	defer cancel()
	if err := pe.take(rctx); err != nil {
		pe.log.Warn("order events of a failed batch not recovered; the partition's next owner recovers them",
			"partition", pe.partition, "error", err.Error())
	}
}

// start begins the finish of a committed batch (the events its transactions returned; began
// is when the batch began, before any of its commits): publish them, then record the batch's
// progress, on a goroutine of its own, while the worker fetches and persists the next batch.
// Nothing is published from memory when an earlier finish failed or lost the lock: recording
// this batch would record the earlier one's missing events as published too, so both are left
// to the recovery, which reads every order past the recorded progress.
func (pe *partitionEvents) start(ctx context.Context, src *store.GrabSource, evs []store.OutboxEvent, began time.Time) {
	if src == nil || len(evs) == 0 {
		return // nothing published from memory, nothing to record
	}
	pe.next = src.Seq + 1
	if pe.held == nil || pe.dirty {
		pe.dirty = true
		return
	}
	rescan := time.Since(pe.lastScan) >= pe.rescanEvery
	done := make(chan finishResult, 1)
	pe.inflight = done
	held := pe.held
	// The batch is committed: its events go out and are recorded even if shutdown began.
	fctx := context.WithoutCancel(ctx)
	go func() { done <- pe.finishBatch(fctx, held, src, evs, began, rescan) }()
}

// wait applies the result of the finish in flight, if any, once it ended. A failure leaves
// the partition dirty: the next begin recovers.
func (pe *partitionEvents) wait() {
	if pe.inflight == nil {
		return
	}
	r := <-pe.inflight
	pe.inflight = nil
	if r.lost {
		pe.close() // lost: take it again, and recover, before publishing more
	}
	if r.err != nil {
		pe.dirty = true
		pe.log.Warn("order events of a batch not recorded; recovering before the next batch", "partition", pe.partition,
			"events", r.events, "error", r.err.Error())
		return
	}
	pe.seq = r.next
	if r.scanFrom != nil {
		pe.scanFrom, pe.lastScan = r.scanFrom, time.Now()
	}
}

// finishBatch is one batch's finish, on its own goroutine: it reads only what does not change
// while it runs (the configuration, the partition, the batch's source) and reports the rest.
func (pe *partitionEvents) finishBatch(ctx context.Context, held func(context.Context) error, src *store.GrabSource,
	evs []store.OutboxEvent, began time.Time, rescan bool) finishResult {
	t0 := time.Now()
	defer func() { pe.metrics.publishTook.Observe(time.Since(t0).Seconds()) }()
	r := finishResult{events: len(evs)}
	if rescan {
		// Read before this batch is published: later batches' events lie above.
		if ends, err := topicBounds(ctx, pe.offsets, pe.topic); err == nil {
			r.scanFrom = make(map[int]int64, len(ends))
			for p, b := range ends {
				r.scanFrom[p] = b.End
			}
		}
	}
	if r.err = pe.publish(ctx, held, evs); r.err != nil {
		r.lost = errors.Is(r.err, errLockLost)
		return r
	}
	if at := pe.now(); at.Sub(began) > stampAfter {
		ids := make([]int64, len(evs))
		for i, e := range evs {
			ids[i] = e.ID
		}
		if r.err = pe.outbox.MarkPublished(ctx, ids, at); r.err != nil {
			return r
		}
	}
	ok, err := pe.progress.Advance(ctx, pe.partition, src.Epoch, src.Seq+1, r.scanFrom)
	switch {
	case err != nil:
		r.err = err
	case !ok:
		r.lost, r.err = true, fmt.Errorf("grab partition %d: claim %d taken over", pe.partition, src.Epoch)
	default:
		r.next = src.Seq + 1
	}
	return r
}

// errLockLost: the partition's named lock is no longer this worker's.
var errLockLost = errors.New("the grab partition's lock is lost")

// publish writes evs to the order topic after checking the lock (held) is still held.
func (pe *partitionEvents) publish(ctx context.Context, held func(context.Context) error, evs []store.OutboxEvent) error {
	if err := held(ctx); err != nil {
		return fmt.Errorf("%w: %w", errLockLost, err)
	}
	msgs := make([]kafka.Message, len(evs))
	for i, e := range evs {
		msgs[i] = orderMessage(e)
	}
	spans := startOrderEvents(ctx, pe.tr, pe.topic, evs, msgs)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 45*time.Second)
	defer cancel()
	err := pe.writer.WriteMessages(wctx, msgs...)
	spans.End(err)
	if err != nil {
		return fmt.Errorf("publish %d order events: %w", len(msgs), err)
	}
	pe.metrics.published.Add(float64(len(msgs)))
	return nil
}

// advance records progress up to next (scan start too, when not nil) under the claim.
func (pe *partitionEvents) advance(ctx context.Context, next int64, scanFrom map[int]int64) error {
	ok, err := pe.progress.Advance(ctx, pe.partition, pe.epoch, next, scanFrom)
	if err != nil {
		return err
	}
	if !ok {
		pe.close()
		return fmt.Errorf("grab partition %d: claim %d taken over", pe.partition, pe.epoch)
	}
	pe.seq = next
	if scanFrom != nil {
		pe.scanFrom, pe.lastScan = scanFrom, time.Now()
	}
	return nil
}

// mysqlPartitionLock is a grab partition's MySQL named lock (store.ProgressLockName): like
// the relay's, it lives in the server that holds the orders and the progress it guards.
type mysqlPartitionLock struct {
	db   *gorm.DB
	name func(partition int) string
}

func (m mysqlPartitionLock) Acquire(ctx context.Context, partition int) (func(context.Context) error, func(), bool, error) {
	return mysqlRelayLock{db: m.db, name: m.name(partition)}.Acquire(ctx)
}
