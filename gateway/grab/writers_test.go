package grab

import (
	"context"
	"errors"
	"testing"

	"github.com/segmentio/kafka-go"
)

type countingPublisher struct {
	writes int
	err    error
}

func (c *countingPublisher) WriteMessages(context.Context, ...kafka.Message) error {
	c.writes++
	return c.err
}

// Every writer of the pool takes its turn, and a write's error is the caller's.
func TestWriterPoolTakesTurns(t *testing.T) {
	a, b, c := &countingPublisher{}, &countingPublisher{}, &countingPublisher{err: errors.New("not acknowledged")}
	p := NewWriterPool(a, b, c)
	var failed int
	for range 9 {
		if err := p.WriteMessages(context.Background(), kafka.Message{}); err != nil {
			failed++
		}
	}
	if a.writes != 3 || b.writes != 3 || c.writes != 3 || failed != 3 {
		t.Fatalf("writes %d/%d/%d, failed %d; want 3 each and 3 failed", a.writes, b.writes, c.writes, failed)
	}
	one := &countingPublisher{}
	if err := NewWriterPool(one).WriteMessages(context.Background()); err != nil || one.writes != 1 {
		t.Fatalf("a pool of one: %v, %d writes", err, one.writes)
	}
}
