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
