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
