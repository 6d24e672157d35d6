package event

import (
	"context"
	"errors"
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
	dl := DeadLetter(m, errors.New("bad json"))
	want := map[string]string{HeaderError: "bad json", HeaderOriginTopic: "g", HeaderOriginPartition: "4", HeaderOriginOffset: "1234"}
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

type counter float64

func (c *counter) Add(v float64) { *c += counter(v) }

type writerFunc func(ctx context.Context, msgs ...kafka.Message) error

func (f writerFunc) WriteMessages(ctx context.Context, msgs ...kafka.Message) error {
	return f(ctx, msgs...)
}

// Only dead letters Kafka acknowledged are counted; a DeadLetters without a counter is refused.
func TestDeadLettersCountAcknowledgedOnly(t *testing.T) {
	var n counter
	if _, err := NewDeadLetters(writerFunc(nil), nil); err == nil {
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
	}), &n)
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
