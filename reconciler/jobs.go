package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// deps is what the jobs share.
type deps struct {
	gate      gateOps
	orders    orderOps
	catalog   catalogOps
	lag       lagReader
	grabs     producer // the grab topic, for re-publishing
	deadLtr   producer
	brokers   []string
	topics    event.Topics
	group     string // the order consumers' group
	compGroup string // this reconciler's group on the compensation topic
	grace     time.Duration
	stale     time.Duration
	catchUp   time.Duration
	metrics   *reconcilerMetrics
	log       *slog.Logger
	now       func() time.Time
}

func settleOf(sessionID, prizeID int64, orders []seckill.Order) stock.SettleBatch {
	b := stock.SettleBatch{SessionID: sessionID, PrizeID: prizeID}
	for _, o := range orders {
		s := stock.Settlement{RequestID: o.RequestID, UserID: o.UserID}
		if o.Status == seckill.OrderSucceeded {
			s.OrderID = o.ID
		} else {
			s.Reason = string(o.Reason)
		}
		b.Items = append(b.Items, s)
	}
	return b
}

// ---------------------------------------------------------------- compensation replay

// compensationJob replays the compensation topic: each grab is persisted again (the
// database dedupes by request id, so replaying twice changes stock once). When the database
// definitively says no (sold out), the rejection is stored, the Redis reservation released
// and the user sees "rejected".
type compensationJob struct{ *deps }

func (compensationJob) Name() string { return "compensation" }

func (j compensationJob) Run(ctx context.Context, _ int64) (result, error) {
	sum := map[string]int64{"replayed": 0, "succeeded": 0, "rejected": 0, "existing": 0, "backlog": 0}
	lag, err := j.lag.Lag(ctx, j.compGroup, j.topics.Compensation)
	if err != nil {
		return result{Summary: sum}, err
	}
	var backlog int64
	for _, n := range lag {
		backlog += n
	}
	j.metrics.backlog.Set(float64(backlog))
	sum["backlog"] = backlog
	if backlog == 0 {
		return result{Summary: sum}, nil
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: j.brokers, GroupID: j.compGroup, Topic: j.topics.Compensation.Name,
		StartOffset: kafka.FirstOffset, MaxWait: 100 * time.Millisecond, CommitInterval: 0})
	defer r.Close()
	deadline := time.Now().Add(30 * time.Second)
	for backlog > sum["replayed"] && time.Now().Before(deadline) {
		batch := fetchSome(ctx, r, 200, 2*time.Second)
		if len(batch) == 0 {
			break
		}
		if err := j.replay(ctx, batch, sum); err != nil {
			return result{Summary: sum}, err
		}
		if err := r.CommitMessages(ctx, batch...); err != nil {
			return result{Summary: sum}, fmt.Errorf("commit compensation offsets: %w", err)
		}
		sum["replayed"] += int64(len(batch))
	}
	sum["backlog"] = max(0, backlog-sum["replayed"])
	j.metrics.backlog.Set(float64(sum["backlog"]))
	return result{Summary: sum}, nil
}

// fetchSome waits up to wait for a first message, then takes what is already there (up to
// n) without waiting long for more.
func fetchSome(ctx context.Context, r *kafka.Reader, n int, wait time.Duration) []kafka.Message {
	var out []kafka.Message
	for len(out) < n {
		if len(out) == 1 {
			wait = 50 * time.Millisecond
		}
		fctx, cancel := context.WithTimeout(ctx, wait)
		m, err := r.FetchMessage(fctx)
		cancel()
		if err != nil {
			break
		}
		out = append(out, m)
	}
	return out
}

