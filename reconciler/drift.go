package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

type driftCatalog interface {
	sessionLister
	StockWithReturns(ctx context.Context, sessionID, prizeID int64) (seckill.Stock, int, error)
	Record(ctx context.Context, e store.AuditEntry) error
	// Of prizes with stock buckets (docs/design.md).
	BucketedStocks(ctx context.Context, sessionIDs ...int64) ([]store.PrizeStock, error)
	BucketWithReturns(ctx context.Context, sessionID, prizeID int64, b int) (seckill.Stock, int, error)
	UnfinishedTransfers(ctx context.Context) ([]store.Transfer, error)
	Ledger(ctx context.Context, sessionID, prizeID int64, n int) ([]seckill.BucketLedger, error)
}

type driftGate interface {
	View(ctx context.Context, sessionID, prizeID int64) (stock.View, error)
	CorrectLeft(ctx context.Context, sessionID, prizeID int64, from stock.View, to, fence int64) error
	Returned(ctx context.Context, sessionID, prizeID int64) (map[string]struct{}, bool, error)
	ReturnedBucket(ctx context.Context, sessionID, prizeID int64, b, buckets int) (map[string]struct{}, bool, error)
	ViewBucket(ctx context.Context, sessionID, prizeID int64, b, buckets int) (stock.View, error)
	CorrectBucketLeft(ctx context.Context, sessionID, prizeID int64, b, buckets int, from stock.View, to, fence int64) error
	Buckets(ctx context.Context, sessionID, prizeID int64, n int) ([]stock.BucketState, error)
	CorrectBucketLedger(ctx context.Context, sessionID, prizeID int64, b, buckets int, from stock.BucketState, ledger seckill.BucketLedger, fence int64) error
}

// doneReturns reads the returns MySQL has stamped done in Redis and clears a stamp whose
// Redis effect was lost (store.Returns).
type doneReturns interface {
	DoneForResale(ctx context.Context, sessionID, prizeID int64) (map[string]int64, error)
	DoneForResaleInBucket(ctx context.Context, sessionID, prizeID int64, b int) (map[string]int64, error)
	ClearRedisDone(ctx context.Context, orderIDs []int64) error
}

// driftJob compares each open or recently ended session×prize: the Redis stock it expects
// is MySQL's left_stock minus the reservations admitted in Redis that are not orders yet,
// minus the cancelled orders' units MySQL took back that Redis has not (yet) been given:
// a Redis return still pending after its cancellation committed, or a unit returned after
// the session, which is never for sale. Both counts come with the value they qualify
// (MySQL's left and cancellations in one statement, Redis's left and returns in one
// script), so a return landing in between cannot be corrected in twice.
// It corrects only when the prize's partition has no events in flight and Redis did not
// move while it looked (compare-and-set on left and returns); otherwise it retries next run.
//
// Counting returns is not enough to see one Redis lost: a return made and stamped done,
// then lost with an unreplicated primary, reads as "still pending" (cancelled minus the
// returned hash's length) for ever, and nothing makes it again. So the job also compares
// the request ids MySQL stamped done with the returned hash, and clears the stamp of those
// Redis no longer holds: the payment job's sweep (next run) makes their Redis step again,
// at most once per request id, giving the unit back and the buyer's slot if it released one.
type driftJob struct {
	catalog driftCatalog
	gate    driftGate
	returns doneReturns
	orders  existingOrders
	lag     grabLag
	grace   time.Duration
	// Drift left in place by caseRuns consecutive runs becomes an exception case.
	cases    caseRecorder
	caseRuns int
	metrics  *driftMetrics
	log      *slog.Logger
	now      func() time.Time
}

func (driftJob) Name() string { return "drift" }

// errUncorrected makes the run fail (and --once exit non-zero) so a scheduler alerts.
var errUncorrected = errors.New("drift found that could not be corrected this run")

