package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// The rebalance loop (docs/design.md): every SECKILL_BUCKET_REBALANCE_INTERVAL, for the
// prizes with stock buckets of the open sessions, it takes the reconciler's lease, finishes
// the journal's unfinished transfers, reads every bucket of each prize in one pipelined
// round trip and moves units where the policy (rebalance) says, by journaled transfers.

// bucketReading is one bucket as a round reads it: its Redis stock and the gateways' signals.
type bucketReading struct {
	stock.BucketState
	Demand int64 // grabs answered since the last round (read and reset)
	Wanted bool  // a gateway found the bucket dry while units remained elsewhere
}

// bucketReader reads the n buckets of a session×prize for one round. It is the one place
// that knows where the gateways write demand and wanted flags.
type bucketReader interface {
	read(ctx context.Context, sessionID, prizeID int64, n int) ([]bucketReading, error)
}

// redisBuckets reads buckets from Redis: per bucket its state, GETDEL of its demand
// counter (so an increment lands in this round or the next, never in both) and EXISTS of
// its wanted flag (left to expire), all in one pipeline.
type redisBuckets struct{ rdb redis.UniversalClient }

func (r redisBuckets) read(ctx context.Context, sessionID, prizeID int64, n int) ([]bucketReading, error) {
	states := make([]*redis.SliceCmd, n)
	demand := make([]*redis.StringCmd, n)
	wanted := make([]*redis.IntCmd, n)
	_, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for b := range n {
			k := stock.BucketKeysFor(sessionID, prizeID, b, n)
			states[b] = stock.ReadBucketState(ctx, p, sessionID, prizeID, b, n)
			demand[b] = p.GetDel(ctx, k.Demand())
			wanted[b] = p.Exists(ctx, k.Wanted())
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read %d buckets of session %d prize %d: %w", n, sessionID, prizeID, err)
	}
	out := make([]bucketReading, n)
	for b := range n {
		d, err := demand[b].Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("demand of bucket %d of session %d prize %d: %w", b, sessionID, prizeID, err)
		}
		out[b] = bucketReading{BucketState: stock.BucketStateOf(states[b]), Demand: d, Wanted: wanted[b].Val() > 0}
	}
	return out, nil
}

// rebalanceCatalog is what the loop needs from MySQL.
type rebalanceCatalog interface {
	transferCatalog
	SessionsOverlapping(ctx context.Context, from, to time.Time) ([]seckill.Session, error)
	BucketedStocks(ctx context.Context, sessionIDs ...int64) ([]store.PrizeStock, error)
}

// rebalancer makes rounds; rebalanceLoop schedules them under the lease.
type rebalancer struct {
	catalog rebalanceCatalog
	reader  bucketReader
	exec    transferExecutor
	metrics *rebalanceMetrics
}

// roundStats is what one round did.
type roundStats struct {
	Resumed, Prizes, Skipped, NotLoaded, Transfers, Units, Wanted int64
}

// bucketedLister is what the list of bucketed prizes is read from (MySQL).
type bucketedLister interface {
	SessionsOverlapping(ctx context.Context, from, to time.Time) ([]seckill.Session, error)
	BucketedStocks(ctx context.Context, sessionIDs ...int64) ([]store.PrizeStock, error)
}

// bucketedPrizes keeps the list of bucketed prizes between rounds, so the loop does not
// query MySQL every SECKILL_BUCKET_REBALANCE_INTERVAL when nothing, or nothing bucketed, is
// open (the common case: one statement per refresh instead of one or two per round). Each
// refresh reads the sessions open at any moment until the next one, and their bucketed
// prizes; every round keeps those of the sessions open at that moment, so a session known
// ahead starts and stops being rebalanced on time. What changes in MySQL between two
// refreshes (an activity created to start within the period, a session closed early) is
// seen at the next: a newly opened bucketed prize waits at most one period. Its total, the
// only figure a round uses (for the low-water mark, 2 % of the stock per bucket), may lag a
// stock adjustment by as long: the mark is then off by 2 % of the adjustment for a moment.
type bucketedPrizes struct {
	every time.Duration // how long a list is kept (SECKILL_BUCKET_PRIZES_REFRESH); 0: never

	read     bool
	at       time.Time
	sessions map[int64]seckill.Session
	prizes   []store.PrizeStock
}

// open returns the bucketed prizes of the sessions open at now, from the kept list when it
// is younger than the period, else read again from l. A failed read keeps nothing.
func (c *bucketedPrizes) open(ctx context.Context, l bucketedLister, now time.Time) ([]store.PrizeStock, error) {
	if !c.read || c.every <= 0 || now.Before(c.at) || now.Sub(c.at) >= c.every {
		c.read = false
		sessions, err := l.SessionsOverlapping(ctx, now, now.Add(c.every+time.Nanosecond))
		if err != nil {
			return nil, err
		}
		c.sessions = make(map[int64]seckill.Session, len(sessions))
		ids := make([]int64, 0, len(sessions))
		for _, s := range sessions {
			if s.ClosedAt != nil && !now.Before(*s.ClosedAt) {
				continue
			}
			c.sessions[s.ID] = s
			ids = append(ids, s.ID)
		}
		c.prizes = nil
		if len(ids) > 0 {
			if c.prizes, err = l.BucketedStocks(ctx, ids...); err != nil {
				return nil, err
			}
		}
		c.read, c.at = true, now
	}
	var out []store.PrizeStock
	for _, p := range c.prizes {
		if s, ok := c.sessions[p.SessionID]; ok && s.OpenAt(now) {
			out = append(out, p)
		}
	}
	return out, nil
}

