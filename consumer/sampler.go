package main

import (
	"context"
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/event"
)

// groupLag is what the sampler needs from pkg/event's Admin.
type groupLag interface {
	Lag(ctx context.Context, group string, t event.Topic) (map[int]int64, error)
}

// pendingCounter is what the sampler needs from the outbox.
type pendingCounter interface {
	CountPending(ctx context.Context) (int64, error)
}

// sampler keeps the gauges that must tell the truth when processing stalls: a value set
// after each batch freezes exactly when no batch completes. It reads them from the servers
// instead, on every instance: the group's lag from the broker (end offset − committed
// offset per partition, so a stalled or dead member's partitions show their backlog) and
// the outbox's pending count from MySQL (so it is right whichever instance holds the relay
// lock). Every instance reports the same values; dashboards aggregate with max.
type sampler struct {
	lag     groupLag
	group   string
	topic   event.Topic
	outbox  pendingCounter
	every   time.Duration
	metrics *metrics
	log     *slog.Logger
}

// Run samples at once and then every s.every until ctx ends.
func (s *sampler) Run(ctx context.Context) error {
	tick := time.NewTicker(s.every)
	defer tick.Stop()
	for {
		s.sample(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func (s *sampler) sample(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.every)
	defer cancel()
	lag, err := s.lag.Lag(ctx, s.group, s.topic)
	// Unknown is shown as absent, never as the last value read: a frozen number is what
	// this sampler exists to avoid.
	s.metrics.lag.Reset()
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("consumer lag unreadable", "error", err.Error())
		}
	} else {
		for p, n := range lag {
			s.metrics.lag.WithLabelValues(strconv.Itoa(p)).Set(float64(n))
		}
	}
	n, err := s.outbox.CountPending(ctx)
	if err != nil {
		s.metrics.outboxPending.Set(math.NaN()) // a scalar gauge cannot be absent; NaN is "unknown"
		if ctx.Err() == nil {
			s.log.Warn("outbox pending count unreadable", "error", err.Error())
		}
		return
	}
	s.metrics.outboxPending.Set(float64(n))
}
