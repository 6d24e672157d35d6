package event

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

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
	// The original value's size in bytes and its SHA-256 (hex), on every dead letter, so
	// an operator can tell a truncated copy from the original found at its origin.
	HeaderOriginSize   = "origin-size"
	HeaderOriginSHA256 = "origin-sha256"
	// HeaderTruncated, present only on a copy that does not hold all of the original,
	// says how many bytes of its value it kept (a prefix; 0: none).
	HeaderTruncated = "truncated"
	// The W3C Trace Context of the original message (pkg/tracing), carried over unchanged
	// when it had one, so a dead letter or a compensation replay is found in, and continues,
	// the purchase's trace.
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
)

// The parts of an envelope that come from outside are bounded: a cause quotes what it
// could not decode (a 600 KB "type" field made a 600 KB error header once), and a key can
// be as large as the topic allows.
const (
	maxCauseBytes = 1 << 10
	maxKeyBytes   = 1 << 10
	// envelopeRoom is what a copy leaves of its budget for the headers and the record's
	// own framing: the cause, the origin, the size and the hash fit in far less.
	envelopeRoom = 8 << 10
)

// DeadLetter returns the dead-letter topic's message for m, which can never be processed:
// m's key and value, and the envelope headers saying why (cause) and where m was read (its
// topic, partition and offset) with the original value's size and hash. m's own headers are
// not carried over, so a message that already had an envelope (a compensation event) gets
// exactly one; only its trace context is (traceparent, tracestate). A copy whose key and value exceed budget bytes keeps a prefix of each,
// marked by HeaderTruncated; the original stays where the envelope says it was read.
func DeadLetter(m kafka.Message, cause error, budget int) kafka.Message {
	key, value := m.Key, m.Value
	truncated := false
	if len(key) > maxKeyBytes {
		key, truncated = key[:maxKeyBytes], true
	}
	if room := max(budget-len(key)-envelopeRoom, 0); len(value) > room {
		value, truncated = value[:room], true
	}
	h := envelope(m, cause)
	if truncated {
		h = append(h, kafka.Header{Key: HeaderTruncated, Value: []byte(strconv.Itoa(len(value)))})
	}
	return kafka.Message{Key: key, Value: value, Headers: h}
}

// stub is a dead letter of m that keeps nothing of its value: what is left to write when
// the topic refuses even a bounded copy (it was created with a smaller max.message.bytes).
func stub(dl kafka.Message) kafka.Message {
	out := kafka.Message{Key: dl.Key}
	for _, h := range dl.Headers {
		if h.Key != HeaderTruncated {
			out.Headers = append(out.Headers, h)
		}
	}
	out.Headers = append(out.Headers, kafka.Header{Key: HeaderTruncated, Value: []byte("0")})
	return out
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
		reason = Clip(cause.Error(), maxCauseBytes)
	}
	sum := sha256.Sum256(m.Value)
	h := []kafka.Header{
		{Key: HeaderError, Value: []byte(reason)},
		{Key: HeaderOriginTopic, Value: []byte(m.Topic)},
		{Key: HeaderOriginPartition, Value: []byte(strconv.Itoa(m.Partition))},
		{Key: HeaderOriginOffset, Value: []byte(strconv.FormatInt(m.Offset, 10))},
		{Key: HeaderOriginSize, Value: []byte(strconv.Itoa(len(m.Value)))},
		{Key: HeaderOriginSHA256, Value: []byte(hex.EncodeToString(sum[:]))},
	}
	return append(h, traceHeaders(m.Headers)...)
}

// traceHeaders are the W3C Trace Context headers among hs (the first of each key), each
// bounded like the cause: they come from whoever wrote the original message.
func traceHeaders(hs []kafka.Header) []kafka.Header {
	var out []kafka.Header
	for _, key := range [...]string{HeaderTraceParent, HeaderTraceState} {
		for _, h := range hs {
			if h.Key == key {
				if len(h.Value) <= maxCauseBytes {
					out = append(out, kafka.Header{Key: key, Value: h.Value})
				}
				break
			}
		}
	}
	return out
}

// Clip returns s cut to at most n bytes, on a character boundary, marked with "…" when cut.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	cut := max(n-len(mark), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
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
	budget  int // bytes of key and value one copy may hold
}

