package event_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/event"
)

// ensureOwnTopics creates the pipeline's topics under a prefix of the test's own, with r,
// and deletes them when the test ends.
func ensureOwnTopics(t *testing.T, brokers []string, r event.Replication) (*event.Admin, event.Topics, context.Context) {
	t.Helper()
	admin, err := event.NewAdmin(brokers, event.AdminSecurity(stacktest.KafkaSecurity(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := stacktest.Context(t, 60*time.Second)
	topics := event.DefaultTopics("t" + stacktest.ID(t))
	t.Cleanup(func() {
		var names []string
		for _, tp := range topics.All() {
			names = append(names, tp.Name)
		}
		_ = admin.DeleteTopics(context.Background(), names...)
	})
	if err := admin.EnsureReplicatedTopics(ctx, r, topics.All()...); err != nil {
		t.Fatal(err)
	}
	return admin, topics, ctx
}

// On the single-node stack: topics created with one replica pass a check for one and fail
// a check for three (so the cluster's check cannot pass on a single broker's topics).
func TestReplicationCheckedOnSingleBroker(t *testing.T) {
	brokers, _ := stacktest.Kafka(t) // skips without the stack
	if len(brokers) > 1 {
		t.Skip("the stack's brokers are a cluster")
	}
	admin, topics, ctx := ensureOwnTopics(t, brokers, event.Replication{Factor: 1, MinInSync: 1})
	if err := admin.CheckReplication(ctx, event.Replication{Factor: 1, MinInSync: 1}, topics.All()...); err != nil {
		t.Fatal(err)
	}
	err := admin.CheckReplication(ctx, event.Replication{Factor: 3, MinInSync: 2}, topics.Grab)
	if err == nil || !strings.Contains(err.Error(), "has 1 replicas, want 3") || !strings.Contains(err.Error(), "min.insync.replicas=1, want 2") {
		t.Fatalf("RF 1 topic checked for RF 3 / min ISR 2: %v", err)
	}
}

// On the cluster profile: the pipeline's topics with three replicas on three brokers, all
// in sync, min.insync.replicas 2; and topics created with the brokers' defaults (what tests
// and the harness do) are replicated the same way.
func TestReplicatedTopicsOnCluster(t *testing.T) {
	brokers := stacktest.ClusterKafka(t)
	want := event.Replication{Factor: 3, MinInSync: 2}
	for _, r := range []event.Replication{want, {}} {
		admin, topics, ctx := ensureOwnTopics(t, brokers, r)
		if err := admin.CheckReplication(ctx, want, topics.All()...); err != nil {
			t.Fatalf("created with %+v: %v", r, err)
		}
		states, err := admin.Describe(ctx, topics.Grab)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range states[0].Partitions {
			if len(p.ISR) != 3 || p.Leader < 1 || p.Leader > 3 {
				t.Errorf("created with %+v: partition %d leader %d isr %v, want a leader among 1-3 and three in sync", r, p.ID, p.Leader, p.ISR)
			}
		}
	}
}

// The health the reconciler exports, from metadata: brokers named as replicas but not alive
// are down; a partition is under-replicated with fewer in-sync replicas than replicas, and
// refuses acks=all writes below min.insync.replicas or without a leader.
func TestClusterHealth(t *testing.T) {
	c := event.ClusterState{Brokers: []int{1, 3}, Topics: []event.TopicState{
		{Name: "a", MinInSync: 2, Partitions: []event.PartitionState{
			{ID: 0, Leader: 1, Replicas: []int{1, 2, 3}, ISR: []int{1, 2, 3}}, // healthy
			{ID: 1, Leader: 1, Replicas: []int{1, 2, 3}, ISR: []int{1, 3}},    // under-replicated, writable
			{ID: 2, Leader: 3, Replicas: []int{2, 3, 4}, ISR: []int{3}},       // below min ISR
		}},
		{Name: "b", MinInSync: 0, Partitions: []event.PartitionState{ // min ISR unknown
			{ID: 0, Leader: -1, Replicas: []int{2}, ISR: []int{2}}, // no leader: refuses writes
		}},
	}}
	if got := c.Down(); !slices.Equal(got, []int{2, 4}) {
		t.Errorf("Down() = %v, want [2 4]", got)
	}
	for _, tc := range []struct {
		topic              int
		under, belowMinISR int
	}{{0, 2, 1}, {1, 0, 1}} {
		tp := c.Topics[tc.topic]
		if got := tp.UnderReplicated(); got != tc.under {
			t.Errorf("%s: UnderReplicated() = %d, want %d", tp.Name, got, tc.under)
		}
		if got := tp.BelowMinInSync(); got != tc.belowMinISR {
			t.Errorf("%s: BelowMinInSync() = %d, want %d", tp.Name, got, tc.belowMinISR)
		}
	}
}

// On the single-node stack a topic whose min.insync.replicas exceeds its one replica still
// takes writes (Kafka 4 caps the minimum at the replica count): Cluster and MinInSync read it
// so, and name the broker alive.
func TestClusterSeesMinInSyncAboveReplicas(t *testing.T) {
	brokers, _ := stacktest.Kafka(t) // skips without the stack
	if len(brokers) > 1 {
		t.Skip("the stack's brokers are a cluster")
	}
	admin, topics, ctx := ensureOwnTopics(t, brokers, event.Replication{Factor: 1, MinInSync: 2})
	c, err := admin.Cluster(ctx, topics.Grab)
	if err != nil {
		t.Fatal(err)
	}
	minISR, err := admin.MinInSync(ctx, topics.Grab)
	if err != nil {
		t.Fatal(err)
	}
	if minISR[topics.Grab.Name] != 2 {
		t.Fatalf("min.insync.replicas read as %v, want 2", minISR)
	}
	c.Topics[0].MinInSync = minISR[topics.Grab.Name]
	if len(c.Brokers) != 1 || len(c.Down()) != 0 || len(c.Topics[0].Partitions) != topics.Grab.Partitions {
		t.Errorf("brokers %v, down %v, %d partitions: want one alive, none down, %d partitions", c.Brokers, c.Down(), len(c.Topics[0].Partitions), topics.Grab.Partitions)
	}
	if below, under := c.Topics[0].BelowMinInSync(), c.Topics[0].UnderReplicated(); below != 0 || under != 0 {
		t.Errorf("below min ISR %d, under-replicated %d: want 0 and 0", below, under)
	}
	// The broker agrees: an acks=all write goes through.
	w, err := event.NewGrabWriter(brokers, topics.Grab.Name, event.WithSecurity(stacktest.KafkaSecurity(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.WriteMessages(ctx, kafka.Message{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatalf("acks=all write to a topic with min ISR 2 and one replica: %v", err)
	}
}
