package event

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
)

// Admin runs the few cluster-level calls the pipeline needs: probing readiness and
// creating topics idempotently.
type Admin struct {
	client *kafka.Client
}

// NewAdmin returns an Admin for the given bootstrap brokers.
func NewAdmin(brokers []string) (*Admin, error) {
	if len(brokers) == 0 {
		return nil, errors.New("kafka admin: no brokers")
	}
	return &Admin{client: &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}}, nil
}

// Ping sends a metadata request and reports whether at least one broker answered.
func (a *Admin) Ping(ctx context.Context) error {
	md, err := a.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{}})
	if err != nil {
		return fmt.Errorf("kafka metadata: %w", err)
	}
	if len(md.Brokers) == 0 {
		return errors.New("kafka metadata: no brokers in the answer")
	}
	return nil
}

// WaitReady probes with metadata requests until one succeeds or ctx ends.
func (a *Admin) WaitReady(ctx context.Context) error {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := a.Ping(pctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafka not ready: %w (last error: %v)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// EnsureTopics creates the topics that do not exist yet. A topic that exists is left as it
// is (its partition count is not changed), so running this twice is harmless.
func (a *Admin) EnsureTopics(ctx context.Context, topics ...Topic) error {
	req := &kafka.CreateTopicsRequest{}
	for _, t := range topics {
		req.Topics = append(req.Topics, kafka.TopicConfig{
			Topic:             t.Name,
			NumPartitions:     t.Partitions,
			ReplicationFactor: 1,
		})
	}
	resp, err := a.client.CreateTopics(ctx, req)
	if err != nil {
		return fmt.Errorf("create topics: %w", err)
	}
	for name, terr := range resp.Errors {
		if terr != nil && !errors.Is(terr, kafka.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", name, terr)
		}
	}
	return a.waitTopics(ctx, topics)
}

// waitTopics waits until every partition of every topic has a leader that answers, so a
// producer or reader started right after does not race the controller ("not leader").
func (a *Admin) waitTopics(ctx context.Context, topics []Topic) error {
	names := make([]string, len(topics))
	offsets := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for i, t := range topics {
		names[i] = t.Name
		for p := 0; p < t.Partitions; p++ {
			offsets.Topics[t.Name] = append(offsets.Topics[t.Name], kafka.LastOffsetOf(p))
		}
	}
	for {
		md, err := a.client.Metadata(ctx, &kafka.MetadataRequest{Topics: names})
		if err == nil && topicsLed(md) && a.offsetsAnswer(ctx, offsets) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topics %v not ready: %w", names, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (a *Admin) offsetsAnswer(ctx context.Context, req *kafka.ListOffsetsRequest) bool {
	resp, err := a.client.ListOffsets(ctx, req)
	if err != nil {
		return false
	}
	for _, parts := range resp.Topics {
		for _, p := range parts {
			if p.Error != nil {
				return false
			}
		}
	}
	return true
}

func topicsLed(md *kafka.MetadataResponse) bool {
	for _, t := range md.Topics {
		if t.Error != nil || len(t.Partitions) == 0 {
			return false
		}
		for _, p := range t.Partitions {
			if p.Error != nil || p.Leader.Host == "" {
				return false
			}
		}
	}
	return true
}

// DeleteTopics removes topics (tests clean up their own topics with it).
func (a *Admin) DeleteTopics(ctx context.Context, names ...string) error {
	resp, err := a.client.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: names})
	if err != nil {
		return fmt.Errorf("delete topics: %w", err)
	}
	for name, terr := range resp.Errors {
		if terr != nil && !errors.Is(terr, kafka.UnknownTopicOrPartition) {
			return fmt.Errorf("delete topic %s: %w", name, terr)
		}
	}
	return nil
}

// PartitionOf returns the partition a key lands on among n partitions, with the same
// balancer the writers use (so the reconciler can ask about one prize's partition).
func PartitionOf(key []byte, n int) int {
	parts := make([]int, n)
	for i := range parts {
		parts[i] = i
	}
	return (&kafka.Hash{}).Balance(kafka.Message{Key: key}, parts...)
}

// Lag returns, per partition of topic, how many messages the group has not committed yet.
func (a *Admin) Lag(ctx context.Context, group string, t Topic) (map[int]int64, error) {
	parts := make([]int, t.Partitions)
	first := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	last := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for p := range parts {
		parts[p] = p
		first.Topics[t.Name] = append(first.Topics[t.Name], kafka.FirstOffsetOf(p))
		last.Topics[t.Name] = append(last.Topics[t.Name], kafka.LastOffsetOf(p))
	}
	committed, err := a.client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{t.Name: parts}})
	if err != nil {
		return nil, fmt.Errorf("committed offsets of %s: %w", group, err)
	}
	if committed.Error != nil {
		return nil, fmt.Errorf("committed offsets of %s: %w", group, committed.Error)
	}
	starts, err := a.client.ListOffsets(ctx, first)
	if err != nil {
		return nil, fmt.Errorf("first offsets of %s: %w", t.Name, err)
	}
	ends, err := a.client.ListOffsets(ctx, last)
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", t.Name, err)
	}
	startOf := map[int]int64{}
	for _, p := range starts.Topics[t.Name] {
		startOf[p.Partition] = p.FirstOffset
	}
	pos := map[int]int64{}
	for _, p := range committed.Topics[t.Name] {
		if p.Error != nil {
			return nil, fmt.Errorf("committed offset of %s/%d: %w", t.Name, p.Partition, p.Error)
		}
		pos[p.Partition] = p.CommittedOffset
	}
	lag := make(map[int]int64, t.Partitions)
	for _, p := range ends.Topics[t.Name] {
		if p.Error != nil {
			return nil, fmt.Errorf("end offset of %s/%d: %w", t.Name, p.Partition, p.Error)
		}
		at, ok := pos[p.Partition]
		if !ok || at < 0 {
			at = startOf[p.Partition] // nothing committed: everything retained is ahead
		}
		lag[p.Partition] = max(0, p.LastOffset-at)
	}
	return lag, nil
}
