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
	BucketedStocks(ctx context.Context, sessionIDs ...int64) ([]store.PrizeStock, error)
	Ledger(ctx context.Context, sessionID, prizeID int64, n int) ([]seckill.BucketLedger, error)
}

type rebuildGate interface {
	Snapshots(ctx context.Context, ids []seckill.SessionPrize) ([]stock.Snapshot, error)
	Rebuild(ctx context.Context, st seckill.Stock, users map[string]int, outcomes []stock.Settlement, returned []string, expireAt time.Time, fence int64) (bool, error)
	Buckets(ctx context.Context, sessionID, prizeID int64, n int) ([]stock.BucketState, error)
	RebuildBucket(ctx context.Context, st seckill.Stock, b, buckets int, users map[string]int, outcomes []stock.Settlement, returned []string,
		ledger seckill.BucketLedger, expireAt time.Time, fence int64) (bool, error)
}

// stockState reads a session×prize's (or one of its stock buckets') row, orders and returns
// from one snapshot.
type stockState interface {
	State(ctx context.Context, sessionID, prizeID int64) (store.StockState, error)
	BucketState(ctx context.Context, sessionID, prizeID int64, b int) (store.StockState, error)
}

// gatewayHolds says whether gateways still hold admitted grabs of a prize that Kafka has
// not acknowledged (a produce in flight, an event in a relay), from their heartbeats.
type gatewayHolds interface {
	Now(ctx context.Context) (time.Time, error)
	Quiet(ctx context.Context, sessionID, prizeID int64, since time.Time, alive time.Duration) (bool, store.PrizeHold, error)
}

// backlogReader says how many admitted grabs wait on the compensation topic.
type backlogReader interface {
	Backlog(ctx context.Context) (int64, error)
}

// rebuildJob restores the keys of open sessions that Redis lost (restart without data,
// FLUSHALL). Admission for those prizes is paused meanwhile (the gateway answers 503 while
// the key is absent). It rebuilds only once the database it copies holds every admitted
// grab: first every live gateway reported, after the keys were seen missing, that it holds
// no unpublished grab of the prize (so every admitted grab is on Kafka); then the consumers
// caught up on the prize's partition; then the compensation topic is empty. Each check is
// read after the one before, so what passed one is visible to the next.
type rebuildJob struct {
	catalog      rebuildCatalog
	orders       stockState
	gate         rebuildGate
	lag          grabLag
	compensation backlogReader
	gateways     gatewayHolds
	gatewayAlive time.Duration // a gateway whose heartbeat is older is gone (its memory with it)
	grace        time.Duration
	catchUp      time.Duration
	rebuilt      prometheus.Counter
	// transfers finishes the journal before a prize with stock buckets is rebuilt.
	transfers transferExecutor
	log       *slog.Logger
	now       func() time.Time
}

func (rebuildJob) Name() string { return "rebuild" }

