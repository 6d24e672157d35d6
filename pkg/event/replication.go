package event

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol/metadata"
)

// Replication is how the pipeline's topics are replicated. The zero value takes the
// brokers' defaults (default.replication.factor, min.insync.replicas). On a replicated
// cluster the topics need a factor of 3 and min.insync.replicas 2: with acks=all a write is
// then acknowledged only once two brokers hold it, so losing any one broker loses no
// acknowledged event, and a partition down to one in-sync replica refuses writes instead of
// acknowledging what a second failure would lose.
type Replication struct {
	Factor    int // replicas of each partition; 0: the brokers' default.replication.factor
	MinInSync int // the topics' min.insync.replicas; 0: the brokers' default
}

func (r Replication) topicConfig(t Topic) kafka.TopicConfig {
	c := kafka.TopicConfig{Topic: t.Name, NumPartitions: t.Partitions, ReplicationFactor: -1}
	if r.Factor > 0 {
		c.ReplicationFactor = r.Factor
	}
	if r.MinInSync > 0 {
		c.ConfigEntries = append(c.ConfigEntries,
			kafka.ConfigEntry{ConfigName: "min.insync.replicas", ConfigValue: strconv.Itoa(r.MinInSync)})
	}
	if t.MaxMessageBytes > 0 {
		c.ConfigEntries = append(c.ConfigEntries,
			kafka.ConfigEntry{ConfigName: "max.message.bytes", ConfigValue: strconv.Itoa(t.MaxMessageBytes)})
	}
	return c
}

// PartitionState is one partition as the brokers' metadata describes it.
type PartitionState struct {
	ID       int
	Leader   int   // broker id; -1 while the partition has no leader
	Replicas []int // broker ids
	ISR      []int // in-sync replicas (broker ids)
}

// TopicState is one topic's partitions and its effective min.insync.replicas.
type TopicState struct {
	Name       string
	MinInSync  int
	Partitions []PartitionState
}

func (t TopicState) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "topic %s partitions=%d min.insync.replicas=%d", t.Name, len(t.Partitions), t.MinInSync)
	for _, p := range t.Partitions {
		fmt.Fprintf(&b, "\n  partition %d leader=%d replicas=%v isr=%v", p.ID, p.Leader, p.Replicas, p.ISR)
	}
	return b.String()
}

// ClusterState is the cluster as one metadata request saw it: the brokers it lists as alive
// (a stopped or fenced broker is left out) and the topics asked about.
type ClusterState struct {
	Brokers []int // ids of the live brokers
	Topics  []TopicState
}

// Down returns the brokers named as replicas of the topics' partitions that the cluster
// does not list as alive: the brokers that are down, as far as these topics are concerned.
func (c ClusterState) Down() []int {
	var down []int
	for _, t := range c.Topics {
		for _, p := range t.Partitions {
			for _, r := range p.Replicas {
				if !slices.Contains(c.Brokers, r) && !slices.Contains(down, r) {
					down = append(down, r)
				}
			}
		}
	}
	slices.Sort(down)
	return down
}

// UnderReplicated counts the partitions with fewer in-sync replicas than replicas.
func (t TopicState) UnderReplicated() int {
	n := 0
	for _, p := range t.Partitions {
		if len(p.ISR) < len(p.Replicas) {
			n++
		}
	}
	return n
}

// BelowMinInSync counts the partitions that refuse acks=all writes: fewer in-sync replicas
// than the topic's min.insync.replicas, or no leader at all. Kafka 4 caps the minimum at the
// partition's replica count (a min.insync.replicas above it refuses nothing; seen on the
// stack's 4.4 broker), and so does this count.
func (t TopicState) BelowMinInSync() int {
	n := 0
	for _, p := range t.Partitions {
		if p.Leader < 0 || len(p.ISR) < min(t.MinInSync, len(p.Replicas)) {
			n++
		}
	}
	return n
}

// Describe returns each topic's partitions (leader, replicas, in-sync replicas) from a
// metadata request and its effective min.insync.replicas from a describe-configs request.
func (a *Admin) Describe(ctx context.Context, topics ...Topic) ([]TopicState, error) {
	c, err := a.Cluster(ctx, topics...)
	if err != nil {
		return nil, err
	}
	minISR, err := a.MinInSync(ctx, topics...)
	if err != nil {
		return nil, err
	}
	for i := range c.Topics {
		c.Topics[i].MinInSync = minISR[c.Topics[i].Name]
	}
	return c.Topics, nil
}

