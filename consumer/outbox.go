package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/trace"
	"gorm.io/gorm"

	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/store"
	"github.com/seckill-pipeline/seckill/pkg/tracing"
)

// outboxStore is what the relay needs from the outbox tables.
type outboxStore interface {
	Pending(ctx context.Context, limit int) ([]store.OutboxEvent, error)
	MarkPublished(ctx context.Context, ids []int64, at time.Time) error
	MarkFollowPublished(ctx context.Context, ids []int64, at time.Time) error
	MarkFound(ctx context.Context, eventIDs []string, at time.Time) (int64, error)
	Checkpoints(ctx context.Context, topic string) (map[int]int64, error)
	SetCheckpoints(ctx context.Context, topic string, next map[int]int64) error
}

// topicOffsets lists a topic's partition offsets: pkg/event's Admin.
type topicOffsets interface {
	Offsets(ctx context.Context, topic string) (map[int]event.PartitionOffsets, error)
}

// relayLock makes one relay act at a time.
type relayLock interface {
	// Acquire takes the lock if free and returns a check that fails once it was lost, and a
	// release; ok is false while another relay holds it.
	Acquire(ctx context.Context) (held func(context.Context) error, release func(), ok bool, err error)
}

// mysqlRelayLock is a MySQL named lock: the relay's exclusivity lives in the same server as
// the outbox it drains, so losing Redis data (FLUSHALL) cannot let two relays publish at once.
type mysqlRelayLock struct {
	db   *gorm.DB
	name string
}

func (m mysqlRelayLock) Acquire(ctx context.Context) (func(context.Context) error, func(), bool, error) {
	l, ok, err := store.TryLock(ctx, m.db, m.name)
	if err != nil || !ok {
		return nil, nil, ok, err
	}
	return l.Held, func() { l.Release(context.Background()) }, true, nil
}

// outboxRelay publishes order events from the outbox to the order topic: one event per
// order, at least once, and in practice exactly once. One relay acts at a time (a MySQL
// named lock, checked before every write: the produce, each mark, each checkpoint; a relay
// that lost it between two writes of a batch stops before the second, and the next holder's
// recovery scan marks what reached the topic. A checkpoint written after the lock was lost
// could cover events another holder published and has not marked yet). Before publishing after a start or an ambiguous produce error (kafka-go may
// report an error for a batch that was written) it reads the topic from its checkpoint to
// the end and marks the events already there instead of publishing them again.
type outboxRelay struct {
	outbox   outboxStore
	writer   producer
	offsets  topicOffsets
	brokers  []string
	dialer   *kafka.Dialer // SASL and TLS (event.Security); nil: plaintext
	topic    string
	lock     relayLock
	batch    int
	idle     time.Duration // poll interval when there is nothing to publish
	wake     chan struct{}
	metrics  *metrics
	log      *slog.Logger
	now      func() time.Time
	lastMark time.Time
	tr       *tracing.Tracing // nil: off
}

const eventIDHeader = "event-id"

// Kick wakes the relay after new outbox rows were committed (never blocks).
func (r *outboxRelay) Kick() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run relays until ctx ends. When another consumer instance holds the lock it waits.
func (r *outboxRelay) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		held, release, acquired, err := r.lock.Acquire(ctx)
		if acquired {
			err = r.relay(ctx, held)
			release()
		}
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			r.log.Warn("order event relay stopped; restarting", "error", err.Error())
		}
		wait := time.Second
		if acquired {
			wait = 100 * time.Millisecond
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	return nil
}

// relay runs while the lock is held; it returns on an error (or the lock lost) so the next
// round starts with a recovery scan.
func (r *outboxRelay) relay(ctx context.Context, held func(context.Context) error) error {
	if err := r.recover(ctx, held); err != nil {
		return err
	}
	for {
		n, err := r.publishBatch(ctx, held)
		if err != nil {
			return err
		}
		if time.Since(r.lastMark) > 5*time.Second {
			if err := r.checkpoint(ctx, held); err != nil {
				return err
			}
		}
		if n == r.batch {
			continue // more is waiting
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.wake:
		case <-time.After(r.idle):
		}
	}
}

// publishBatch publishes the oldest pending events and marks them, checking the lock
// before each of the three writes.
func (r *outboxRelay) publishBatch(ctx context.Context, held func(context.Context) error) (int, error) {
	events, err := r.outbox.Pending(ctx, r.batch)
	if err != nil || len(events) == 0 {
		return 0, err
	}
	msgs := make([]kafka.Message, len(events))
	var ids, follow []int64
	for i, e := range events {
		msgs[i] = orderMessage(e)
		if e.Follow {
			follow = append(follow, e.ID)
		} else {
			ids = append(ids, e.ID)
		}
	}
	if err := held(ctx); err != nil {
		return 0, err
	}
	spans := startOrderEvents(ctx, r.tr, r.topic, events, msgs)
	wctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	err = r.writer.WriteMessages(wctx, msgs...)
	cancel()
	spans.End(err)
	if err != nil {
		// Some of the batch may be on the topic: the recovery scan sorts it out.
		return 0, fmt.Errorf("publish %d order events: %w", len(msgs), err)
	}
	// The marks run even when ctx ended meanwhile (the events are on the topic), but not
	// after the lock was lost: then the next holder's recovery scan marks them.
	mctx := context.WithoutCancel(ctx)
	if len(ids) > 0 {
		if err := held(mctx); err != nil {
			return 0, err
		}
		if err := r.outbox.MarkPublished(mctx, ids, r.now()); err != nil {
			return 0, err
		}
	}
	if len(follow) > 0 {
		if err := held(mctx); err != nil {
			return 0, err
		}
		if err := r.outbox.MarkFollowPublished(mctx, follow, r.now()); err != nil {
			return 0, err
		}
	}
	r.metrics.published.Add(float64(len(events)))
	return len(events), nil
}