func (j rebuildJob) Run(ctx context.Context, fence lease.Fence) (result, error) {
	sum := map[string]int64{"missing": 0, "rebuilt": 0, "waiting_for_gateways": 0, "waiting_for_consumers": 0, "lost_with_gateways": 0}
	now := j.now()
	sc, err := activeScope(ctx, j.catalog, now, 0)
	if err != nil {
		return result{Summary: sum}, err
	}
	var open []scope
	ids := []seckill.SessionPrize{}
	sessions := map[int64]bool{}
	var sessionIDs []int64
	for _, s := range sc {
		if s.session.OpenAt(now) {
			open = append(open, s)
			ids = append(ids, s.stock.SessionPrize())
			if !sessions[s.session.ID] {
				sessions[s.session.ID] = true
				sessionIDs = append(sessionIDs, s.session.ID)
			}
		}
	}
	snaps, err := j.gate.Snapshots(ctx, ids)
	if err != nil {
		return result{Summary: sum}, err
	}
	// A prize with stock buckets is missing when any bucket is: each is rebuilt alone.
	bucketed, err := j.catalog.BucketedStocks(ctx, sessionIDs...)
	if err != nil {
		return result{Summary: sum}, err
	}
	n := map[seckill.SessionPrize]int{}
	for _, p := range bucketed {
		n[seckill.SessionPrize{Session: p.SessionID, Prize: p.PrizeID}] = p.Buckets
	}
	var missing []scope
	for i, s := range open {
		if s.buckets = n[s.stock.SessionPrize()]; s.buckets > 1 {
			bs, err := j.gate.Buckets(ctx, s.stock.SessionID, s.stock.PrizeID, s.buckets)
			if err != nil {
				return result{Summary: sum}, err
			}
			for b, x := range bs {
				if !x.Loaded {
					s.lost = append(s.lost, b)
				}
			}
			if len(s.lost) > 0 {
				missing = append(missing, s)
			}
			continue
		}
		if !snaps[i].Loaded {
			missing = append(missing, s)
		}
	}
	sum["missing"] = int64(len(missing))
	if len(missing) == 0 {
		return result{Summary: sum}, nil
	}
	// MySQL's clock just after the keys were seen missing: a gateway's report stamped later
	// covers every grab of these prizes it admitted (none can be admitted without the keys).
	since, err := j.gateways.Now(ctx)
	if err != nil {
		return result{Summary: sum}, err
	}
	deadline := time.Now().Add(j.catchUp)
	quiet, err := j.waitGatewaysQuiet(ctx, missing, since, deadline, sum)
	if err != nil {
		return result{Summary: sum}, err
	}
	sum["waiting_for_gateways"] = int64(len(missing) - len(quiet))
	ready, err := j.lag.waitCaughtUp(ctx, quiet, time.Until(deadline))
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
		rebuild := j.rebuild
		if s.buckets > 1 {
			rebuild = j.rebuildBuckets
		}
		if err := rebuild(ctx, fence, s); err != nil {
			errs = append(errs, err)
			continue
		}
		sum["rebuilt"]++
	}
	if waiting := sum["waiting_for_gateways"]; waiting > 0 {
		errs = append(errs, fmt.Errorf("%d session×prizes have no keys and gateways still hold unpublished grabs of them; admission stays paused for them", waiting))
	}
	if waiting := len(quiet) - len(ready); waiting > 0 {
		sum["waiting_for_consumers"] = int64(waiting)
		errs = append(errs, fmt.Errorf("%d session×prizes have no keys and their consumers have not caught up yet; admission stays paused for them", waiting))
	}
	return result{Summary: sum}, errors.Join(errs...)
}