// Cluster returns, from one metadata request, the live brokers and each topic's partitions
// (MinInSync left 0: reading it takes a describe-configs request, see MinInSync, which a
// principal without DescribeConfigs on the topics is refused).
func (a *Admin) Cluster(ctx context.Context, topics ...Topic) (ClusterState, error) {
	names := make([]string, len(topics))
	for i, t := range topics {
		names[i] = t.Name
	}
	// The raw metadata answer: kafka-go's own type looks replicas up among the live brokers,
	// so a broker that is down (the case worth describing) would show as replica 0.
	md, err := a.freshMetadata(ctx, names)
	if err != nil {
		return ClusterState{}, err
	}
	byName := map[string]metadata.ResponseTopic{}
	for _, t := range md.Topics {
		byName[t.Name] = t
	}
	ids := func(ns []int32) []int {
		out := make([]int, len(ns))
		for i, n := range ns {
			out[i] = int(n)
		}
		slices.Sort(out)
		return out
	}
	out := ClusterState{Brokers: make([]int, 0, len(md.Brokers)), Topics: make([]TopicState, 0, len(topics))}
	for _, b := range md.Brokers {
		out.Brokers = append(out.Brokers, int(b.NodeID))
	}
	slices.Sort(out.Brokers)
	for _, name := range names {
		t, ok := byName[name]
		if !ok {
			return ClusterState{}, fmt.Errorf("metadata of %s: not in the answer", name)
		}
		if t.ErrorCode != 0 {
			return ClusterState{}, fmt.Errorf("metadata of %s: %w", name, kafka.Error(t.ErrorCode))
		}
		ts := TopicState{Name: name}
		for _, p := range t.Partitions {
			ts.Partitions = append(ts.Partitions, PartitionState{ID: int(p.PartitionIndex), Leader: int(p.LeaderID),
				Replicas: ids(p.ReplicaNodes), ISR: ids(p.IsrNodes)})
		}
		slices.SortFunc(ts.Partitions, func(a, b PartitionState) int { return a.ID - b.ID })
		out.Topics = append(out.Topics, ts)
	}
	return out, nil
}

// MinInSync returns each topic's effective min.insync.replicas (describe-configs).
func (a *Admin) MinInSync(ctx context.Context, topics ...Topic) (map[string]int, error) {
	names := make([]string, len(topics))
	res := make([]kafka.DescribeConfigRequestResource, len(topics))
	for i, t := range topics {
		names[i] = t.Name
		res[i] = kafka.DescribeConfigRequestResource{ResourceType: kafka.ResourceTypeTopic, ResourceName: t.Name,
			ConfigNames: []string{"min.insync.replicas"}}
	}
	cfg, err := a.client.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: res})
	if err != nil {
		return nil, fmt.Errorf("configs of %v: %w", names, err)
	}
	minISR := map[string]int{}
	for _, r := range cfg.Resources {
		if r.Error != nil {
			return nil, fmt.Errorf("configs of %s: %w", r.ResourceName, r.Error)
		}
		for _, e := range r.ConfigEntries {
			if e.ConfigName == "min.insync.replicas" {
				minISR[r.ResourceName], _ = strconv.Atoi(e.ConfigValue)
			}
		}
	}
	return minISR, nil
}

// CheckReplication refuses topics whose replication differs from r (fields left zero are
// not checked): every partition must have r.Factor replicas and the topic r.MinInSync as
// its effective min.insync.replicas. EnsureReplicatedTopics leaves an existing topic as it
// is, so a topic created earlier with other settings is caught here, not silently kept.
func (a *Admin) CheckReplication(ctx context.Context, r Replication, topics ...Topic) error {
	states, err := a.Describe(ctx, topics...)
	if err != nil {
		return err
	}
	var bad []string
	for _, t := range states {
		if r.MinInSync > 0 && t.MinInSync != r.MinInSync {
			bad = append(bad, fmt.Sprintf("%s has min.insync.replicas=%d, want %d", t.Name, t.MinInSync, r.MinInSync))
		}
		if r.Factor <= 0 {
			continue
		}
		for _, p := range t.Partitions {
			if len(p.Replicas) != r.Factor {
				bad = append(bad, fmt.Sprintf("%s/%d has %d replicas, want %d", t.Name, p.ID, len(p.Replicas), r.Factor))
			}
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("kafka topic replication differs: %s", strings.Join(bad, "; "))
	}
	return nil
}
