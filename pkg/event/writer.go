package event

import (
	"errors"
	"time"

	"github.com/segmentio/kafka-go"
)

// NewWriter returns a producer for one topic with the settings the pipeline's promises rest
// on. kafka-go's zero Writer acknowledges nothing (acks=0) and waits up to a second to fill
// a batch; here every write waits for all in-sync replicas, batches for a few milliseconds
// only, and keys hash to partitions so one session×prize always lands on one partition.
func NewWriter(brokers []string, topic string) (*kafka.Writer, error) {
	if len(brokers) == 0 || topic == "" {
		return nil, errors.New("kafka writer: brokers and topic are required")
	}
	return &kafka.Writer{
		Addr:                   kafka.TCP(brokers...),
		Topic:                  topic,
		Balancer:               &kafka.Hash{},
		RequiredAcks:           kafka.RequireAll,
		BatchTimeout:           time.Millisecond,
		BatchSize:              500,
		MaxAttempts:            5,
		WriteBackoffMin:        10 * time.Millisecond,
		WriteBackoffMax:        200 * time.Millisecond,
		ReadTimeout:            5 * time.Second,
		WriteTimeout:           5 * time.Second,
		AllowAutoTopicCreation: false,
	}, nil
}

// CheckWriter refuses a writer that could lose acknowledged events.
func CheckWriter(w *kafka.Writer) error {
	if w.RequiredAcks != kafka.RequireAll {
		return errors.New("kafka writer must use RequiredAcks=RequireAll (acks=all)")
	}
	if w.BatchTimeout <= 0 || w.BatchTimeout > 50*time.Millisecond {
		return errors.New("kafka writer batch timeout must be a few milliseconds")
	}
	return nil
}