func (j compensationJob) replay(ctx context.Context, batch []kafka.Message, sum map[string]int64) error {
	type key struct{ s, p int64 }
	groups := map[key][]seckill.Grab{}
	var order []key
	for _, m := range batch {
		g, err := event.DecodeGrab(m.Value)
		if err != nil {
			dl := kafka.Message{Key: m.Key, Value: m.Value, Headers: []kafka.Header{{Key: "error", Value: []byte(err.Error())},
				{Key: "origin-topic", Value: []byte(m.Topic)}, {Key: "origin-offset", Value: []byte(strconv.FormatInt(m.Offset, 10))}}}
			if err := j.deadLtr.WriteMessages(ctx, dl); err != nil {
				return fmt.Errorf("dead-letter compensation offset %d: %w", m.Offset, err)
			}
			continue
		}
		k := key{g.SessionID, g.PrizeID}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], g)
	}
	var settle []stock.SettleBatch
	for _, k := range order {
		var res store.PersistResult
		var err error
		for attempt := 0; attempt < 10; attempt++ {
			if res, err = j.orders.Persist(ctx, k.s, k.p, groups[k], j.now()); err == nil || !store.IsTransient(err) {
				break
			}
			time.Sleep(time.Duration(attempt+1) * 5 * time.Millisecond)
		}
		if errors.Is(err, store.ErrNoStockRow) {
			if err := j.deadLetterGrabs(ctx, groups[k], err); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("replay session %d prize %d: %w (offsets not committed; next run retries)", k.s, k.p, err)
		}
		b := stock.SettleBatch{SessionID: k.s, PrizeID: k.p}
		for _, o := range res.Outcomes {
			b.Items = append(b.Items, stock.Settlement{RequestID: o.Grab.RequestID, UserID: o.Grab.UserID,
				OrderID: o.OrderID, Reason: string(o.Reason)})
			switch {
			case o.Before:
				sum["existing"]++
				j.metrics.replayed.WithLabelValues("existing").Inc()
			case o.Status == seckill.OrderSucceeded:
				sum["succeeded"]++
				j.metrics.replayed.WithLabelValues("succeeded").Inc()
			default:
				sum["rejected"]++
				j.metrics.replayed.WithLabelValues("rejected").Inc()
			}
		}
		settle = append(settle, b)
	}
	if _, err := j.gate.Settle(ctx, settle); err != nil {
		j.log.Warn("settle replayed outcomes in redis failed; the stale job retries", "error", err.Error())
	}
	return nil
}

// deadLetterGrabs sends grabs that can never be persisted (no such stock row) to the
// dead-letter topic, so they leave the compensation topic with a trace.
func (j compensationJob) deadLetterGrabs(ctx context.Context, grabs []seckill.Grab, cause error) error {
	msgs := make([]kafka.Message, 0, len(grabs))
	for _, g := range grabs {
		m, err := event.EncodeGrab(g)
		if err != nil {
			return err
		}
		m.Headers = append(m.Headers, kafka.Header{Key: "error", Value: []byte(cause.Error())},
			kafka.Header{Key: "origin-topic", Value: []byte(j.topics.Compensation.Name)})
		msgs = append(msgs, m)
	}
	if err := j.deadLtr.WriteMessages(ctx, msgs...); err != nil {
		return fmt.Errorf("dead-letter %d compensation events: %w", len(msgs), err)
	}
	return nil
}

// ---------------------------------------------------------------- rebuild after loss

// rebuildJob restores the keys of open sessions that Redis lost (restart without data,
// FLUSHALL). Admission for those prizes is paused meanwhile (the gateway answers 503 while
// the key is absent). It rebuilds only once the consumers caught up on the prize's
// partition, so the database it copies holds every admitted grab that reached Kafka.
type rebuildJob struct {
	*deps
	compensationBacklog func() int64 // from this run's compensation job
}

func (rebuildJob) Name() string { return "rebuild" }

