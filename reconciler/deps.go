package main

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// The reconciler's jobs share these views of the gate, the store and Kafka; each is the
// smallest set of calls the jobs make.

type gateOps interface {
	View(ctx context.Context, sessionID, prizeID int64) (stock.View, error)
	Reservations(ctx context.Context, sessionID, prizeID int64) ([]stock.Reservation, error)
	Snapshots(ctx context.Context, ids [][2]int64) ([]stock.Snapshot, error)
	CorrectLeft(ctx context.Context, sessionID, prizeID, from, to int64) error
	Rebuild(ctx context.Context, st seckill.Stock, users map[string]int, outcomes []stock.Settlement, expireAt time.Time) (bool, error)
	Settle(ctx context.Context, batches []stock.SettleBatch) (int64, error)
	Remove(ctx context.Context, sessionID, prizeID int64) error
}

type orderOps interface {
	Persist(ctx context.Context, sessionID, prizeID int64, grabs []seckill.Grab, now time.Time) (store.PersistResult, error)
	Existing(ctx context.Context, requestIDs []string) (map[string]seckill.Order, error)
	ForStock(ctx context.Context, sessionID, prizeID int64) ([]seckill.Order, error)
	CountsFor(ctx context.Context, sessionID, prizeID int64) (store.Counts, error)
}

type catalogOps interface {
	SessionsOverlapping(ctx context.Context, from, to time.Time) ([]seckill.Session, error)
	Stocks(ctx context.Context, sessionIDs ...int64) ([]seckill.Stock, error)
	Stock(ctx context.Context, sessionID, prizeID int64) (seckill.Stock, error)
	Record(ctx context.Context, e store.AuditEntry) error
	SaveReport(ctx context.Context, r store.SessionReport) (bool, error)
	Reported(ctx context.Context, sessionID, prizeID int64) (bool, error)
	DriftCorrections(ctx context.Context, sessionID, prizeID int64) (int, error)
}

type lagReader interface {
	Lag(ctx context.Context, group string, t event.Topic) (map[int]int64, error)
}

type producer interface {
	WriteMessages(ctx context.Context, msgs ...kafka.Message) error
}

// inFlight answers "could events of this session×prize still be on their way to MySQL?"
// from the consumer group's lag on the prize's grab partition, read once per job run.
type inFlight struct {
	lag        map[int]int64
	partitions int
}

func loadInFlight(ctx context.Context, l lagReader, group string, grab event.Topic) (inFlight, error) {
	lag, err := l.Lag(ctx, group, grab)
	if err != nil {
		return inFlight{}, fmt.Errorf("consumer lag: %w", err)
	}
	return inFlight{lag: lag, partitions: grab.Partitions}, nil
}

func (f inFlight) pending(sessionID, prizeID int64) int64 {
	return f.lag[event.PartitionOf(event.PartitionKey(sessionID, prizeID), f.partitions)]
}

// waitCaughtUp polls the consumer lag until every given prize's partition is at 0 or wait
// passes, and returns the prizes that caught up.
func waitCaughtUp(ctx context.Context, l lagReader, group string, grab event.Topic, prizes []scope, wait time.Duration) ([]scope, error) {
	deadline := time.Now().Add(wait)
	for {
		f, err := loadInFlight(ctx, l, group, grab)
		if err != nil {
			return nil, err
		}
		var ready []scope
		for _, s := range prizes {
			if f.pending(s.stock.SessionID, s.stock.PrizeID) == 0 {
				ready = append(ready, s)
			}
		}
		if len(ready) == len(prizes) || time.Now().After(deadline) {
			return ready, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// scope is what the drift, stale and rebuild jobs look at: the session×prizes of sessions
// that have started and ended no longer than grace ago.
type scope struct {
	session seckill.Session
	stock   seckill.Stock
}

func activeScope(ctx context.Context, c catalogOps, now time.Time, grace time.Duration) ([]scope, error) {
	sessions, err := c.SessionsOverlapping(ctx, now.Add(-grace), now.Add(time.Nanosecond))
	if err != nil {
		return nil, err
	}
	byID := map[int64]seckill.Session{}
	var ids []int64
	for _, s := range sessions {
		if !now.Before(s.Start) {
			byID[s.ID] = s
			ids = append(ids, s.ID)
		}
	}
	stocks, err := c.Stocks(ctx, ids...)
	if err != nil {
		return nil, err
	}
	out := make([]scope, len(stocks))
	for i, st := range stocks {
		out[i] = scope{session: byID[st.SessionID], stock: st}
	}
	return out, nil
}

// reconcilerMetrics are the job-level series (the runner has its own).
type reconcilerMetrics struct {
	driftFound     *prometheus.CounterVec
	driftCorrected *prometheus.CounterVec
	drift          *prometheus.GaugeVec
	republished    prometheus.Counter
	settled        prometheus.Counter
	replayed       *prometheus.CounterVec
	backlog        prometheus.Gauge
	rebuilt        prometheus.Counter
}

func newReconcilerMetrics(reg prometheus.Registerer) *reconcilerMetrics {
	m := &reconcilerMetrics{
		driftFound: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "seckill_reconciler_drift_found_total",
			Help: "Session×prizes whose Redis stock differed from MySQL's, by direction (redis_high, redis_low)."}, []string{"direction"}),
		driftCorrected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "seckill_reconciler_drift_corrected_total",
			Help: "Drift corrections applied to Redis, by direction."}, []string{"direction"}),
		drift: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "seckill_reconciler_drift",
			Help: "Redis left minus expected left, per session×prize, at the last check."}, []string{"session_id", "prize_id"}),
		republished: prometheus.NewCounter(prometheus.CounterOpts{Name: "seckill_reconciler_stale_republished_total",
			Help: "Stale reservations re-published to the grab topic."}),
		settled: prometheus.NewCounter(prometheus.CounterOpts{Name: "seckill_reconciler_stale_settled_total",
			Help: "Reservations whose order existed, settled in Redis by the reconciler."}),
		replayed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "seckill_reconciler_compensation_replayed_total",
			Help: "Compensation events replayed, by result (succeeded, rejected, existing)."}, []string{"result"}),
		backlog: prometheus.NewGauge(prometheus.GaugeOpts{Name: "seckill_reconciler_compensation_backlog",
			Help: "Compensation events not replayed yet."}),
		rebuilt: prometheus.NewCounter(prometheus.CounterOpts{Name: "seckill_reconciler_keys_rebuilt_total",
			Help: "Session×prize keys rebuilt in Redis from MySQL after a loss."}),
	}
	reg.MustRegister(m.driftFound, m.driftCorrected, m.drift, m.republished, m.settled, m.replayed, m.backlog, m.rebuilt)
	return m
}
