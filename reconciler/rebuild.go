package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

type rebuildCatalog interface {
	sessionLister
	Stock(ctx context.Context, sessionID, prizeID int64) (seckill.Stock, error)
	Record(ctx context.Context, e store.AuditEntry) error
}

type rebuildGate interface {
	Snapshots(ctx context.Context, ids [][2]int64) ([]stock.Snapshot, error)
	Rebuild(ctx context.Context, st seckill.Stock, users map[string]int, outcomes []stock.Settlement, expireAt time.Time, fence int64) (bool, error)
}

type stockOrders interface {
	ForStock(ctx context.Context, sessionID, prizeID int64) ([]seckill.Order, error)
}

// backlogReader says how many admitted grabs wait on the compensation topic.
type backlogReader interface {
	Backlog(ctx context.Context) (int64, error)
}

// rebuildJob restores the keys of open sessions that Redis lost (restart without data,
// FLUSHALL). Admission for those prizes is paused meanwhile (the gateway answers 503 while
// the key is absent). It rebuilds only once the database it copies holds every admitted
// grab that reached Kafka: the consumers caught up on the prize's partition, and then the
// compensation topic is empty.
type rebuildJob struct {
	catalog      rebuildCatalog
	orders       stockOrders
	gate         rebuildGate
	lag          grabLag
	compensation backlogReader
	grace        time.Duration
	catchUp      time.Duration
	rebuilt      prometheus.Counter
	log          *slog.Logger
	now          func() time.Time
}

func newRebuiltCounter(reg prometheus.Registerer) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "seckill_reconciler_keys_rebuilt_total",
		Help: "Session×prize keys rebuilt in Redis from MySQL after a loss."})
	reg.MustRegister(c)
	return c
}

func (rebuildJob) Name() string { return "rebuild" }

func (j rebuildJob) Run(ctx context.Context, fence lease.Fence) (result, error) {
	sum := map[string]int64{"missing": 0, "rebuilt": 0, "waiting_for_consumers": 0}
	now := j.now()
	sc, err := activeScope(ctx, j.catalog, now, 0)
	if err != nil {
		return result{Summary: sum}, err
	}
	var open []scope
	ids := [][2]int64{}
	for _, s := range sc {
		if s.session.OpenAt(now) {
			open = append(open, s)
			ids = append(ids, [2]int64{s.stock.SessionID, s.stock.PrizeID})
		}
	}
	snaps, err := j.gate.Snapshots(ctx, ids)
	if err != nil {
		return result{Summary: sum}, err
	}
	var missing []scope
	for i, s := range open {
		if !snaps[i].Loaded {
			missing = append(missing, s)
		}
	}
	sum["missing"] = int64(len(missing))
	if len(missing) == 0 {
		return result{Summary: sum}, nil
	}
	ready, err := j.lag.waitCaughtUp(ctx, missing, j.catchUp)
	if err != nil {
		return result{Summary: sum}, err
	}
	// The compensation backlog is read after the grab partitions were seen caught up, not
	// before the wait: a consumer commits a grab offset only after that grab is in MySQL or
	// acknowledged on the compensation topic, so every grab consumed before the lag read is
	// visible in this read. Grabs waiting there are admitted but not in MySQL: rebuilding
	// before they are replayed would hand their stock out a second time.
	backlog, err := j.compensation.Backlog(ctx)
	if err != nil {
		sum["waiting_for_consumers"] = int64(len(missing))
		return result{Summary: sum}, fmt.Errorf("compensation backlog unknown, keys not rebuilt: %w", err)
	}
	if backlog > 0 {
		sum["waiting_for_consumers"] = int64(len(missing))
		return result{Summary: sum}, fmt.Errorf("%d session×prizes have no keys; waiting for %d compensation events to be replayed", len(missing), backlog)
	}
	var errs []error
	for _, s := range ready {
		if err := j.rebuild(ctx, fence, s); err != nil {
			errs = append(errs, err)
			continue
		}
		sum["rebuilt"]++
	}
	if waiting := len(missing) - len(ready); waiting > 0 {
		sum["waiting_for_consumers"] = int64(waiting)
		errs = append(errs, fmt.Errorf("%d session×prizes have no keys and their consumers have not caught up yet; admission stays paused for them", waiting))
	}
	return result{Summary: sum}, errors.Join(errs...)
}

func (j rebuildJob) rebuild(ctx context.Context, fence lease.Fence, s scope) error {
	st, err := j.catalog.Stock(ctx, s.stock.SessionID, s.stock.PrizeID)
	if err != nil {
		return err
	}
	orders, err := j.orders.ForStock(ctx, st.SessionID, st.PrizeID)
	if err != nil {
		return err
	}
	users := map[string]int{}
	for _, o := range orders {
		if o.Status == seckill.OrderSucceeded {
			users[o.UserID]++
		}
	}
	// The Redis script refuses a fence older than one that already wrote these keys; this
	// check also refuses when a newer holder exists but has not touched them yet.
	if err := fence.Check(ctx); err != nil {
		return err
	}
	created, err := j.gate.Rebuild(ctx, st, users, settleOf(st.SessionID, st.PrizeID, orders).Items, s.session.End.Add(j.grace), fence.Number)
	if err != nil || !created {
		return err
	}
	j.rebuilt.Inc()
	sid, pid, after := st.SessionID, st.PrizeID, int64(st.Left)
	j.log.Warn("redis keys rebuilt from mysql", "session_id", sid, "prize_id", pid, "left", st.Left, "orders", len(orders))
	return j.catalog.Record(ctx, store.AuditEntry{Actor: "reconciler", Action: "rebuild_redis_stock", SessionID: &sid,
		PrizeID: &pid, After: &after, Detail: fmt.Sprintf("keys missing; rebuilt from %d orders after consumers caught up", len(orders)),
		Fence: &store.Fence{Lease: fence.Name, Number: fence.Number}})
}