func (j driftJob) Run(ctx context.Context, fence lease.Fence) (result, error) {
	sum := map[string]int64{"checked": 0, "redis_high": 0, "redis_low": 0, "corrected": 0, "uncorrected": 0, "skipped_in_flight": 0, "not_loaded": 0, "cases": 0,
		"returns_lost": 0}
	now := j.now()
	sc, err := activeScope(ctx, j.catalog, now, j.grace)
	if err != nil {
		return result{Summary: sum}, err
	}
	flight, err := j.lag.read(ctx)
	if err != nil {
		return result{Summary: sum}, err
	}
	values := map[seckill.SessionPrize]float64{}
	inScope, left := map[seckill.SessionPrize]bool{}, map[seckill.SessionPrize]bool{}
	for _, s := range sc {
		inScope[s.stock.SessionPrize()] = true
	}
	defer func() {
		j.metrics.keep(values)
		j.metrics.track(inScope, left)
	}()
	run := &driftRun{fence: fence, now: now, flight: flight, sum: sum, values: values, left: left, drifting: map[seckill.SessionPrize]int{}}
	buckets, err := j.bucketsOf(ctx, sc)
	if err != nil {
		return result{Summary: sum}, err
	}
	for _, s := range sc {
		sid, pid := s.stock.SessionID, s.stock.PrizeID
		if n := buckets.n[s.stock.SessionPrize()]; n > 1 {
			if err := j.checkBuckets(ctx, run, s, n, buckets); err != nil {
				return result{Summary: sum}, err
			}
			continue
		}
		// Grabs in flight do not change which returns Redis holds: checked every run.
		lost, err := j.lostReturns(ctx, fence, driftTarget{sid: sid, pid: pid, bucket: -1})
		sum["returns_lost"] += int64(lost)
		if err != nil {
			return result{Summary: sum}, err
		}
		if flight.pending(sid, pid) > 0 {
			sum["skipped_in_flight"]++
			continue
		}
		if err := j.check(ctx, run, driftTarget{sid: sid, pid: pid, bucket: -1}); err != nil {
			return result{Summary: sum}, err
		}
	}
	details := run.details
	if sum["uncorrected"] > 0 {
		return result{Summary: sum, Details: details}, errUncorrected
	}
	return result{Summary: sum, Details: details}, nil
}

// driftRun is what one drift run carries from session×prize to session×prize.
type driftRun struct {
	fence   lease.Fence
	now     time.Time
	flight  inFlight
	sum     map[string]int64
	values  map[seckill.SessionPrize]float64
	left    map[seckill.SessionPrize]bool
	details []any
	// drifting counts, per prize with buckets, the buckets found drifted and not corrected.
	drifting map[seckill.SessionPrize]int
}

// driftTarget is what one comparison looks at: a prize without buckets (bucket -1) or one
// stock bucket of a prize with buckets.
type driftTarget struct {
	sid, pid int64
	bucket   int
	n        int // the prize's N, which names a bucket's keys (stock.BucketKeysFor)
}

func (t driftTarget) label() string {
	if t.bucket < 0 {
		return ""
	}
	return fmt.Sprintf("bucket %d ", t.bucket)
}

// check compares one target's Redis left with what MySQL expects and corrects it.
func (j driftJob) check(ctx context.Context, run *driftRun, t driftTarget) error {
	sid, pid, sum, values, left, fence := t.sid, t.pid, run.sum, run.values, run.left, run.fence
	v, err := j.view(ctx, t)
	if err != nil {
		return err
	}
	if !v.Loaded {
		sum["not_loaded"]++ // the rebuild job's business
		return nil
	}
	sum["checked"]++
	rids := make([]string, len(v.Reserved))
	for i, r := range v.Reserved {
		rids[i] = r.RequestID
	}
	// Which reservations are orders is read before left_stock: an order committed in
	// between then shows as pending and lowers left, so the expectation errs low (fewer
	// admissions, corrected next run), never high (which could admit what MySQL refuses).
	existing, err := j.orders.Existing(ctx, rids)
	if err != nil {
		return err
	}
	st, cancelled, err := j.stockWithReturns(ctx, t)
	if err != nil {
		return err
	}
	pending := int64(len(rids) - len(existing))
	notReturned := max(0, int64(cancelled)-v.Returned)
	expected := max(0, int64(st.Left)-pending-notReturned)
	key := seckill.SessionPrize{Session: sid, Prize: pid}
	// A prize's buckets add up in its series; each bucket has its own as well.
	values[key] += float64(v.Left - expected)
	j.metrics.bucket(t, float64(v.Left-expected))
	// Drifted until corrected: a return before the correction leaves it counted. A prize
	// with buckets is drifted while any of its buckets is.
	drifted := v.Left != expected
	if t.bucket < 0 {
		left[key] = drifted
	} else if drifted {
		run.drifting[key]++
		left[key] = true
	} else if _, seen := left[key]; !seen {
		left[key] = false
	}
	if !drifted {
		return nil
	}
	dir := "redis_low"
	if v.Left > expected {
		dir = "redis_high"
	}
	sum[dir]++
	j.metrics.found.WithLabelValues(dir).Inc()
	if err := fence.Check(ctx); err != nil {
		return err
	}
	if err := j.correct(ctx, t, v, expected, fence.Number); err != nil {
		if errors.Is(err, stock.ErrMoved) {
			sum["uncorrected"]++
			if runs := j.metrics.streaks[key] + 1; runs >= j.caseRuns {
				if err := j.cases.Record(ctx, run.now, driftCase(st, v, pending, notReturned, expected, runs)); err != nil {
					return err
				}
				sum["cases"]++
			}
			return nil
		}
		return err
	}
	sum["corrected"]++
	if run.drifting[key]--; t.bucket < 0 || run.drifting[key] <= 0 {
		left[key] = false
	}
	j.metrics.corrected.WithLabelValues(dir).Inc()
	before, after := v.Left, expected
	detail := fmt.Sprintf("%s%s: mysql left %d, %d reservations not yet orders, %d cancelled units not in redis, redis left %d",
		t.label(), dir, st.Left, pending, notReturned, v.Left)
	if err := j.catalog.Record(ctx, store.AuditEntry{Actor: "reconciler", Action: "correct_redis_stock",
		SessionID: &sid, PrizeID: &pid, Before: &before, After: &after, Detail: detail,
		Fence: &fence}); err != nil {
		return err
	}
	run.details = append(run.details, map[string]any{"session_id": sid, "prize_id": pid, "redis_before": before, "redis_after": after, "why": detail})
	j.log.Warn("drift corrected", "session_id", sid, "prize_id", pid, "before", before, "after", after, "direction", dir)
	return nil
}

