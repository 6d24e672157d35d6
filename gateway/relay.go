package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"
)

type publisher interface {
	WriteMessages(ctx context.Context, msgs ...kafka.Message) error
}

// relay republishes grab events whose first produce failed or timed out. The reservation
// in Redis is the durable intent, so the relay is only the fast path: whatever it cannot
// deliver (queue full, process killed) the reconciler finds as a stale reservation and
// re-publishes. Publishing twice is safe: the consumer dedupes by request id.
type relay struct {
	w       publisher
	queue   chan kafka.Message
	metrics *metrics
	log     *slog.Logger
}

func newRelay(w publisher, size int, m *metrics, log *slog.Logger) *relay {
	return &relay{w: w, queue: make(chan kafka.Message, size), metrics: m, log: log}
}

// Enqueue hands a message to the relay without blocking; false when the queue is full.
func (r *relay) Enqueue(m kafka.Message) bool {
	select {
	case r.queue <- m:
		r.metrics.relayPending.Inc()
		return true
	default:
		r.metrics.relayDropped.Inc()
		return false
	}
}

// Run publishes queued messages with bounded exponential backoff until ctx ends; then it
// makes one last attempt per message within drain.
func (r *relay) Run(ctx context.Context, drain time.Duration) error {
	backoff := 50 * time.Millisecond
	for {
		var m kafka.Message
		select {
		case m = <-r.queue:
		case <-ctx.Done():
			r.drain(drain)
			return nil
		}
		for {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := r.w.WriteMessages(wctx, m)
			cancel()
			if err == nil {
				r.metrics.relayPending.Dec()
				r.metrics.relayed.Inc()
				backoff = 50 * time.Millisecond
				break
			}
			r.log.Warn("relay publish failed; retrying", "key", string(m.Key), "error", err.Error(), "backoff", backoff.String())
			select {
			case <-ctx.Done():
				r.queue <- m // keep it for the drain; the slot it came from is free
				r.drain(drain)
				return nil
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
		}
	}
}

func (r *relay) drain(budget time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	for {
		select {
		case m := <-r.queue:
			r.metrics.relayPending.Dec()
			if err := r.w.WriteMessages(ctx, m); err != nil {
				r.metrics.relayDropped.Inc()
				r.log.Warn("relay gave up at shutdown; the reconciler will re-publish the reservation",
					"key", string(m.Key), "error", err.Error())
			} else {
				r.metrics.relayed.Inc()
			}
		default:
			return
		}
	}
}
