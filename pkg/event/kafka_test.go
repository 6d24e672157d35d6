package event_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/internal/harness"
	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/event"
)

func TestProduceAcksAllAndConsumeGroupCommits(t *testing.T) {
	brokers, topics := stacktest.Kafka(t)
	ctx := stacktest.Context(t, 60*time.Second)
	topic := topics.Grab.Name

	w, err := event.NewWriter(brokers, topic, event.WithSecurity(stacktest.KafkaSecurity(t)))
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
			Brokers: brokers, Dialer: stacktest.KafkaSecurity(t).Dialer(), GroupID: group, Topic: topic,
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
	client := stacktest.KafkaClient(t, brokers)
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

// Grab events land on exactly the partition PartitionOf names (the reconciler maps
// session×prize to a partition with it) for many keys, as the broker stored them: both
// those our writer produced and those a standard client produced (a producer with the Java
// client's default partitioner for keyed messages, as a tool re-publishing events would).
func TestPartitionOfMatchesBroker(t *testing.T) {
	brokers, topics := stacktest.Kafka(t)
	ctx := stacktest.Context(t, 60*time.Second)
	ours, err := event.NewGrabWriter(brokers, topics.Grab.Name, event.WithSecurity(stacktest.KafkaSecurity(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer ours.Close()
	standard := &kafka.Writer{Addr: kafka.TCP(brokers...), Transport: stacktest.KafkaTransport(t), Topic: topics.Grab.Name, Balancer: kafka.Murmur2Balancer{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer standard.Close()
	var msgs []kafka.Message
	for s := int64(1); s <= 20; s++ {
		for p := int64(1); p <= 10; p++ {
			msgs = append(msgs, kafka.Message{Key: event.PartitionKey(s*7919, p), Value: []byte("ours")})
		}
	}
	// Stock buckets' keys too, which only our writer (GrabBalancer) produces: PartitionOf
	// must name their partitions as well.
	var bucketMsgs []kafka.Message
	for p := int64(1); p <= 10; p++ {
		for b := 1; b < 8; b++ {
			bucketMsgs = append(bucketMsgs, kafka.Message{Key: event.BucketPartitionKey(7919, p, b), Value: []byte("ours, bucket")})
		}
	}
	if err := ours.WriteMessages(ctx, append(append([]kafka.Message{}, msgs...), bucketMsgs...)...); err != nil {
		t.Fatal(err)
	}
	for i := range msgs {
		msgs[i].Value = []byte("standard")
	}
	if err := standard.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	got, err := harness.ReadTopic(ctx, brokers, topics.Grab)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2*len(msgs)+len(bucketMsgs) {
		t.Fatalf("read %d messages, wrote %d", len(got), 2*len(msgs)+len(bucketMsgs))
	}
	used := map[int]bool{}
	for _, m := range got {
		used[m.Partition] = true
		if want := event.PartitionOf(m.Key, topics.Grab.Partitions); m.Partition != want {
			t.Errorf("key %s (%s writer) is on partition %d, PartitionOf says %d", m.Key, m.Value, m.Partition, want)
		}
	}
	if len(used) != topics.Grab.Partitions {
		t.Fatalf("%d keys used only partitions %v", len(msgs), used)
	}
}

// Partitions reads the broker's count; CheckPartitions refuses a topic whose count differs
// from the configured one (PartitionOf would map prizes to the wrong partitions).
func TestCheckPartitions(t *testing.T) {
	brokers, topics := stacktest.Kafka(t)
	ctx := stacktest.Context(t, 30*time.Second)
	admin, err := event.NewAdmin(brokers, event.AdminSecurity(stacktest.KafkaSecurity(t)))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := admin.Partitions(ctx, topics.Grab.Name); err != nil || n != topics.Grab.Partitions {
		t.Fatalf("Partitions = %d, %v; want %d", n, err, topics.Grab.Partitions)
	}
	if err := admin.CheckPartitions(ctx, topics.All()...); err != nil {
		t.Fatalf("matching counts refused: %v", err)
	}
	wrong := topics.Grab
	wrong.Partitions = 12
	err = admin.CheckPartitions(ctx, topics.Order, wrong)
	if err == nil || !strings.Contains(err.Error(), "has 6 partitions on the broker, configured 12") {
		t.Fatalf("CheckPartitions with a wrong count: %v", err)
	}
	if err := admin.CheckPartitions(ctx, event.Topic{Name: topics.Grab.Name + ".missing", Partitions: 1}); err == nil {
		t.Fatal("a missing topic passed the check")
	}
}

// Offsets lists every partition's first and end offsets; Lag is end - committed, or
// everything retained when the group committed nothing.
func TestOffsetsAndLag(t *testing.T) {
	brokers, topics := stacktest.Kafka(t)
	ctx := stacktest.Context(t, 60*time.Second)
	admin, err := event.NewAdmin(brokers, event.AdminSecurity(stacktest.KafkaSecurity(t)))
	if err != nil {
		t.Fatal(err)
	}
	w, err := event.NewGrabWriter(brokers, topics.Grab.Name, event.WithSecurity(stacktest.KafkaSecurity(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	const n = 30
	var msgs []kafka.Message
	for i := range n {
		msgs = append(msgs, kafka.Message{Key: event.PartitionKey(int64(i), 1), Value: []byte("x")})
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	offs, err := admin.Offsets(ctx, topics.Grab.Name)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, o := range offs {
		total += o.End - o.First
	}
	if len(offs) != topics.Grab.Partitions || total != n {
		t.Fatalf("offsets %v: %d partitions holding %d messages, want %d and %d", offs, len(offs), total, topics.Grab.Partitions, n)
	}
	group := "t-" + stacktest.ID(t)
	lag, err := admin.Lag(ctx, group, topics.Grab)
	if err != nil {
		t.Fatal(err)
	}
	for p, o := range offs {
		if lag[p] != o.End-o.First {
			t.Fatalf("lag of a group that committed nothing: %v, offsets %v", lag, offs)
		}
	}
	// Commit one partition's end through the group: its lag drops to 0, the others stay.
	var full int
	for p, o := range offs {
		if o.End > 0 {
			full = p
			break
		}
	}
	client := stacktest.KafkaClient(t, brokers)
	if _, err := client.OffsetCommit(ctx, &kafka.OffsetCommitRequest{GroupID: group, GenerationID: -1,
		Topics: map[string][]kafka.OffsetCommit{topics.Grab.Name: {{Partition: full, Offset: offs[full].End}}}}); err != nil {
		t.Fatal(err)
	}
	if lag, err = admin.Lag(ctx, group, topics.Grab); err != nil || lag[full] != 0 {
		t.Fatalf("lag after committing partition %d's end: %v, %v", full, lag, err)
	}
	var left int64
	for _, l := range lag {
		left += l
	}
	if left != n-(offs[full].End-offs[full].First) {
		t.Fatalf("lag %v after committing partition %d", lag, full)
	}
}
