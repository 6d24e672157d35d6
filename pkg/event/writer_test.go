package event

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// Every writer NewWriter builds waits for all in-sync replicas and places keys by murmur2,
// whatever options the caller chose; CheckWriter refuses writers built any other way.
func TestNewWriterEnforcesAcksAllAndMurmur2(t *testing.T) {
	tests := []struct {
		name string
		opts []WriterOption
	}{
		{"defaults", nil},
		{"batch size", []WriterOption{WithBatchSize(1000)}},
		{"single attempt", []WriterOption{WithBatchSize(1000), WithSingleAttempt(30 * time.Second)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w, err := NewWriter([]string{"127.0.0.1:1"}, "t", tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if w.RequiredAcks != kafka.RequireAll {
				t.Fatalf("acks %v, want all", w.RequiredAcks)
			}
			if _, ok := w.Balancer.(kafka.Murmur2Balancer); !ok {
				t.Fatalf("balancer %T, want murmur2", w.Balancer)
			}
		})
	}
	g, err := NewGrabWriter([]string{"127.0.0.1:1"}, "t", WithBatchSize(1000))
	if err != nil || g.RequiredAcks != kafka.RequireAll {
		t.Fatalf("grab writer: %v, acks %v", err, g.RequiredAcks)
	}
	if _, ok := g.Balancer.(GrabBalancer); !ok {
		t.Fatalf("grab writer's balancer %T, want GrabBalancer", g.Balancer)
	}
	if _, err := NewWriter([]string{"127.0.0.1:1"}, "t", WithBatchSize(0)); err == nil {
		t.Fatal("a writer with batch size 0 was built")
	}
	refused := []struct {
		name string
		w    *kafka.Writer
	}{
		{"zero writer (acks=0)", &kafka.Writer{}},
		{"acks=1", &kafka.Writer{RequiredAcks: kafka.RequireOne, BatchTimeout: time.Millisecond, Balancer: kafka.Murmur2Balancer{}}},
		{"fnv balancer", &kafka.Writer{RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond, Balancer: &kafka.Hash{}}},
	}
	for _, tc := range refused {
		if err := CheckWriter(tc.w); err == nil {
			t.Errorf("CheckWriter accepted %s", tc.name)
		}
	}
}

func TestDeadLetterEnvelope(t *testing.T) {
	m := kafka.Message{Topic: "g", Partition: 4, Offset: 1234, Key: []byte("1:2"), Value: []byte("{"),
		Headers: []kafka.Header{{Key: "error", Value: []byte("an older error")}, {Key: "schema", Value: []byte("grab.v1")}}}
	dl := DeadLetter(m, errors.New("bad json"), 1<<20)
	want := map[string]string{HeaderError: "bad json", HeaderOriginTopic: "g", HeaderOriginPartition: "4", HeaderOriginOffset: "1234",
		HeaderOriginSize: "1", HeaderOriginSHA256: "021fb596db81e6d02bf3d2586ee3981fe519f275c0ac9ca76bbcf2ebb4097d96"}
	if string(dl.Key) != "1:2" || string(dl.Value) != "{" || dl.Topic != "" || len(dl.Headers) != len(want) {
		t.Fatalf("dead letter %+v", dl)
	}
	for _, h := range dl.Headers {
		if want[h.Key] != string(h.Value) {
			t.Errorf("header %s = %q, want %q", h.Key, h.Value, want[h.Key])
		}
	}
	c := Compensation(m, errors.New("conflicts"), 9)
	if len(c.Headers) != len(want)+1 || c.Headers[len(c.Headers)-1].Key != HeaderAttempts || string(c.Headers[len(c.Headers)-1].Value) != "9" {
		t.Fatalf("compensation headers %v", c.Headers)
	}
}

// A dead letter and a compensation event keep the original's W3C trace context (and
// nothing else of its headers), so a replay or an operator lands in the purchase's trace; a
// trace header larger than any real one is dropped, not cut into a wrong one.
func TestEnvelopesKeepTheTraceContext(t *testing.T) {
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	m := kafka.Message{Topic: "g", Key: []byte("1:2"), Value: []byte("{"), Headers: []kafka.Header{
		{Key: "schema", Value: []byte("grab.v1")}, {Key: "tracestate", Value: []byte("vendor=x")},
		{Key: "traceparent", Value: []byte(tp)}, {Key: "baggage", Value: []byte("k=v")}}}
	for name, out := range map[string]kafka.Message{
		"dead letter":  DeadLetter(m, errors.New("bad json"), 1<<20),
		"compensation": Compensation(m, errors.New("conflicts"), 9),
		"stub":         stub(DeadLetter(m, errors.New("bad json"), 1<<20)),
	} {
		got := map[string]string{}
		for _, h := range out.Headers {
			if _, dup := got[h.Key]; dup {
				t.Errorf("%s: header %s twice", name, h.Key)
			}
			got[h.Key] = string(h.Value)
		}
		if got[HeaderTraceParent] != tp || got[HeaderTraceState] != "vendor=x" {
			t.Errorf("%s: trace headers %q %q", name, got[HeaderTraceParent], got[HeaderTraceState])
		}
		if _, ok := got["schema"]; ok {
			t.Errorf("%s: carried the original's schema header", name)
		}
		if _, ok := got["baggage"]; ok {
			t.Errorf("%s: carried the original's baggage", name)
		}
	}
	huge := kafka.Message{Value: []byte("{"), Headers: []kafka.Header{{Key: "traceparent", Value: make([]byte, 2000)}}}
	for _, h := range DeadLetter(huge, nil, 1<<20).Headers {
		if h.Key == HeaderTraceParent {
			t.Fatal("a 2000-byte traceparent was carried over")
		}
	}
}

type counter float64

func (c *counter) Add(v float64) { *c += counter(v) }

type writerFunc func(ctx context.Context, msgs ...kafka.Message) error

func (f writerFunc) WriteMessages(ctx context.Context, msgs ...kafka.Message) error {
	return f(ctx, msgs...)
}

// Only dead letters Kafka acknowledged are counted; a DeadLetters without a counter is refused.
func TestDeadLettersCountAcknowledgedOnly(t *testing.T) {
	var n counter
	if _, err := NewDeadLetters(writerFunc(nil), nil, 0); err == nil {
		t.Fatal("dead letters without a counter were accepted")
	}
	fail := true
	var got []kafka.Message
	d, err := NewDeadLetters(writerFunc(func(_ context.Context, msgs ...kafka.Message) error {
		if fail {
			return errors.New("broker down")
		}
		got = msgs
		return nil
	}), &n, 0)
	if err != nil {
		t.Fatal(err)
	}
	poison := []Poison{{Msg: kafka.Message{Topic: "g", Offset: 1}, Cause: errors.New("x")}, {Msg: kafka.Message{Topic: "g", Offset: 2}, Cause: errors.New("y")}}
	if err := d.Write(context.Background(), poison...); err == nil || n != 0 {
		t.Fatalf("failed write: err %v, counted %v", err, n)
	}
	fail = false
	if err := d.Write(context.Background(), poison...); err != nil || n != 2 || len(got) != 2 {
		t.Fatalf("write: err %v, counted %v, wrote %d", err, n, len(got))
	}
	if string(got[1].Headers[0].Value) != "y" {
		t.Fatalf("envelope %v", got[1].Headers)
	}
}

// A copy larger than the budget keeps a prefix of its key and value, says how much it kept,
// and names the original by size and hash; the cause a decoder quoted from it is clipped.
func TestDeadLetterOfAnOversizedMessageIsTruncated(t *testing.T) {
	value := make([]byte, 600<<10)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	key := make([]byte, 5000)
	m := kafka.Message{Topic: "fb", Partition: 2, Offset: 9, Key: key, Value: value}
	dl := DeadLetter(m, errors.New("type "+string(value)), 64<<10)
	h := map[string]string{}
	for _, x := range dl.Headers {
		h[x.Key] = string(x.Value)
	}
	if len(dl.Key) != maxKeyBytes || len(dl.Value) != 64<<10-maxKeyBytes-envelopeRoom ||
		string(dl.Value) != string(value[:len(dl.Value)]) || h[HeaderTruncated] != strconv.Itoa(len(dl.Value)) ||
		h[HeaderOriginSize] != "614400" || len(h[HeaderOriginSHA256]) != 64 || len(h[HeaderError]) > maxCauseBytes {
		t.Fatalf("copy: key %d, value %d bytes, headers %d error bytes, %v", len(dl.Key), len(dl.Value), len(h[HeaderError]), h[HeaderTruncated])
	}
	small := DeadLetter(kafka.Message{Value: []byte("{")}, nil, 64<<10)
	for _, x := range small.Headers {
		if x.Key == HeaderTruncated {
			t.Fatalf("a copy that fits is marked truncated: %v", small.Headers)
		}
	}
}

func TestClip(t *testing.T) {
	for _, tc := range []struct{ in, want string }{{"abc", "abc"}, {"abcdef", "ab…"}, {"aé€x", "a…"}, {"", ""}} {
		if got := Clip(tc.in, 5); got != tc.want || len(got) > 5 {
			t.Errorf("Clip(%q, 5) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// A copy Kafka answers "too large" for (the topic was made with a smaller max.message.bytes
// than configured) is never retried as it was: it is written again as its envelope alone,
// and the copies that landed are not written twice.
func TestDeadLettersRefusedAsTooLargeAreWrittenAsEnvelopes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(msgs []kafka.Message) error
		again  int // messages in the second write
		whole  int // of them, copies sent again whole (failed for another reason)
	}{
		{"writer's own limit", func(msgs []kafka.Message) error { return kafka.MessageTooLargeError{Message: msgs[1]} }, 3, 0},
		{"broker, per message", func([]kafka.Message) error {
			return kafka.WriteErrors{nil, fmt.Errorf("write: %w", kafka.MessageSizeTooLarge), nil}
		}, 1, 0},
		{"broker, whole batch", func([]kafka.Message) error { return kafka.RecordListTooLarge }, 3, 0},
		{"one too large, one failed otherwise", func([]kafka.Message) error {
			return kafka.WriteErrors{fmt.Errorf("write: %w", kafka.MessageSizeTooLarge), kafka.NotLeaderForPartition, nil}
		}, 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n counter
			var calls [][]kafka.Message
			d, err := NewDeadLetters(writerFunc(func(_ context.Context, msgs ...kafka.Message) error {
				calls = append(calls, msgs)
				if len(calls) == 1 {
					return tc.answer(msgs)
				}
				return nil
			}), &n, 0)
			if err != nil {
				t.Fatal(err)
			}
			poison := make([]Poison, 3)
			for i := range poison {
				poison[i] = Poison{Msg: kafka.Message{Topic: "g", Offset: int64(i), Value: []byte("value")}, Cause: errors.New("x")}
			}
			if err := d.Write(context.Background(), poison...); err != nil || n != 3 {
				t.Fatalf("err %v, counted %v", err, n)
			}
			if len(calls) != 2 || len(calls[1]) != tc.again {
				t.Fatalf("%d writes, the second of %d messages; want 2 and %d", len(calls), len(calls[len(calls)-1]), tc.again)
			}
			whole := 0
			for _, m := range calls[1] {
				if string(m.Value) == "value" {
					whole++ // a copy that failed for another reason, sent again as it was
					continue
				}
				if len(m.Value) != 0 || m.Headers[len(m.Headers)-1].Key != HeaderTruncated || string(m.Headers[len(m.Headers)-1].Value) != "0" {
					t.Fatalf("envelope-only copy %+v", m)
				}
			}
			if whole != tc.whole {
				t.Fatalf("%d copies sent again whole, want %d", whole, tc.whole)
			}
		})
	}
	// Any other refusal is the caller's to retry.
	d, _ := NewDeadLetters(writerFunc(func(context.Context, ...kafka.Message) error {
		return kafka.WriteErrors{errors.New("broker down")}
	}), new(counter), 0)
	if err := d.Write(context.Background(), Poison{Msg: kafka.Message{Topic: "g"}}); err == nil {
		t.Fatal("a failed write was reported written")
	}
}