// waitGatewaysQuiet polls the gateways' reports until every prize is quiet or the deadline
// passes, and returns the quiet prizes. Grabs held by gateways whose heartbeat stopped are
// counted in lost_with_gateways (logged; they died with the process), not waited for.
func (j rebuildJob) waitGatewaysQuiet(ctx context.Context, prizes []scope, since, deadline time.Time, sum map[string]int64) ([]scope, error) {
	for {
		var quiet []scope
		var lost int64
		for _, s := range prizes {
			ok, hold, err := j.gateways.Quiet(ctx, s.stock.SessionID, s.stock.PrizeID, since, j.gatewayAlive)
			if err != nil {
				return nil, err
			}
			lost += int64(hold.DeadUnsent)
			if ok {
				quiet = append(quiet, s)
			}
		}
		if len(quiet) == len(prizes) || time.Now().After(deadline) {
			if lost > 0 {
				sum["lost_with_gateways"] = lost
				j.log.Error("gateways that stopped without a goodbye held unpublished grabs of prizes whose keys Redis lost; those grabs cannot be recovered",
					"grabs", lost)
			}
			return quiet, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// rebuild copies one session×prize from MySQL into Redis. Stock row, orders and returns are
// read from one snapshot, so a cancellation committing meanwhile is counted whole or not at
// all: its unit is either in left and recorded as returned (a later return finds it done),
// or in neither (its return, made later, adds it). A unit returned after the session ended
// is in MySQL's left but never for sale in Redis.
func (j rebuildJob) rebuild(ctx context.Context, fence lease.Fence, s scope) error {
	state, err := j.orders.State(ctx, s.stock.SessionID, s.stock.PrizeID)
	if err != nil {
		return err
	}
	st, orders := state.Stock, state.Orders
	users, returned := rebuildCounts(state, &st)
	// The Redis script refuses a fence older than one that already wrote these keys; this
	// check also refuses when a newer holder exists but has not touched them yet.
	if err := fence.Check(ctx); err != nil {
		return err
	}
	created, err := j.gate.Rebuild(ctx, st, users, settleOf(st.SessionID, st.PrizeID, orders).Items, returned, s.session.End.Add(j.grace), fence.Number)
	if err != nil || !created {
		return err
	}
	j.rebuilt.Inc()
	sid, pid, after := st.SessionID, st.PrizeID, int64(st.Left)
	j.log.Warn("redis keys rebuilt from mysql", "session_id", sid, "prize_id", pid, "left", st.Left, "orders", len(orders))
	return j.catalog.Record(ctx, store.AuditEntry{Actor: "reconciler", Action: "rebuild_redis_stock", SessionID: &sid,
		PrizeID: &pid, After: &after, Detail: fmt.Sprintf("keys missing; rebuilt from %d orders after consumers caught up", len(orders)),
		Fence: &fence})
}

// rebuildCounts returns what the orders of a stock state put in Redis: per-user counts of
// the slots held, the request ids of the units returned for resale, and st's left lowered by
// the units returned but not for resale (in MySQL's left, never for sale in Redis).
func rebuildCounts(state store.StockState, st *seckill.Stock) (map[string]int, []string) {
	users := map[string]int{}
	var returned []string
	for _, o := range state.Orders {
		if o.HoldsSlot {
			users[o.UserID]++
		}
		if o.Status != seckill.OrderCancelled {
			continue
		}
		if state.Resale[o.RequestID] {
			returned = append(returned, o.RequestID)
		} else {
			st.Left--
		}
	}
	return users, returned
}

// rebuildBuckets rebuilds the lost stock buckets of a prize (docs/design.md), each from its
// row, the orders it admitted (orders.bucket) and its ledger of the transfers journal. The
// journal's unfinished transfers are finished first, in this goroutine (the lease holder's
// rebalance loop waits for the run): lua/rebuild.lua does not check the revision, so a row
// read before a move whose give then found no key would miss the moved units. One still
// unfinished (an error) is safe to rebuild over: the ledger leaves a planned one out (its
// units are still in the source row, which the restarted take takes from) and counts a
// moved one as given (the destination row holds its units; the give is then a repeat).
func (j rebuildJob) rebuildBuckets(ctx context.Context, fence lease.Fence, s scope) error {
	var errs []error
	if _, err := j.transfers.resume(ctx, fence); err != nil {
		if staleFence(err) {
			return err
		}
		errs = append(errs, fmt.Errorf("resume transfers before rebuilding buckets: %w", err))
	}
	sid, pid := s.stock.SessionID, s.stock.PrizeID
	ledger, err := j.catalog.Ledger(ctx, sid, pid, s.buckets)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, b := range s.lost {
		state, err := j.orders.BucketState(ctx, sid, pid, b)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		st := state.Stock
		users, returned := rebuildCounts(state, &st)
		if err := fence.Check(ctx); err != nil {
			return errors.Join(append(errs, err)...)
		}
		created, err := j.gate.RebuildBucket(ctx, st, b, s.buckets, users, settleOf(sid, pid, state.Orders).Items, returned, ledger[b],
			s.session.End.Add(j.grace), fence.Number)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !created {
			continue
		}
		j.rebuilt.Inc()
		after := int64(st.Left)
		j.log.Warn("redis keys of a stock bucket rebuilt from mysql", "session_id", sid, "prize_id", pid, "bucket", b, "left", st.Left, "orders", len(state.Orders))
		if err := j.catalog.Record(ctx, store.AuditEntry{Actor: "reconciler", Action: "rebuild_redis_stock", SessionID: &sid,
			PrizeID: &pid, After: &after, Detail: fmt.Sprintf("bucket %d keys missing; rebuilt from %d orders and the transfers journal after consumers caught up", b, len(state.Orders)),
			Fence: &fence}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
