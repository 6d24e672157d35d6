package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/exception"
	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
	"github.com/seckill-pipeline/seckill/pkg/tracing"
)

type reservationGate interface {
	ReservationsBucket(ctx context.Context, sessionID, prizeID int64, b, buckets int) ([]stock.Reservation, error)
	Settle(ctx context.Context, batches []stock.SettleBatch) (int64, error)
	PrizeSnapshots(ctx context.Context, stocks []seckill.Stock) ([]stock.Snapshot, error)
}

type existingOrders interface {
	Existing(ctx context.Context, requestIDs []string) (map[string]seckill.Order, error)
}

// staleJob looks at reservations older than the stale threshold. One whose order exists is
// settled in Redis (the consumer could not reach Redis). One with no order was admitted but
// may never have reached Kafka (produce failed, gateway killed): it is re-published, and the
// consumer dedupes if it was there after all.
//
// While the prize's partition has events in flight the consumer will most likely settle
// them itself, so only reservations older than bound are looked at then: under sustained
// traffic a partition is never idle, and "wait for idle" would leave a lost grab lost.
// Every reservation is thus re-published at most bound plus one run interval after its
// admission.
//
// It looks at the sessions open or ended within the key grace, and after that at every
// session×prize that still has pending reservations (the lifecycle job keeps their keys),
// until none is pending.
//
// A prize with stock buckets (docs/design.md) is looked at bucket by bucket: each bucket's
// reservations on its own keys, its events' partition (key session:prize:b) for the
// in-flight check, the re-published event carrying the bucket (so the consumer persists it
// on the bucket's row), and the settlement on the bucket's keys. Bucket 0 is the prize's
// own keys and key, so a prize without buckets is looked at exactly as before.
type staleJob struct {
	catalog     sessionLister
	gate        reservationGate
	orders      existingOrders
	lag         grabLag
	grabs       producer // the grab topic
	topic       string   // its name
	stale       time.Duration
	bound       time.Duration
	grace       time.Duration
	republished prometheus.Counter
	settled     prometheus.Counter
	// A reservation still without an order caseAfter after its admission (re-published
	// more than once by then) becomes an exception case for a person.
	cases     caseRecorder
	caseAfter time.Duration
	log       *slog.Logger
	now       func() time.Time
	tr        *tracing.Tracing // the re-published grabs' produce spans; nil: off
}

// spanRepublish is the produce span of a re-published grab: the consumer's spans of the
// grab hang under it.
const spanRepublish = "kafka.produce grab"

// maxStaleCases bounds the stale-reservation cases one prize (one stock bucket of a prize
// with buckets) adds per run: after a long
// consumer outage thousands of reservations are old at once, and a person needs the first
// few to find the cause, not a flood (the rest follow in later runs if they stay).
const maxStaleCases = 200

// caseRecorder records exception cases for the workbench: a *store.Exceptions.
type caseRecorder interface {
	Record(ctx context.Context, at time.Time, reports ...store.CaseReport) error
}

func (staleJob) Name() string { return "stale" }

func (j staleJob) Run(ctx context.Context, fence lease.Fence) (result, error) {
	sum := map[string]int64{"stale": 0, "settled": 0, "republished": 0, "in_flight": 0}
	now := j.now()
	sc, err := activeScope(ctx, j.catalog, now, j.grace)
	if err != nil {
		return result{Summary: sum}, err
	}
	kept, err := j.keptScope(ctx, now)
	if err != nil {
		return result{Summary: sum}, err
	}
	sc = append(sc, kept...)
	flight, err := j.lag.read(ctx)
	if err != nil {
		return result{Summary: sum}, err
	}
	for _, s := range sc {
		for b := range s.stock.BucketCount() {
			sid, pid := s.stock.SessionID, s.stock.PrizeID
			reserved, err := j.gate.ReservationsBucket(ctx, sid, pid, b, s.stock.BucketCount())
			if err != nil {
				return result{Summary: sum}, err
			}
			busy := flight.pendingKey(event.BucketPartitionKey(sid, pid, b)) > 0
			old, inFlight := j.oldOf(reserved, now, busy)
			sum["in_flight"] += inFlight
			if len(old) == 0 {
				continue
			}
			sum["stale"] += int64(len(old))
			n, republished, err := j.recover(ctx, fence, s.stock, b, old)
			sum["settled"] += n
			sum["republished"] += republished
			if err != nil {
				return result{Summary: sum}, err
			}
		}
	}
	return result{Summary: sum}, nil
}

// oldOf picks, of a bucket's reservations at now, the ones old enough to act on, and counts
// those stale but left to the consumer, which is probably about to settle them: their
// partition is busy and they are younger than bound. The thresholds are inclusive: a
// reservation exactly stale old is stale, one exactly bound old is taken while busy.
func (j staleJob) oldOf(reserved []stock.Reservation, now time.Time, busy bool) (old []stock.Reservation, inFlight int64) {
	for _, r := range reserved {
		age := now.Sub(r.AdmittedAt)
		switch {
		case age < j.stale:
		case busy && age < j.bound:
			inFlight++
		default:
			old = append(old, r)
		}
	}
	return old, inFlight
}

