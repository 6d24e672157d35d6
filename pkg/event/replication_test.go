package event_test

import (
	"context"
	"strings"
	"testing"
	"time"

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