// NewDeadLetters returns a DeadLetters writing with w (from NewDeadLetterWriter for the
// same topic) and counting on written (say seckill_consumer_dead_letters_total). Both are
// required: a dead letter nobody counts is a loss nobody sees. maxMessageBytes is the
// dead-letter topic's max.message.bytes (0: Kafka's default); a copy holds at most half of
// it, the writer's batch limit.
func NewDeadLetters(w messageWriter, written Counter, maxMessageBytes int) (*DeadLetters, error) {
	if w == nil || written == nil {
		return nil, errors.New("dead letters: a writer and a counter are required")
	}
	if maxMessageBytes < 0 || (maxMessageBytes > 0 && maxMessageBytes < 4*envelopeRoom) {
		return nil, fmt.Errorf("dead letters: max.message.bytes %d leaves no room for a copy (want 0 or at least %d)", maxMessageBytes, 4*envelopeRoom)
	}
	return &DeadLetters{w: w, written: written, budget: deadLetterBatchBytes(maxMessageBytes)}, nil
}

// kafkaMaxMessageBytes is Kafka's default message.max.bytes.
const kafkaMaxMessageBytes = 1048588

// deadLetterBatchBytes is the batch limit of a dead-letter writer, and the most one copy
// holds: half the topic's max.message.bytes. kafka-go counts a batch's bytes its own way,
// not as the broker frames the record batch; half leaves that difference room, so a batch
// kafka-go forms is one the broker takes.
func deadLetterBatchBytes(maxMessageBytes int) int {
	if maxMessageBytes == 0 {
		maxMessageBytes = kafkaMaxMessageBytes
	}
	return maxMessageBytes / 2
}

// NewDeadLetterWriter is NewWriter for the dead-letter topic t, its batches bounded to what
// t's max.message.bytes takes (see DeadLetters).
func NewDeadLetterWriter(brokers []string, t Topic, opts ...WriterOption) (*kafka.Writer, error) {
	bound := func(w *kafka.Writer) { w.BatchBytes = int64(deadLetterBatchBytes(t.MaxMessageBytes)) }
	return NewWriter(brokers, t.Name, append(opts, bound)...)
}

// Write sends the poison messages' envelopes in one produce, each copy within the topic's
// size. If Kafka still answers that a copy is too large (the topic was created by someone
// else with a smaller max.message.bytes), the refused copies are written again as their
// envelope alone: an answer that can never succeed is not retried, and the poison is still
// set aside; copies that failed beside them for another reason are written again whole. Any other error is returned without a retry: the caller must not commit the
// poison messages' offsets (and may call Write again; copies that landed then land twice).
func (d *DeadLetters) Write(ctx context.Context, poison ...Poison) error {
	if len(poison) == 0 {
		return nil
	}
	out := make([]kafka.Message, len(poison))
	for i, p := range poison {
		out[i] = DeadLetter(p.Msg, p.Cause, d.budget)
	}
	err := d.w.WriteMessages(ctx, out...)
	if large, rest := tooLarge(err, len(out)); len(large) > 0 {
		again := make([]kafka.Message, 0, len(large)+len(rest))
		for _, i := range large {
			again = append(again, stub(out[i]))
		}
		for _, i := range rest {
			again = append(again, out[i])
		}
		err = d.w.WriteMessages(ctx, again...)
	}
	if err != nil {
		return fmt.Errorf("dead-letter %d messages (first %s/%d@%d): %w", len(out),
			poison[0].Msg.Topic, poison[0].Msg.Partition, poison[0].Msg.Offset, err)
	}
	d.written.Add(float64(len(out)))
	return nil
}

// tooLarge sorts the n messages a write did not land, when err says a message or batch was
// too large (both nil otherwise): large, the ones refused for their size (every one when
// kafka-go refused before sending, MessageTooLargeError, or did not say which), and rest,
// the ones that failed in the same write for another reason (a leader change, a timeout),
// which are sent again whole.
func tooLarge(err error, n int) (large, rest []int) {
	isLarge := func(err error) bool {
		return errors.Is(err, kafka.MessageSizeTooLarge) || errors.Is(err, kafka.RecordListTooLarge)
	}
	var each kafka.WriteErrors
	if errors.As(err, &each) && len(each) == n {
		for i, e := range each {
			switch {
			case e == nil:
			case isLarge(e):
				large = append(large, i)
			default:
				rest = append(rest, i)
			}
		}
		if len(large) == 0 {
			return nil, nil
		}
		return large, rest
	}
	if err == nil || !isLarge(err) {
		return nil, nil
	}
	large = make([]int, n)
	for i := range large {
		large[i] = i
	}
	return large, nil
}
