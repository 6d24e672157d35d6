package main

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// recordingOutbox is an outbox with one batch pending that records every write.
type recordingOutbox struct {
	events []store.OutboxEvent
	writes []string
}

func (o *recordingOutbox) Pending(context.Context, int) ([]store.OutboxEvent, error) {
	ev := o.events
	o.events = nil
	return ev, nil
}
func (o *recordingOutbox) MarkPublished(context.Context, []int64, time.Time) error {
	o.writes = append(o.writes, "mark")
	return nil
}
func (o *recordingOutbox) MarkFollowPublished(context.Context, []int64, time.Time) error {
	o.writes = append(o.writes, "mark_follow")
	return nil
}
func (o *recordingOutbox) MarkFound(context.Context, []string, time.Time) (int64, error) {
	o.writes = append(o.writes, "mark_found")
	return 0, nil
}
func (o *recordingOutbox) Checkpoints(context.Context, string) (map[int]int64, error) {
	return map[int]int64{}, nil
}
func (o *recordingOutbox) SetCheckpoints(context.Context, string, map[int]int64) error {
	o.writes = append(o.writes, "checkpoint")
	return nil
}

// emptyTopic is an order topic with nothing on it (no recovery scan to make).
type emptyTopic struct{}

func (emptyTopic) Offsets(context.Context, string) (map[int]event.PartitionOffsets, error) {
	return map[int]event.PartitionOffsets{0: {}}, nil
}

// losingWriter produces, and the relay loses its lock while the produce is in flight.
type losingWriter struct {
	out  *recordingOutbox
	lost *bool
}

func (w losingWriter) WriteMessages(context.Context, ...kafka.Message) error {
	w.out.writes = append(w.out.writes, "produce")
	*w.lost = true
	return nil
}

// The relay's lock is checked before every write, not only before every batch: a lock lost
// between the produce and the marks leaves the marks (and any checkpoint) to the next
// holder, whose recovery scan finds the events on the topic.
func TestRelayStopsWritingOnceItsLockIsLost(t *testing.T) {
	out := &recordingOutbox{events: []store.OutboxEvent{
		{ID: 1, EventID: "e1", Key: "k", Payload: []byte("{}"), Schema: "order.v1"},
		{ID: 2, EventID: "e2", Key: "k", Payload: []byte("{}"), Schema: "order.v2", Follow: true},
	}}
	lost := false
	held := func(context.Context) error {
		if lost {
			return errors.New("lock no longer held")
		}
		return nil
	}
	r := &outboxRelay{outbox: out, writer: losingWriter{out: out, lost: &lost}, offsets: emptyTopic{}, topic: "t",
		batch: 100, idle: time.Millisecond, wake: make(chan struct{}, 1), metrics: newMetrics(prometheus.NewRegistry()),
		log: slog.New(slog.DiscardHandler), now: time.Now}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.relay(ctx, held); err == nil {
		t.Fatal("relay went on after losing its lock")
	}
	want := []string{"checkpoint", "produce"} // the start-up checkpoint, then the batch's produce
	if len(out.writes) != len(want) || out.writes[0] != want[0] || out.writes[1] != want[1] {
		t.Fatalf("writes %q, want %q: nothing after the lock was lost", out.writes, want)
	}
}

// expiredTopic is an order topic whose partition 0 retention emptied: its first offset is its
// end, far past the checkpoint a relay stopped longer than the retention left behind.
type expiredTopic struct{}

func (expiredTopic) Offsets(context.Context, string) (map[int]event.PartitionOffsets, error) {
	return map[int]event.PartitionOffsets{0: {First: 40, End: 40}}, nil
}

// checkpointedOutbox is recordingOutbox with a checkpoint retention has passed.
type checkpointedOutbox struct {
	recordingOutbox
	set map[int]int64
}

func (o *checkpointedOutbox) Checkpoints(context.Context, string) (map[int]int64, error) {
	return map[int]int64{0: 7}, nil
}
func (o *checkpointedOutbox) SetCheckpoints(_ context.Context, _ string, next map[int]int64) error {
	o.set = next
	return nil
}

// A relay stopped for longer than the order topic's retention finds its checkpoint below the
// partition's first offset. Its recovery scan starts at what is retained: with nothing
// retained it has nothing to read (it used to wait for a message that never came, a minute
// per attempt, for ever, and published nothing more), and it moves its checkpoint to the end.
// Orders whose events were removed unread are published again if unstamped: at least once.
func TestRecoveryScanStartsAtWhatRetentionKept(t *testing.T) {
	out := &checkpointedOutbox{}
	r := &outboxRelay{outbox: out, offsets: expiredTopic{}, brokers: []string{"127.0.0.1:1"}, topic: "t",
		batch: 100, idle: time.Millisecond, wake: make(chan struct{}, 1), metrics: newMetrics(prometheus.NewRegistry()),
		log: slog.New(slog.DiscardHandler), now: time.Now}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.recover(ctx, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("recovery scan over an expired partition: %v", err)
	}
	if out.set[0] != 40 {
		t.Fatalf("checkpoint %v after the scan, want partition 0 at its end 40", out.set)
	}
}