// staleCases are the exception cases of re-published reservations still without an order
// caseAfter (inclusive) after their admission, at most maxStaleCases.
func (j staleJob) staleCases(sessionID, prizeID int64, missing []stock.Reservation, now time.Time) []store.CaseReport {
	var cases []store.CaseReport
	for _, r := range missing {
		if age := now.Sub(r.AdmittedAt); age >= j.caseAfter && len(cases) < maxStaleCases {
			cases = append(cases, exception.StaleReport(sessionID, prizeID, r, age))
		}
	}
	return cases
}

// keptScope is the session×prizes ended longer than the key grace ago (within the
// lifecycle job's look-back) whose keys still hold pending reservations.
func (j staleJob) keptScope(ctx context.Context, now time.Time) ([]scope, error) {
	sessions, err := j.catalog.SessionsOverlapping(ctx, now.Add(-lookBack(j.grace)), now)
	if err != nil {
		return nil, err
	}
	byID := map[int64]seckill.Session{}
	var ids []int64
	for _, s := range sessions {
		if s.End.After(now.Add(-j.grace)) {
			continue // in activeScope
		}
		byID[s.ID] = s
		ids = append(ids, s.ID)
	}
	stocks, err := j.catalog.Stocks(ctx, ids...)
	if err != nil || len(stocks) == 0 {
		return nil, err
	}
	// Pending is summed over every bucket of a prize with buckets: bucket 0 is only the first.
	snaps, err := j.gate.PrizeSnapshots(ctx, stocks)
	if err != nil {
		return nil, err
	}
	var out []scope
	for i, sn := range snaps {
		if sn.Pending > 0 {
			out = append(out, scope{session: byID[stocks[i].SessionID], stock: stocks[i]})
		}
	}
	return out, nil
}

// recover settles the old reservations of stock bucket b that have orders, on b's keys where
// they are reserved, and re-publishes the others as grabs of b.
func (j staleJob) recover(ctx context.Context, fence lease.Fence, st seckill.Stock, b int, old []stock.Reservation) (settled, republished int64, err error) {
	rids := make([]string, len(old))
	for i, r := range old {
		rids[i] = r.RequestID
	}
	existing, err := j.orders.Existing(ctx, rids)
	if err != nil {
		return 0, 0, err
	}
	var done []seckill.Order
	var missing []stock.Reservation
	for _, r := range old {
		if o, ok := existing[r.RequestID]; ok {
			done = append(done, o)
		} else {
			missing = append(missing, r)
		}
	}
	if len(done) > 0 {
		sctx, span := startAction(ctx, j.tr, spanSettleStale, st.SessionID, st.PrizeID)
		linkOrders(span, len(done), func(i int) string { return done[i].TraceParent })
		batch := settleOf(st.SessionID, st.PrizeID, done)
		batch.Bucket, batch.Buckets = b, st.BucketCount()
		n, err := j.gate.Settle(sctx, []stock.SettleBatch{batch})
		span.End()
		if err != nil {
			return 0, 0, err
		}
		settled = n
		j.settled.Add(float64(n))
	}
	if len(missing) == 0 {
		return settled, 0, nil
	}
	msgs := make([]kafka.Message, 0, len(missing))
	for _, r := range missing {
		// The bucket travels in the event (and its key, event.GrabKey): the consumer
		// persists the grab on b's row and settles it on b's keys, where it is reserved.
		m, err := event.EncodeGrab(seckill.Grab{RequestID: r.RequestID, UserID: r.UserID,
			SessionID: st.SessionID, PrizeID: st.PrizeID, Bucket: b, AdmittedAt: r.AdmittedAt})
		if err != nil {
			return settled, 0, err
		}
		m.Headers = append(m.Headers, kafka.Header{Key: "republished-by", Value: []byte("reconciler")})
		msgs = append(msgs, m)
	}
	// A Kafka produce cannot carry a fence; re-publishing is harmless even twice (the
	// consumer dedupes by request id), so checking the lease right before is enough.
	if err := fence.Check(ctx); err != nil {
		return settled, 0, err
	}
	// Each grab gets a produce span, the stale job's child, whose context it carries: the
	// consumer's spans of the order hang under it (a reservation whose gateway span is lost
	// with the message starts its trace here).
	spans := j.tr.StartProduce(ctx, spanRepublish, j.topic, msgs, nil)
	err = j.grabs.WriteMessages(ctx, msgs...)
	spans.End(err)
	if err != nil {
		return settled, 0, fmt.Errorf("re-publish %d stale reservations: %w", len(msgs), err)
	}
	j.republished.Add(float64(len(msgs)))
	j.log.WarnContext(ctx, "stale reservations re-published", "session_id", st.SessionID, "prize_id", st.PrizeID, "bucket", b, "count", len(msgs))
	now := j.now()
	if cases := j.staleCases(st.SessionID, st.PrizeID, missing, now); len(cases) > 0 {
		if err := j.cases.Record(ctx, now, cases...); err != nil {
			return settled, int64(len(msgs)), err
		}
		j.log.WarnContext(ctx, "reservations without an order handed to the exceptions workbench", "session_id", st.SessionID,
			"prize_id", st.PrizeID, "bucket", b, "count", len(cases), "older_than", j.caseAfter.String())
	}
	return settled, int64(len(msgs)), nil
}
