package grab

import (
	"context"
	"sync/atomic"

	"github.com/segmentio/kafka-go"
)

// writerPool hands each grab event to the next of several writers in turn. kafka-go sends
// one produce request per partition at a time per writer, so a hot prize (one partition)
// waits behind its own partition's request in flight; n writers put up to n of its
// requests in flight (docs/performance.md, the Kafka acknowledgement's tail). Grab events
// need no order among themselves: each is deduplicated by request id and persisted on its
// own, and every write still returns only once acknowledged (acks=all).
type writerPool struct {
	writers []Publisher
	next    atomic.Uint64
}

// NewWriterPool uses writers in turn, one write each.
func NewWriterPool(writers ...Publisher) *writerPool { return &writerPool{writers: writers} }

func (p *writerPool) WriteMessages(ctx context.Context, msgs ...kafka.Message) error {
	w := p.writers[(p.next.Add(1)-1)%uint64(len(p.writers))]
	return w.WriteMessages(ctx, msgs...)
}
