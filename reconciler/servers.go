package main

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/event"
)

// mysqlProbe reads whether MySQL answers and takes writes (store.Ping and store.ReadOnly).
type mysqlProbe struct {
	ping     func(ctx context.Context) error
	readOnly func(ctx context.Context) (bool, error)
}

// kafkaHealth reads the cluster's metadata and the topics' min.insync.replicas: *event.Admin.
type kafkaHealth interface {
	Cluster(ctx context.Context, topics ...event.Topic) (event.ClusterState, error)
	MinInSync(ctx context.Context, topics ...event.Topic) (map[string]int, error)
}

// serverGauges exports the servers' health as the pipeline sees it, so the alerts need no
// exporter of their own: whether MySQL answers and takes writes (a read-only server makes
// every order wait), whether Kafka answers, which brokers holding the pipeline's partitions
// are down, and per topic the partitions that are under-replicated or refuse acks=all
// writes. It only reads, so it runs on every instance outside the lease, every interval;
// unknown values are absent (or NaN), never the last value read.
type serverGauges struct {
	mysql   mysqlProbe
	kafka   kafkaHealth
	topics  []event.Topic
	every   time.Duration
	metrics *serverMetrics
	log     *slog.Logger

	minISRRefused bool // logged once: the principal may lack DescribeConfigs on the topics
}

// Run samples at once and then every g.every until ctx ends.
func (g *serverGauges) Run(ctx context.Context) error {
	sampleEvery(ctx, g.every, g.sample, func(err error) {
		g.log.Warn("server health unreadable", "error", err.Error())
	})
	return nil
}

// sample reads MySQL and Kafka; both are always sampled, and both errors are reported.
func (g *serverGauges) sample(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, g.every)
	defer cancel()
	return errors.Join(g.sampleMySQL(ctx), g.sampleKafka(ctx))
}

func (g *serverGauges) sampleMySQL(ctx context.Context) error {
	if err := g.mysql.ping(ctx); err != nil {
		g.metrics.mysqlUp.Set(0)
		g.metrics.mysqlReadOnly.Set(math.NaN())
		return err
	}
	ro, err := g.mysql.readOnly(ctx)
	if err != nil {
		// It answered the ping but not the query: not a server that works for us.
		g.metrics.mysqlUp.Set(0)
		g.metrics.mysqlReadOnly.Set(math.NaN())
		return err
	}
	g.metrics.mysqlUp.Set(1)
	g.metrics.mysqlReadOnly.Set(b2f(ro))
	return nil
}

func (g *serverGauges) sampleKafka(ctx context.Context) error {
	c, err := g.kafka.Cluster(ctx, g.topics...)
	if err != nil {
		g.metrics.kafkaUp.Set(0)
		g.metrics.brokersDown.Set(math.NaN())
		g.metrics.underReplicated.Reset()
		g.metrics.belowMinISR.Reset()
		return err
	}
	g.metrics.kafkaUp.Set(1)
	g.metrics.brokersDown.Set(float64(len(c.Down())))
	// Without min.insync.replicas (refused, or its request failed) only partitions without
	// a leader count as refusing writes; the rest of the view stands.
	minISR, err := g.kafka.MinInSync(ctx, g.topics...)
	if err != nil {
		minISR = nil
		if !g.minISRRefused {
			g.minISRRefused = true
			g.log.Warn("topics' min.insync.replicas unreadable (DescribeConfigs on the topics); partitions below it are not detected", "error", err.Error())
		}
	}
	for _, t := range c.Topics {
		t.MinInSync = minISR[t.Name]
		g.metrics.underReplicated.WithLabelValues(t.Name).Set(float64(t.UnderReplicated()))
		g.metrics.belowMinISR.WithLabelValues(t.Name).Set(float64(t.BelowMinInSync()))
	}
	return nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
