package event

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/segmentio/kafka-go"
)

// Envelope headers. Every process that dead-letters or compensates a message writes these
// same headers, so one tool reads the dead-letter topic whoever wrote to it.
const (
	HeaderError = "error" // why the message could not be processed
	// Where the message was read: topic, partition, offset.
	HeaderOriginTopic     = "origin-topic"
	HeaderOriginPartition = "origin-partition"
	HeaderOriginOffset    = "origin-offset"
	HeaderAttempts        = "attempts" // compensation only: persistence attempts made
)

// DeadLetter returns the dead-letter topic's message for m, which can never be processed:
// m's key and value unchanged, and the envelope headers saying why (cause) and where m was
// read (its topic, partition and offset). m's own headers are not carried over, so a
// message that already had an envelope (a compensation event) gets exactly one.
func DeadLetter(m kafka.Message, cause error) kafka.Message {
	return kafka.Message{Key: m.Key, Value: m.Value, Headers: envelope(m, cause)}
}

// Compensation returns the compensation topic's message for m, whose persistence ran out of
// retries after attempts attempts: the dead-letter envelope plus the attempt count.
func Compensation(m kafka.Message, cause error, attempts int) kafka.Message {
	return kafka.Message{Key: m.Key, Value: m.Value, Headers: append(envelope(m, cause),
		kafka.Header{Key: HeaderAttempts, Value: []byte(strconv.Itoa(attempts))})}
}

func envelope(m kafka.Message, cause error) []kafka.Header {
	reason := "unknown"
	if cause != nil {
		reason = cause.Error()
	}
	return []kafka.Header{
		{Key: HeaderError, Value: []byte(reason)},
		{Key: HeaderOriginTopic, Value: []byte(m.Topic)},
		{Key: HeaderOriginPartition, Value: []byte(strconv.Itoa(m.Partition))},
		{Key: HeaderOriginOffset, Value: []byte(strconv.FormatInt(m.Offset, 10))},
	}
}

// Poison is a message that can never be processed, and why.
type Poison struct {
	Msg   kafka.Message // as it was read (topic, partition and offset set)
	Cause error
}

// messageWriter is what DeadLetters needs from a Kafka writer.
type messageWriter interface {
	WriteMessages(ctx context.Context, msgs ...kafka.Message) error
}

// Counter is what DeadLetters needs from a metric; a prometheus.Counter is one.
type Counter interface {
	Add(float64)
}

// DeadLetters writes dead-letter envelopes and counts every one Kafka acknowledged, so a
// dead letter is counted whichever process wrote it.
type DeadLetters struct {
	w       messageWriter
	written Counter
}

// NewDeadLetters returns a DeadLetters writing with w (a writer for the dead-letter topic,
// from NewWriter) and counting on written (say seckill_consumer_dead_letters_total). Both are
// required: a dead letter nobody counts is a loss nobody sees.
func NewDeadLetters(w messageWriter, written Counter) (*DeadLetters, error) {
	if w == nil || written == nil {
		return nil, errors.New("dead letters: a writer and a counter are required")
	}
	return &DeadLetters{w: w, written: written}, nil
}

// Write sends the poison messages' envelopes in one produce. It does not retry: on an error
// the caller must not commit the poison messages' offsets (and may call Write again).
func (d *DeadLetters) Write(ctx context.Context, poison ...Poison) error {
	if len(poison) == 0 {
		return nil
	}
	out := make([]kafka.Message, len(poison))
	for i, p := range poison {
		out[i] = DeadLetter(p.Msg, p.Cause)
	}
	if err := d.w.WriteMessages(ctx, out...); err != nil {
		return fmt.Errorf("dead-letter %d messages (first %s/%d@%d): %w", len(out),
			poison[0].Msg.Topic, poison[0].Msg.Partition, poison[0].Msg.Offset, err)
	}
	d.written.Add(float64(len(out)))
	return nil
}
