// Package readahead reads a Kafka partition ahead of the worker that processes it, holding
// at most a budget of bytes of messages read and not yet processed.
//
// A worker needs its next batch in memory while the current one is in its transaction, or
// every batch waits for a fetch. kafka-go's reader reads ahead into a queue counted in
// messages, whatever their size: a queue deep enough for a thousand grab events of 300
// bytes holds a gigabyte of a topic's largest messages, and a burst of large poison on a
// few partitions took a consumer past its memory limit, again after every restart. Here
// kafka-go's own queue is kept a few messages deep, and the depth that keeps the worker
// busy is counted in bytes.
package readahead

import (
	"context"
	"errors"
	"time"

	"github.com/segmentio/kafka-go"
	"golang.org/x/sync/semaphore"
)

// Fetcher is what a Reader reads from: a *kafka.Reader on one partition.
type Fetcher interface {
	FetchMessage(ctx context.Context) (kafka.Message, error)
}

// ErrStopped is returned by Fetch once Run has returned.
var ErrStopped = errors.New("read-ahead stopped")

// Reader reads ahead of one worker. Run fetches; the worker takes messages with Fetch and
// gives their bytes back with Release once it is done with them (its batch committed or
// set aside), so the bytes held are those of messages read and not yet released.
type Reader struct {
	src    Fetcher
	budget int64
	held   *semaphore.Weighted
	out    chan kafka.Message
	done   chan struct{}
	pause  time.Duration // after a fetch error that is not the end of ctx
}

// New returns a Reader of src holding at most budget bytes (a message larger than the
// budget is read alone) and at most depth messages.
func New(src Fetcher, budget int64, depth int) (*Reader, error) {
	if src == nil || budget < 1 || depth < 1 {
		return nil, errors.New("read-ahead: a source, a positive byte budget and a positive depth are required")
	}
	return &Reader{src: src, budget: budget, held: semaphore.NewWeighted(budget),
		out: make(chan kafka.Message, depth), done: make(chan struct{}), pause: 100 * time.Millisecond}, nil
}

// Run fetches until ctx ends, waiting whenever the budget is spent. It returns when ctx
// ends, and Fetch then answers ErrStopped once the messages read are taken.
func (r *Reader) Run(ctx context.Context) {
	defer close(r.done)
	for {
		m, err := r.src.FetchMessage(ctx)
		if err != nil {
			// kafka-go retries what it can by itself; anything else is tried again after a
			// pause, as a worker fetching directly would.
			select {
			case <-ctx.Done():
				return
			case <-time.After(r.pause):
				continue
			}
		}
		if err := r.held.Acquire(ctx, r.weight(m)); err != nil {
			return
		}
		select {
		case r.out <- m:
		case <-ctx.Done():
			return
		}
	}
}

// Wait returns once Run has returned.
func (r *Reader) Wait() { <-r.done }

// Fetch returns the next message read ahead, waiting for one until ctx ends.
func (r *Reader) Fetch(ctx context.Context) (kafka.Message, error) {
	select {
	case m := <-r.out:
		return m, nil
	case <-ctx.Done():
		return kafka.Message{}, ctx.Err()
	case <-r.done:
		select {
		case m := <-r.out:
			return m, nil
		default:
			return kafka.Message{}, ErrStopped
		}
	}
}

// Release gives back the bytes of msgs, which Fetch returned and the worker is done with.
func (r *Reader) Release(msgs []kafka.Message) {
	var n int64
	for _, m := range msgs {
		n += r.weight(m)
	}
	if n > 0 {
		r.held.Release(n)
	}
}

// weight is what a message counts against the budget: its key, value and headers, at
// least 1 (an empty message still takes a place) and at most the budget (so one message
// larger than the budget is read, alone, rather than never).
func (r *Reader) weight(m kafka.Message) int64 {
	n := int64(len(m.Key) + len(m.Value))
	for _, h := range m.Headers {
		n += int64(len(h.Key) + len(h.Value))
	}
	return min(max(n, 1), r.budget)
}