// lostReturns clears the done stamp of the session×prize's returns for resale whose request
// id is not in Redis's returned hash, and returns how many. MySQL is read first: a return
// stamped done by then had its script run before, so its request id is missing from the
// hash read after only if Redis lost it (a return finishing between the two reads is not
// stamped in the first and is not looked at). Without the stock key nothing is cleared: the
// hash went with the keys, and the rebuild writes it from MySQL.
func (j driftJob) lostReturns(ctx context.Context, fence lease.Fence, t driftTarget) (int, error) {
	sessionID, prizeID := t.sid, t.pid
	var done map[string]int64
	var err error
	if t.bucket < 0 {
		done, err = j.returns.DoneForResale(ctx, sessionID, prizeID)
	} else {
		done, err = j.returns.DoneForResaleInBucket(ctx, sessionID, prizeID, t.bucket)
	}
	if err != nil || len(done) == 0 {
		return 0, err
	}
	var have map[string]struct{}
	var loaded bool
	if t.bucket < 0 {
		have, loaded, err = j.gate.Returned(ctx, sessionID, prizeID)
	} else {
		have, loaded, err = j.gate.ReturnedBucket(ctx, sessionID, prizeID, t.bucket, t.n)
	}
	if err != nil || !loaded {
		return 0, err
	}
	var lost []int64
	var rids []string
	for rid, oid := range done {
		if _, ok := have[rid]; !ok {
			lost = append(lost, oid)
			rids = append(rids, rid)
		}
	}
	if len(lost) == 0 {
		return 0, nil
	}
	if err := fence.Check(ctx); err != nil {
		return 0, err
	}
	if err := j.returns.ClearRedisDone(ctx, lost); err != nil {
		return 0, err
	}
	j.log.Warn("returns stamped done that redis lost; the sweep gives them back", "session_id", sessionID,
		"prize_id", prizeID, "bucket", t.bucket, "count", len(lost), "request_ids", rids[:min(len(rids), 20)])
	return len(lost), nil
}

// driftCase is the exception case of drift no run could correct: Redis kept moving under
// the compare-and-set, so something keeps writing to it that the reconciler does not know.
func driftCase(st seckill.Stock, v stock.View, pending, notReturned, expected int64, runs int) store.CaseReport {
	return store.CaseReport{Kind: seckill.CaseDriftUncorrected, Key: fmt.Sprintf("%d:%d", st.SessionID, st.PrizeID),
		SessionID: st.SessionID, PrizeID: st.PrizeID,
		Detail: fmt.Sprintf("redis left %d, expected %d, uncorrected for %d runs", v.Left, expected, runs),
		Evidence: map[string]any{"mysql_left": st.Left, "mysql_total": st.Total, "pending_reservations": pending,
			"cancelled_not_in_redis": notReturned, "redis_left": v.Left, "expected_redis_left": expected, "runs": runs}}
}

func (j driftJob) view(ctx context.Context, t driftTarget) (stock.View, error) {
	if t.bucket < 0 {
		return j.gate.View(ctx, t.sid, t.pid)
	}
	return j.gate.ViewBucket(ctx, t.sid, t.pid, t.bucket, t.n)
}

func (j driftJob) stockWithReturns(ctx context.Context, t driftTarget) (seckill.Stock, int, error) {
	if t.bucket < 0 {
		return j.catalog.StockWithReturns(ctx, t.sid, t.pid)
	}
	return j.catalog.BucketWithReturns(ctx, t.sid, t.pid, t.bucket)
}