// checkpoint records the topic's end offsets. Every relay event below them was published by
// this relay (it holds the lock) and marked, since marking follows every successful produce in
// this same goroutine; checked right before the write, since a relay that lost it may be
// reading end offsets that cover another holder's unmarked events. (The consumers' events
// published from memory lie below them too; their recovery reads from their own
// order_event_progress.scan_from, never from here.)
func (r *outboxRelay) checkpoint(ctx context.Context, held func(context.Context) error) error {
	ends, err := r.endOffsets(ctx)
	if err != nil {
		return err
	}
	if err := held(ctx); err != nil {
		return err
	}
	if err := r.outbox.SetCheckpoints(ctx, r.topic, ends); err != nil {
		return err
	}
	r.lastMark = time.Now()
	return nil
}

// recover reads every partition from its checkpoint to its end and marks the events found
// there as published, then moves the checkpoints to the end.
func (r *outboxRelay) recover(ctx context.Context, held func(context.Context) error) error {
	from, err := r.outbox.Checkpoints(ctx, r.topic)
	if err != nil {
		return err
	}
	bounds, err := r.bounds(ctx)
	if err != nil {
		return err
	}
	var found []string
	for p, b := range bounds {
		// Retention may have removed what lies below the checkpoint (the relay was stopped
		// longer than the topic keeps events): scan what is retained. An order whose event
		// was removed unread stays unstamped and is published again, at least once.
		start := max(from[p], b.First)
		if start >= b.End {
			continue
		}
		end := b.End
		ids, err := r.readEventIDs(ctx, p, start, end)
		if err != nil {
			return err
		}
		found = append(found, ids...)
	}
	for i := 0; i < len(found); i += 1000 {
		if err := held(ctx); err != nil {
			return err
		}
		n, err := r.outbox.MarkFound(ctx, found[i:min(i+1000, len(found))], r.now())
		if err != nil {
			return err
		}
		r.metrics.recovered.Add(float64(n))
		if n > 0 {
			r.log.Info("order events already on the topic marked, not re-published", "count", n)
		}
	}
	return r.checkpoint(ctx, held)
}

// endOffsets returns every partition's end offset.
func (r *outboxRelay) endOffsets(ctx context.Context) (map[int]int64, error) {
	offs, err := r.bounds(ctx)
	if err != nil {
		return nil, err
	}
	ends := make(map[int]int64, len(offs))
	for p, o := range offs {
		ends[p] = o.End
	}
	return ends, nil
}

// bounds returns every partition's first and end offsets.
func (r *outboxRelay) bounds(ctx context.Context) (map[int]event.PartitionOffsets, error) {
	return topicBounds(ctx, r.offsets, r.topic)
}

// readEventIDs returns the event ids of partition p's messages in [from, end).
func (r *outboxRelay) readEventIDs(ctx context.Context, p int, from, end int64) ([]string, error) {
	return readEventIDs(ctx, r.brokers, r.dialer, r.topic, p, from, end)
}

// topicBounds returns every partition's first and end offsets, retrying briefly while
// leadership settles (right after a topic is created or a broker restarted).
func topicBounds(ctx context.Context, offsets topicOffsets, topic string) (map[int]event.PartitionOffsets, error) {
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		var offs map[int]event.PartitionOffsets
		if offs, err = offsets.Offsets(ctx, topic); err == nil {
			return offs, nil
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("order topic end offsets: %w", err)
}

// readEventIDs returns the event ids of topic partition p's messages in [from, end).
func readEventIDs(ctx context.Context, brokers []string, dialer *kafka.Dialer, topic string, p int, from, end int64) ([]string, error) {
	rd := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Dialer: dialer, Topic: topic, Partition: p,
		MaxWait: 100 * time.Millisecond, MaxBytes: 8 << 20})
	defer rd.Close()
	if err := rd.SetOffset(from); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var ids []string
	for {
		m, err := rd.ReadMessage(rctx)
		if err != nil {
			return nil, fmt.Errorf("scan order topic partition %d at %d: %w", p, from, err)
		}
		for _, h := range m.Headers {
			if h.Key == eventIDHeader {
				ids = append(ids, string(h.Value))
			}
		}
		if m.Offset >= end-1 {
			return ids, nil
		}
		if m.Offset < from {
			return nil, errors.New("order topic scan went backwards")
		}
	}
}

// spanOrderEvent is the produce span of an order event, in its purchase's trace.
const spanOrderEvent = "kafka.produce order-event"

// startOrderEvents starts the produce span of each event of evs whose order stored its
// purchase's trace context, as a child of that context, and writes the span's context into
// the event's message (msgs[i], traceparent and tracestate), so downstream order systems go
// on with the trace. Nothing when tracing is off.
func startOrderEvents(ctx context.Context, tr *tracing.Tracing, topic string, evs []store.OutboxEvent, msgs []kafka.Message) *tracing.Produce {
	return tr.StartProduce(ctx, spanOrderEvent, topic, msgs, func(i int) trace.SpanContext {
		return tracing.ParseTraceparent(evs[i].TraceParent)
	})
}

// orderMessage is the order topic's message of e.
func orderMessage(e store.OutboxEvent) kafka.Message {
	return kafka.Message{Key: []byte(e.Key), Value: e.Payload,
		Headers: []kafka.Header{{Key: eventIDHeader, Value: []byte(e.EventID)}, {Key: "schema", Value: []byte(e.Schema)}}}
}
