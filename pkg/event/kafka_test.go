package event_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/stacktest"
)

func TestProduceAcksAllAndConsumeGroupCommits(t *testing.T) {
	brokers, topics := stacktest.Kafka(t)
	ctx := stacktest.Context(t, 60*time.Second)
	topic := topics.Grab.Name

	w, err := event.NewWriter(brokers, topic)
	if err != nil {
		t.Fatal(err)
	}
	if err := event.CheckWriter(w); err != nil {
		t.Fatal(err)
	}
	const n = 20
	msgs := make([]kafka.Message, n)
	for i := range msgs {
		msgs[i] = kafka.Message{Key: []byte(fmt.Sprintf("k%d", i%3)), Value: []byte(fmt.Sprintf("v%d", i))}
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	group := "t-" + stacktest.ID(t)
	read := func(limit int) map[string]bool {
		r := kafka.NewReader(kafka.ReaderConfig{
			Brokers: brokers, GroupID: group, Topic: topic,
			StartOffset: kafka.FirstOffset, MaxWait: 100 * time.Millisecond,
		})
		defer r.Close()
		seen := map[string]bool{}
		for len(seen) < limit {
			m, err := r.FetchMessage(ctx)
			if err != nil {
				t.Fatalf("fetch after %d messages: %v", len(seen), err)
			}
			seen[string(m.Value)] = true
			if err := r.CommitMessages(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		return seen
	}
	if got := read(n); len(got) != n {
		t.Fatalf("read %d distinct messages, want %d", len(got), n)
	}

	// The group's committed offsets must cover everything: a new member of the same group
	// finds nothing left, while the topic's end offsets equal what was produced.
	client := &kafka.Client{Addr: kafka.TCP(brokers...)}
	offs, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: partitions(topics.Grab.Partitions)}})
	if err != nil {
		t.Fatal(err)
	}
	var committed int64
	for _, p := range offs.Topics[topic] {
		if p.CommittedOffset > 0 {
			committed += p.CommittedOffset
		}
	}
	if committed != n {
		t.Fatalf("group committed %d offsets in total, want %d", committed, n)
	}
}

func partitions(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}