func (j driftJob) correct(ctx context.Context, t driftTarget, from stock.View, to, fence int64) error {
	if t.bucket < 0 {
		return j.gate.CorrectLeft(ctx, t.sid, t.pid, from, to, fence)
	}
	return j.gate.CorrectBucketLeft(ctx, t.sid, t.pid, t.bucket, t.n, from, to, fence)
}

// bucketInfo is, for the prizes with stock buckets in scope, N and the buckets an
// unfinished transfer touches.
type bucketInfo struct {
	n    map[seckill.SessionPrize]int
	busy map[seckill.SessionPrize]map[int]bool
}

func (j driftJob) bucketsOf(ctx context.Context, sc []scope) (bucketInfo, error) {
	info := bucketInfo{n: map[seckill.SessionPrize]int{}, busy: map[seckill.SessionPrize]map[int]bool{}}
	ps, err := j.catalog.BucketedStocks(ctx, sessionIDs(sc)...)
	if err != nil || len(ps) == 0 {
		return info, err
	}
	for _, p := range ps {
		info.n[seckill.SessionPrize{Session: p.SessionID, Prize: p.PrizeID}] = p.Buckets
	}
	open, err := j.catalog.UnfinishedTransfers(ctx)
	if err != nil {
		return info, err
	}
	for _, t := range open {
		k := seckill.SessionPrize{Session: t.SessionID, Prize: t.PrizeID}
		if info.busy[k] == nil {
			info.busy[k] = map[int]bool{}
		}
		info.busy[k][t.From], info.busy[k][t.To] = true, true
	}
	return info, nil
}

// checkBuckets compares each stock bucket of a prize on its own (docs/design.md): a bucket
// an unfinished transfer touches is skipped, as its Redis and MySQL stock differ by the
// units in flight until the transfer ends (the transfers job resumed it at the start of the
// run; it failed again), and so is a bucket whose grab partition has events in flight. The
// returns check (lostReturns) runs on every bucket, each with the returns of the orders it
// sold. Then each bucket's sent and received are compared with the transfers journal.
func (j driftJob) checkBuckets(ctx context.Context, run *driftRun, s scope, n int, info bucketInfo) error {
	sid, pid := s.stock.SessionID, s.stock.PrizeID
	busy := info.busy[s.stock.SessionPrize()]
	for b := range n {
		// As for a prize without buckets, every run: neither transfers nor grabs in flight
		// change which returns a bucket holds.
		lost, err := j.lostReturns(ctx, run.fence, driftTarget{sid: sid, pid: pid, bucket: b, n: n})
		run.sum["returns_lost"] += int64(lost)
		if err != nil {
			return err
		}
		if busy[b] {
			run.sum["skipped_transfer"]++
			continue
		}
		if run.flight.pendingKey(event.BucketPartitionKey(sid, pid, b)) > 0 {
			run.sum["skipped_in_flight"]++
			continue
		}
		if err := j.check(ctx, run, driftTarget{sid: sid, pid: pid, bucket: b, n: n}); err != nil {
			return err
		}
	}
	return j.compareLedger(ctx, run, sid, pid, n, busy)
}

// compareLedger corrects the loaded buckets whose sent or received differ from the
// journal's Ledger (a take or give lost with Redis writes in a failover: a lost give keeps
// the prize's in-flight count above 0, and its gateways would answer 503 rebalancing instead
// of sold_out once every bucket is empty), compare-and-set on what it read. Counted as
// ledger_mismatch, and ledger_corrected once set.
func (j driftJob) compareLedger(ctx context.Context, run *driftRun, sid, pid int64, n int, busy map[int]bool) error {
	want, err := j.catalog.Ledger(ctx, sid, pid, n)
	if err != nil {
		return err
	}
	have, err := j.gate.Buckets(ctx, sid, pid, n)
	if err != nil {
		return err
	}
	for b := range n {
		if busy[b] || !have[b].Loaded {
			continue
		}
		if have[b].Sent == int64(want[b].Sent) && have[b].Received == int64(want[b].Received) {
			continue
		}
		run.sum["ledger_mismatch"]++
		j.log.Warn("a stock bucket's sent or received differs from the transfers journal", "session_id", sid, "prize_id", pid, "bucket", b,
			"redis_sent", have[b].Sent, "journal_sent", want[b].Sent, "redis_received", have[b].Received, "journal_received", want[b].Received)
		if err := run.fence.Check(ctx); err != nil {
			return err
		}
		switch err := j.gate.CorrectBucketLedger(ctx, sid, pid, b, n, have[b], want[b], run.fence.Number); {
		case errors.Is(err, stock.ErrMoved), errors.Is(err, seckill.ErrNotLoaded):
			// A transfer or a loss since the read: the next run looks again.
		case err != nil:
			return err
		default:
			run.sum["ledger_corrected"]++
		}
	}
	return nil
}