// round finishes the journal's unfinished transfers, then plans and runs transfers for
// every prize with none left unfinished. It stops at a stale fence.
func (r rebalancer) round(ctx context.Context, f lease.Fence, prizes []store.PrizeStock) (roundStats, error) {
	var st roundStats
	var errs []error
	n, err := r.exec.resume(ctx, f)
	st.Resumed = int64(n)
	if err != nil {
		if staleFence(err) {
			return st, err
		}
		// The prizes of the transfers that failed are skipped below; the others go on.
		errs = append(errs, fmt.Errorf("resume transfers: %w", err))
	}
	open, err := r.catalog.UnfinishedTransfers(ctx)
	if err != nil {
		return st, errors.Join(append(errs, err)...)
	}
	busy := map[seckill.SessionPrize]bool{}
	for _, t := range open {
		busy[seckill.SessionPrize{Session: t.SessionID, Prize: t.PrizeID}] = true
	}
	for _, p := range prizes {
		st.Prizes++
		if busy[seckill.SessionPrize{Session: p.SessionID, Prize: p.PrizeID}] {
			st.Skipped++
			continue
		}
		bs, err := r.reader.read(ctx, p.SessionID, p.PrizeID, p.Buckets)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		loads := make([]bucketLoad, len(bs))
		loaded := true
		for b, x := range bs {
			loaded = loaded && x.Loaded
			loads[b] = bucketLoad{Left: x.Left, Demand: x.Demand, Wanted: x.Wanted}
			if x.Wanted {
				st.Wanted++
			}
		}
		if !loaded {
			// Not preheated yet (or lost and not rebuilt): a take there would only cancel.
			st.NotLoaded++
			continue
		}
		for _, m := range rebalance(loads, lowWaterMark(int64(p.Total), p.Buckets)) {
			t, err := r.exec.transfer(ctx, f, p.SessionID, p.PrizeID, m.From, m.To, int(m.Units))
			if err != nil {
				r.metrics.failed()
				errs = append(errs, fmt.Errorf("transfer %d units of session %d prize %d from bucket %d to %d: %w",
					m.Units, p.SessionID, p.PrizeID, m.From, m.To, err))
				if staleFence(err) {
					return st, errors.Join(errs...)
				}
				break // the journal holds it; the next round resumes it before planning more
			}
			if t.State == store.TransferDone {
				st.Transfers++
				st.Units += int64(t.Units)
			}
		}
	}
	r.metrics.setWanted(st.Wanted)
	return st, errors.Join(errs...)
}

// serialLeaser lets one process's runner and rebalance loop take turns at the lease
// without finding each other "busy": the in-process lock queues them, the lease keeps
// other instances out.
//
// The lock is a channel of one token, not a sync.Mutex, with the same behaviour (a turn
// waits however long the other takes): a goroutine waiting on a channel is durably blocked
// for testing/synctest, so a test can let a run and a round fall due at once on a fake
// clock (TestRunsDueAtOnceDoNotOverlap); one waiting on a Mutex is not, and stops the clock.
type serialLeaser struct {
	turn chan struct{}
	l    leaser
}

func newSerialLeaser(l leaser) serialLeaser {
	return serialLeaser{turn: make(chan struct{}, 1), l: l}
}

func (s serialLeaser) Do(ctx context.Context, work func(ctx context.Context, fence lease.Fence) error) (bool, error) {
	s.turn <- struct{}{}
	defer func() { <-s.turn }()
	return s.l.Do(ctx, work)
}

// rebalanceLoop runs a round every interval while some open session has a bucketed prize.
type rebalanceLoop struct {
	rebalancer
	lease leaser
	every time.Duration
	// listed keeps the list of bucketed prizes between rounds; nil: read every round.
	listed *bucketedPrizes
	log    *slog.Logger
	now    func() time.Time
}

func (l rebalanceLoop) Run(ctx context.Context) error {
	t := time.NewTicker(l.every)
	defer t.Stop()
	for {
		l.tick(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// tick makes one round if there is anything to rebalance; it logs what fails and goes on.
func (l rebalanceLoop) tick(ctx context.Context) (roundStats, bool) {
	listed := l.listed
	if listed == nil {
		listed = &bucketedPrizes{}
	}
	prizes, err := listed.open(ctx, l.catalog, l.now())
	if err != nil {
		if ctx.Err() == nil {
			l.metrics.round("failed")
			l.log.Error("rebalance: listing the bucketed prizes failed", "error", err.Error())
		}
		return roundStats{}, false
	}
	if len(prizes) == 0 {
		l.metrics.setWanted(0)
		return roundStats{}, false
	}
	var st roundStats
	acquired, err := l.lease.Do(ctx, func(ctx context.Context, f lease.Fence) error {
		var err error
		st, err = l.round(ctx, f, prizes)
		return err
	})
	switch {
	case !acquired && err == nil:
		// The holder's own gauge speaks for the flags; this one's would go stale.
		l.metrics.setWanted(0)
		l.metrics.round("busy")
	case err != nil:
		l.metrics.round("failed")
		if ctx.Err() == nil {
			l.log.Error("rebalance round failed", "error", err.Error(), "stats", st)
		}
	default:
		l.metrics.round("ok")
		if st.Transfers > 0 || st.Resumed > 0 {
			l.log.Info("rebalance round", "stats", st)
		}
	}
	return st, acquired
}

// transfersJob finishes, at the start of every run, the transfers a holder left unfinished
// (the rebalance loop does the same before each round; this one also covers sessions that
// have ended, and reconcilers whose loop has nothing open to rebalance).
type transfersJob struct{ exec transferExecutor }

func (transfersJob) Name() string { return "transfers" }

func (j transfersJob) Run(ctx context.Context, f lease.Fence) (result, error) {
	n, err := j.exec.resume(ctx, f)
	return result{Summary: map[string]int64{"resumed": int64(n)}}, err
}
