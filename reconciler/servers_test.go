package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seckill-pipeline/seckill/pkg/event"
)

type fakeKafkaHealth struct {
	cluster   event.ClusterState
	err       error
	minISR    map[string]int
	minISRErr error
}

func (f *fakeKafkaHealth) Cluster(context.Context, ...event.Topic) (event.ClusterState, error) {
	return f.cluster, f.err
}

func (f *fakeKafkaHealth) MinInSync(context.Context, ...event.Topic) (map[string]int, error) {
	return f.minISR, f.minISRErr
}

// The server gauges say what the alerts need, and unknown is never shown as healthy: an
// unreachable MySQL is down with read_only unknown, an unreachable Kafka is down with no
// partition series, and a refused min.insync.replicas still counts leaderless partitions.
func TestServerGauges(t *testing.T) {
	var pingErr, roErr error
	readOnly := false
	kafka := &fakeKafkaHealth{
		cluster: event.ClusterState{Brokers: []int{1, 2}, Topics: []event.TopicState{{Name: "g", Partitions: []event.PartitionState{
			{ID: 0, Leader: 1, Replicas: []int{1, 2, 3}, ISR: []int{1}},
			{ID: 1, Leader: -1, Replicas: []int{3}, ISR: []int{3}},
			{ID: 2, Leader: 2, Replicas: []int{1, 2}, ISR: []int{1, 2}},
		}}}},
		minISR: map[string]int{"g": 2},
	}
	m := newServerMetrics(prometheus.NewRegistry())
	g := &serverGauges{
		mysql: mysqlProbe{ping: func(context.Context) error { return pingErr },
			readOnly: func(context.Context) (bool, error) { return readOnly, roErr }},
		kafka: kafka, topics: []event.Topic{{Name: "g", Partitions: 3}}, every: 1e9, metrics: m,
		log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	check := func(name string, c prometheus.Collector, want float64) {
		t.Helper()
		got := testutil.ToFloat64(c)
		if got != want && !(math.IsNaN(want) && math.IsNaN(got)) {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	for _, step := range []struct {
		name                   string
		setup                  func()
		mysqlUp, ro            float64
		kafkaUp, down          float64
		under, below, topicSer int
	}{
		{"healthy", func() {}, 1, 0, 1, 1, 1, 2, 1},
		{"read-only", func() { readOnly = true }, 1, 1, 1, 1, 1, 2, 1},
		{"mysql unreachable", func() { pingErr = errors.New("refused") }, 0, math.NaN(), 1, 1, 1, 2, 1},
		{"query refused after the ping", func() { pingErr, roErr = nil, errors.New("gone") }, 0, math.NaN(), 1, 1, 1, 2, 1},
		{"min ISR refused: leaderless only", func() { roErr, readOnly, kafka.minISRErr = nil, false, errors.New("denied") }, 1, 0, 1, 1, 1, 1, 1},
		{"kafka unreachable", func() { kafka.err = errors.New("refused") }, 1, 0, 0, math.NaN(), 0, 0, 0},
	} {
		step.setup()
		_ = g.sample(context.Background())
		t.Run(step.name, func(t *testing.T) {
			check("mysql_up", m.mysqlUp, step.mysqlUp)
			check("mysql_read_only", m.mysqlReadOnly, step.ro)
			check("kafka_up", m.kafkaUp, step.kafkaUp)
			check("brokers_down", m.brokersDown, step.down)
			if n := testutil.CollectAndCount(m.belowMinISR); n != step.topicSer {
				t.Fatalf("%d below-min-ISR series, want %d", n, step.topicSer)
			}
			if step.topicSer > 0 {
				check("under_replicated", m.underReplicated.WithLabelValues("g"), float64(step.under))
				check("below_min_isr", m.belowMinISR.WithLabelValues("g"), float64(step.below))
			}
		})
	}
}
