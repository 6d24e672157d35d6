package grab

import (
	"context"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"
)

// Publisher writes grab events to Kafka and returns once they are acknowledged (kafka.Writer,
// the writer pool).
type Publisher interface {
	WriteMessages(ctx context.Context, msgs ...kafka.Message) error
}

// relay republishes grab events whose first produce failed or timed out. The reservation
// in Redis is the durable intent, so the relay is only the fast path: whatever it cannot
// deliver (queue full, process killed) the reconciler finds as a stale reservation and
// re-publishes. Publishing twice is safe: the consumer dedupes by request id.
type relay struct {
	w Publisher
	// queue holds pointers: a buffer of SECKILL_RELAY_QUEUE messages by value (about 150
	// bytes each) would be 14 MB of live heap from the start, which the soft memory limit
	// then pays for in collections on every grab, while the relay is empty but in an outage.
	queue   chan *kafka.Message
	held    *unpublished // released once an event is published or given up
	metrics *metrics
	log     *slog.Logger
}

func newRelay(w Publisher, size int, held *unpublished, m *metrics, log *slog.Logger) *relay {
	return &relay{w: w, queue: make(chan *kafka.Message, size), held: held, metrics: m, log: log}
}

// Enqueue hands a message to the relay without blocking; false when the queue is full.
func (r *relay) Enqueue(m kafka.Message) bool {
	select {
	case r.queue <- &m:
		r.metrics.relayPending.Inc()
		return true
	default:
		r.metrics.relayDropped.Inc()
		return false
	}
}

// Run publishes queued messages with bounded exponential backoff until ctx ends; then it
// drains the queue within drain and returns, whatever Kafka does (see drain).
func (r *relay) Run(ctx context.Context, drain time.Duration) error {
	backoff := 50 * time.Millisecond
	for {
		var m *kafka.Message
		select {
		case m = <-r.queue:
		case <-ctx.Done():
			r.drain(drain, nil)
			return nil
		}
		for {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := r.write(wctx, *m)
			cancel()
			if err == nil {
				r.held.release(m.Key)
				r.metrics.relayPending.Dec()
				r.metrics.relayed.Inc()
				backoff = 50 * time.Millisecond
				break
			}
			if ctx.Err() != nil {
				r.drain(drain, m)
				return nil
			}
			r.log.Warn("relay publish failed; retrying", "key", string(m.Key), "error", err.Error(), "backoff", backoff.String())
			select {
			case <-ctx.Done():
				r.drain(drain, m)
				return nil
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
		}
	}
}

// drain makes one attempt per queued message (first, when not nil, ahead of the queue)
// until budget is spent, then gives up on the rest, so a Kafka outage cannot hold the
// gateway's shutdown. Nothing given up is lost: the grab's reservation stays in Redis, and
// the reconciler re-publishes reservations still unsettled after SECKILL_STALE_AFTER. How
// many were left is logged (relay_unpublished) and counted in relayDropped.
func (r *relay) drain(budget time.Duration, first *kafka.Message) {
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	next := func() (kafka.Message, bool) {
		if first != nil {
			m := *first
			first = nil
			return m, true
		}
		select {
		case m := <-r.queue:
			return *m, true
		default:
			return kafka.Message{}, false
		}
	}
	published, left := 0, 0
	var lastErr error
	for m, ok := next(); ok; m, ok = next() {
		r.metrics.relayPending.Dec()
		written := false
		if ctx.Err() == nil {
			lastErr = r.write(ctx, m)
			written = lastErr == nil
		}
		// Released only after the write returned (published, or given up to the reconciler):
		// released before, the rebuild guard could read this gateway as holding nothing while
		// the event is still on its way to Kafka.
		r.held.release(m.Key)
		if written {
			published++
			r.metrics.relayed.Inc()
			continue
		}
		left++
		r.metrics.relayDropped.Inc()
	}
	if left == 0 {
		if published > 0 {
			r.log.Info("relay drained at shutdown", "relay_published", published)
		}
		return
	}
	if lastErr == nil {
		lastErr = ctx.Err()
	}
	r.log.Warn("relay stopped with events unpublished; their reservations stay in Redis and the reconciler re-publishes them once stale",
		"relay_unpublished", left, "relay_published", published, "drain_budget", budget.String(), "error", lastErr.Error())
}

// write publishes m but stops waiting when ctx ends even if the writer does not (a write
// stuck on a dead broker's connection must not hold the relay, and so shutdown, forever).
// An abandoned write may still land later: publishing twice is safe.
func (r *relay) write(ctx context.Context, m kafka.Message) error {
	done := make(chan error, 1)
	go func() { done <- r.w.WriteMessages(ctx, m) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		select {
		case err := <-done: // finished at the same moment: believe the writer
			return err
		default:
			return ctx.Err()
		}
	}
}
