package event

import (
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
)

// WriterOption changes one of the few writer settings a caller may choose. There is no
// option for acks or the balancer: those are what the pipeline's promises rest on.
type WriterOption func(*kafka.Writer)

// WithBatchSize lets a writer put up to n messages in one produce request.
func WithBatchSize(n int) WriterOption {
	return func(w *kafka.Writer) { w.BatchSize = n }
}

// WithBatchTimeout sets how long a batch waits for more messages before it is sent.
// kafka-go sends one produce request per partition at a time and closes a batch on this
// timer, not when the request before it returns, so the timeout sets both the wait a lone
// message pays and how many requests a busy partition queues (docs/performance.md, the
// Kafka acknowledgement's tail). CheckWriter still holds it to a few milliseconds.
func WithBatchTimeout(d time.Duration) WriterOption {
	return func(w *kafka.Writer) { w.BatchTimeout = d }
}

// WithSingleAttempt makes the writer try a write once and wait up to timeout for the
// broker's answer. kafka-go has no idempotent producer: a write that timed out may still
// land (the broker was only paused), and retrying it would land it twice. A caller that
// has its own way to find out what landed (the order relay's recovery scan) uses this.
func WithSingleAttempt(timeout time.Duration) WriterOption {
	return func(w *kafka.Writer) {
		w.MaxAttempts = 1
		w.WriteTimeout, w.ReadTimeout = timeout, timeout
	}
}

// NewWriter returns a producer for one topic with the settings the pipeline's promises rest
// on, and refuses (CheckWriter) anything else, so no composition root has to check again.
// kafka-go's zero Writer acknowledges nothing (acks=0) and waits up to a second to fill a
// batch; here every write waits for all in-sync replicas and batches for a few
// milliseconds only. Keys are placed by murmur2, the Java client's partitioner for keyed
// messages, so any standard client re-producing an event with its key lands on the same
// partition, and PartitionOf can name it.
func NewWriter(brokers []string, topic string, opts ...WriterOption) (*kafka.Writer, error) {
	return newWriter(brokers, topic, kafka.Murmur2Balancer{}, opts)
}

// NewGrabWriter is NewWriter for the grab topic: the same settings, with GrabBalancer, which
// puts a prize's stock buckets on consecutive partitions and every other key where
// NewWriter would. Every writer of grab events (the gateway, the reconciler's re-publish and
// replays, the bench) must be built here, or a bucket's events would land on a partition
// PartitionOf does not name. Topics that only carry grab keys along (compensation,
// dead letters) keep NewWriter: their partitions have no worker per prize to agree with.
func NewGrabWriter(brokers []string, topic string, opts ...WriterOption) (*kafka.Writer, error) {
	return newWriter(brokers, topic, GrabBalancer{}, opts)
}

func newWriter(brokers []string, topic string, balancer kafka.Balancer, opts []WriterOption) (*kafka.Writer, error) {
	if len(brokers) == 0 || topic == "" {
		return nil, errors.New("kafka writer: brokers and topic are required")
	}
	w := &kafka.Writer{
		Addr:                   kafka.TCP(brokers...),
		Topic:                  topic,
		Balancer:               balancer,
		RequiredAcks:           kafka.RequireAll,
		BatchTimeout:           time.Millisecond,
		BatchSize:              500,
		MaxAttempts:            5,
		WriteBackoffMin:        10 * time.Millisecond,
		WriteBackoffMax:        200 * time.Millisecond,
		ReadTimeout:            5 * time.Second,
		WriteTimeout:           5 * time.Second,
		AllowAutoTopicCreation: false,
	}
	for _, o := range opts {
		o(w)
	}
	if err := CheckWriter(w); err != nil {
		return nil, fmt.Errorf("kafka writer for %s: %w", topic, err)
	}
	return w, nil
}

// CheckWriter refuses a writer that could lose acknowledged events or place a key on
// another partition than PartitionOf says. NewWriter runs it on every writer it builds;
// callers of NewWriter need not.
func CheckWriter(w *kafka.Writer) error {
	if w.RequiredAcks != kafka.RequireAll {
		return errors.New("kafka writer must use RequiredAcks=RequireAll (acks=all)")
	}
	if w.BatchTimeout <= 0 || w.BatchTimeout > 50*time.Millisecond {
		return errors.New("kafka writer batch timeout must be a few milliseconds")
	}
	switch w.Balancer.(type) {
	case kafka.Murmur2Balancer, GrabBalancer:
		// Murmur2Balancer: the Java client and PartitionOf agree with it. GrabBalancer: the
		// same for every key but a stock bucket's, which PartitionOf places as it does.
	default:
		return fmt.Errorf("kafka writer balancer is %T; keys must be placed by kafka.Murmur2Balancer or event.GrabBalancer (PartitionOf and the Java client agree with them)", w.Balancer)
	}
	if w.BatchSize < 1 || w.MaxAttempts < 1 || w.WriteTimeout <= 0 || w.ReadTimeout <= 0 {
		return errors.New("kafka writer batch size, attempts and timeouts must be positive")
	}
	return nil
}