func (j rebuildJob) Run(ctx context.Context, _ int64) (result, error) {
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
	// Grabs waiting on the compensation topic are admitted but not in MySQL yet: rebuilding
	// before they are replayed would hand their stock out a second time.
	if j.compensationBacklog() > 0 {
		sum["waiting_for_consumers"] = int64(len(missing))
		return result{Summary: sum}, fmt.Errorf("%d session×prizes have no keys; waiting for the compensation backlog to be replayed", len(missing))
	}
	ready, err := waitCaughtUp(ctx, j.lag, j.group, j.topics.Grab, missing, j.catchUp)
	if err != nil {
		return result{Summary: sum}, err
	}
	var errs []error
	for _, s := range ready {
		if err := j.rebuild(ctx, s); err != nil {
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

func (j rebuildJob) rebuild(ctx context.Context, s scope) error {
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
	created, err := j.gate.Rebuild(ctx, st, users, settleOf(st.SessionID, st.PrizeID, orders).Items, s.session.End.Add(j.grace))
	if err != nil || !created {
		return err
	}
	j.metrics.rebuilt.Inc()
	sid, pid, after := st.SessionID, st.PrizeID, int64(st.Left)
	j.log.Warn("redis keys rebuilt from mysql", "session_id", sid, "prize_id", pid, "left", st.Left, "orders", len(orders))
	return j.catalog.Record(ctx, store.AuditEntry{Actor: "reconciler", Action: "rebuild_redis_stock", SessionID: &sid,
		PrizeID: &pid, After: &after, Detail: fmt.Sprintf("keys missing; rebuilt from %d orders after consumers caught up", len(orders))})
}

// ---------------------------------------------------------------- stale reservations

// staleJob looks at reservations older than the stale threshold. One whose order exists is
// settled in Redis (the consumer could not reach Redis). One with no order and nothing in
// flight on its partition was admitted but never reached Kafka (produce failed, gateway
// killed): it is re-published, and the consumer dedupes if it was there after all.
type staleJob struct{ *deps }

func (staleJob) Name() string { return "stale" }

func (j staleJob) Run(ctx context.Context, _ int64) (result, error) {
	sum := map[string]int64{"stale": 0, "settled": 0, "republished": 0, "in_flight": 0}
	now := j.now()
	sc, err := activeScope(ctx, j.catalog, now, j.grace)
	if err != nil {
		return result{Summary: sum}, err
	}
	flight, err := loadInFlight(ctx, j.lag, j.group, j.topics.Grab)
	if err != nil {
		return result{Summary: sum}, err
	}
	for _, s := range sc {
		reserved, err := j.gate.Reservations(ctx, s.stock.SessionID, s.stock.PrizeID)
		if err != nil {
			return result{Summary: sum}, err
		}
		var old []stock.Reservation
		for _, r := range reserved {
			if now.Sub(r.AdmittedAt) >= j.stale {
				old = append(old, r)
			}
		}
		if len(old) == 0 {
			continue
		}
		sum["stale"] += int64(len(old))
		// While events of this prize may still be on their way (consumer lag), old
		// reservations are neither settled nor re-published: the consumer will do both, and
		// checking them against MySQL every run would only load the database. The
		// compensation backlog is no reason to wait: re-publishing a grab that also sits
		// there is harmless (request ids dedupe), and one stuck message must not stop every
		// prize's recovery.
		if flight.pending(s.stock.SessionID, s.stock.PrizeID) > 0 {
			sum["in_flight"] += int64(len(old))
			continue
		}
		rids := make([]string, len(old))
		for i, r := range old {
			rids[i] = r.RequestID
		}
		existing, err := j.orders.Existing(ctx, rids)
		if err != nil {
			return result{Summary: sum}, err
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
			n, err := j.gate.Settle(ctx, []stock.SettleBatch{settleOf(s.stock.SessionID, s.stock.PrizeID, done)})
			if err != nil {
				return result{Summary: sum}, err
			}
			sum["settled"] += n
			j.metrics.settled.Add(float64(n))
		}
		if len(missing) == 0 {
			continue
		}
		msgs := make([]kafka.Message, 0, len(missing))
		for _, r := range missing {
			m, err := event.EncodeGrab(seckill.Grab{RequestID: r.RequestID, UserID: r.UserID,
				SessionID: s.stock.SessionID, PrizeID: s.stock.PrizeID, AdmittedAt: r.AdmittedAt})
			if err != nil {
				return result{Summary: sum}, err
			}
			m.Headers = append(m.Headers, kafka.Header{Key: "republished-by", Value: []byte("reconciler")})
			msgs = append(msgs, m)
		}
		if err := j.grabs.WriteMessages(ctx, msgs...); err != nil {
			return result{Summary: sum}, fmt.Errorf("re-publish %d stale reservations: %w", len(msgs), err)
		}
		sum["republished"] += int64(len(msgs))
		j.metrics.republished.Add(float64(len(msgs)))
		j.log.Warn("stale reservations re-published", "session_id", s.stock.SessionID, "prize_id", s.stock.PrizeID, "count", len(msgs))
	}
	return result{Summary: sum}, nil
}

// ---------------------------------------------------------------- drift

// driftJob compares each open or recently ended session×prize: the Redis stock it expects
// is MySQL's left_stock minus the reservations admitted in Redis that are not orders yet.
// It corrects only when the prize's partition has no events in flight and Redis did not
// move while it looked (compare-and-set); otherwise it retries next run.
type driftJob struct{ *deps }

func (driftJob) Name() string { return "drift" }

// errUncorrected makes the run fail (and --once exit non-zero) so a scheduler alerts.
var errUncorrected = errors.New("drift found that could not be corrected this run")

func (j driftJob) Run(ctx context.Context, _ int64) (result, error) {
	sum := map[string]int64{"checked": 0, "redis_high": 0, "redis_low": 0, "corrected": 0, "uncorrected": 0, "skipped_in_flight": 0, "not_loaded": 0}
	now := j.now()
	sc, err := activeScope(ctx, j.catalog, now, j.grace)
	if err != nil {
		return result{Summary: sum}, err
	}
	flight, err := loadInFlight(ctx, j.lag, j.group, j.topics.Grab)
	if err != nil {
		return result{Summary: sum}, err
	}
	var details []any
	for _, s := range sc {
		sid, pid := s.stock.SessionID, s.stock.PrizeID
		if flight.pending(sid, pid) > 0 {
			sum["skipped_in_flight"]++
			continue
		}
		v, err := j.gate.View(ctx, sid, pid)
		if err != nil {
			return result{Summary: sum}, err
		}
		if !v.Loaded {
			sum["not_loaded"]++ // the rebuild job's business
			continue
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
			return result{Summary: sum}, err
		}
		st, err := j.catalog.Stock(ctx, sid, pid)
		if err != nil {
			return result{Summary: sum}, err
		}
		pending := int64(len(rids) - len(existing))
		expected := max(0, int64(st.Left)-pending)
		j.metrics.drift.WithLabelValues(strconv.FormatInt(sid, 10), strconv.FormatInt(pid, 10)).Set(float64(v.Left - expected))
		if v.Left == expected {
			continue
		}
		dir := "redis_low"
		if v.Left > expected {
			dir = "redis_high"
		}
		sum[dir]++
		j.metrics.driftFound.WithLabelValues(dir).Inc()
		if err := j.gate.CorrectLeft(ctx, sid, pid, v.Left, expected); err != nil {
			if errors.Is(err, stock.ErrMoved) {
				sum["uncorrected"]++
				continue
			}
			return result{Summary: sum}, err
		}
		sum["corrected"]++
		j.metrics.driftCorrected.WithLabelValues(dir).Inc()
		before, after := v.Left, expected
		detail := fmt.Sprintf("%s: mysql left %d, %d reservations not yet orders, redis left %d", dir, st.Left, pending, v.Left)
		if err := j.catalog.Record(ctx, store.AuditEntry{Actor: "reconciler", Action: "correct_redis_stock",
			SessionID: &sid, PrizeID: &pid, Before: &before, After: &after, Detail: detail}); err != nil {
			return result{Summary: sum}, err
		}
		details = append(details, map[string]any{"session_id": sid, "prize_id": pid, "redis_before": before, "redis_after": after, "why": detail})
		j.log.Warn("drift corrected", "session_id", sid, "prize_id", pid, "before", before, "after", after, "direction", dir)
	}
	if sum["uncorrected"] > 0 {
		return result{Summary: sum, Details: details}, errUncorrected
	}
	return result{Summary: sum, Details: details}, nil
}

// ---------------------------------------------------------------- session lifecycle

// lifecycleJob writes each ended session×prize's final report once everything admitted was
// settled, and removes Redis keys after the grace period.
type lifecycleJob struct{ *deps }

func (lifecycleJob) Name() string { return "lifecycle" }

func (j lifecycleJob) Run(ctx context.Context, _ int64) (result, error) {
	sum := map[string]int64{"reports": 0, "keys_removed": 0, "report_pending": 0}
	now := j.now()
	sessions, err := j.catalog.SessionsOverlapping(ctx, now.Add(-3*j.grace-24*time.Hour), now)
	if err != nil {
		return result{Summary: sum}, err
	}
	var ended []seckill.Session
	var ids []int64
	for _, s := range sessions {
		if !s.OpenAt(now) && !now.Before(s.Start) {
			ended = append(ended, s)
			ids = append(ids, s.ID)
		}
	}
	stocks, err := j.catalog.Stocks(ctx, ids...)
	if err != nil {
		return result{Summary: sum}, err
	}
	endOf := map[int64]time.Time{}
	for _, s := range ended {
		end := s.End
		if s.ClosedAt != nil && s.ClosedAt.Before(end) {
			end = *s.ClosedAt
		}
		endOf[s.ID] = end
	}
	var details []any
	for _, st := range stocks {
		done, err := j.catalog.Reported(ctx, st.SessionID, st.PrizeID)
		if err != nil {
			return result{Summary: sum}, err
		}
		if !done {
			snap, err := j.gate.Snapshots(ctx, [][2]int64{{st.SessionID, st.PrizeID}})
			if err != nil {
				return result{Summary: sum}, err
			}
			if snap[0].Pending > 0 {
				sum["report_pending"]++ // grabs still on their way to an order
				continue
			}
			r, err := j.report(ctx, st)
			if err != nil {
				return result{Summary: sum}, err
			}
			if ok, err := j.catalog.SaveReport(ctx, r); err != nil {
				return result{Summary: sum}, err
			} else if ok {
				sum["reports"]++
				details = append(details, r)
				j.log.Info("session report", "session_id", r.SessionID, "prize_id", r.PrizeID, "total", r.Total,
					"sold", r.Sold, "left", r.Left, "rejected", r.Rejected, "drift_corrected", r.DriftCorrected)
			}
		}
		if now.Sub(endOf[st.SessionID]) > j.grace {
			if err := j.gate.Remove(ctx, st.SessionID, st.PrizeID); err != nil {
				return result{Summary: sum}, err
			}
			sum["keys_removed"]++
		}
	}
	return result{Summary: sum, Details: details}, nil
}

func (j lifecycleJob) report(ctx context.Context, st seckill.Stock) (store.SessionReport, error) {
	fresh, err := j.catalog.Stock(ctx, st.SessionID, st.PrizeID)
	if err != nil {
		return store.SessionReport{}, err
	}
	c, err := j.orders.CountsFor(ctx, st.SessionID, st.PrizeID)
	if err != nil {
		return store.SessionReport{}, err
	}
	drift, err := j.catalog.DriftCorrections(ctx, st.SessionID, st.PrizeID)
	if err != nil {
		return store.SessionReport{}, err
	}
	return store.SessionReport{SessionID: st.SessionID, PrizeID: st.PrizeID, Total: fresh.Total, Sold: c.Succeeded,
		Left: fresh.Left, Rejected: c.Rejected, DriftCorrected: drift}, nil
}
