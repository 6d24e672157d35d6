package harness

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/internal/history"
	"github.com/seckill-pipeline/seckill/internal/linearcheck"
	"github.com/seckill-pipeline/seckill/pkg/config"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// Result is one scenario's row in the chaos table.
type Result struct {
	Scenario   string
	Seed       uint64
	Requests   int
	Accepted   int // distinct request ids answered 202
	Retried    int // clicks that needed client retries (the fault was felt)
	Orders     int // succeeded orders
	Rejected   int // rejected orders
	Oversold   int
	Duplicates int // request ids stored twice, users over the limit, order events not exactly once
	Lost       int // 202s without a final, readable outcome
	Drift      int // Σ|Redis left − MySQL left| after the reconciler ran
	Cancelled  int // orders cancelled (downstream or payment timeout); their units came back
	Resold     int // units sold beyond the stock: returned units bought again (Σ succeeded + cancelled − total)
	Paid       int // orders downstream reported paid
	Refunds    int // order.refund_required events (paid after the pipeline cancelled)
	// SoldOutEarly counts the sold_out answers for a prize with stock buckets given while
	// units remained (verifySoldOut); Bucketed says the row had such a prize.
	SoldOutEarly int
	Bucketed     bool
	// Linearizable is the verdict on the row's history (internal/linearcheck): "yes", "no",
	// or "" when it was not checked (the harness failed first).
	Linearizable string
	Violations   map[linearcheck.Class]int // what the history check found, by class
	HistoryOps   int
	CheckTime    time.Duration
	Duration     time.Duration
	Problems     []string
}

// OK reports whether every invariant held.
func (r Result) OK() bool {
	return r.Oversold == 0 && r.Duplicates == 0 && r.Lost == 0 && r.Drift == 0 && r.SoldOutEarly == 0 && r.Linearizable == "yes" &&
		len(r.Problems) == 0
}

func (r *Result) problem(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// Drain waits until nothing is in flight: consumer and compensation lag 0, no pending
// reservation in Redis, no unpublished order event.
func (c *Pipeline) Drain(ctx context.Context, d time.Duration) error {
	deadline := time.Now().Add(d)
	var last string
	for {
		state, err := c.inFlight(ctx)
		if err == nil && state == "" {
			return nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = state
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not drained after %s: %s", d, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c *Pipeline) inFlight(ctx context.Context) (string, error) {
	var parts []string
	n, err := c.lag(ctx, c.Env["SECKILL_CONSUMER_GROUP"], c.Topics.Grab)
	if err != nil {
		return "", err
	}
	if n > 0 {
		parts = append(parts, fmt.Sprintf("%s lag %d", c.Topics.Grab.Name, n))
	}
	// The reconciler keeps its compensation replay position in MySQL, not in a group; the
	// backlog is counted as the reconciler counts it (stored offsets read before the bounds).
	replayed, err := store.NewCatalog(c.DB, time.Now).ReplayOffsets(ctx, c.Topics.Compensation.Name)
	if err != nil {
		return "", err
	}
	offs, err := c.Admin.Offsets(ctx, c.Topics.Compensation.Name)
	if err != nil {
		return "", err
	}
	if backlog := event.Backlog(event.Positions(offs, replayed)); backlog > 0 {
		parts = append(parts, fmt.Sprintf("%s backlog %d", c.Topics.Compensation.Name, backlog))
	}
	snaps, err := c.snapshots(ctx)
	if err != nil {
		return "", err
	}
	for _, s := range snaps {
		if s.Pending > 0 {
			parts = append(parts, fmt.Sprintf("prize %d: %d reservations pending", s.PrizeID, s.Pending))
		}
	}
	buckets, err := c.bucketsInFlight(ctx)
	if err != nil {
		return "", err
	}
	parts = append(parts, buckets...)
	pending, err := store.NewOutbox(c.DB).CountPending(ctx)
	if err != nil {
		return "", err
	}
	if pending > 0 {
		parts = append(parts, fmt.Sprintf("%d order events unpublished", pending))
	}
	// Downstream feedback consumed, and every cancellation's unit back in Redis.
	if group := c.Env["SECKILL_FEEDBACK_GROUP"]; group != "" {
		n, err := c.lag(ctx, group, c.Topics.Feedback)
		if err != nil {
			return "", err
		}
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s lag %d", c.Topics.Feedback.Name, n))
		}
	}
	steps, err := store.NewReturns(c.DB).CountPendingRedis(ctx)
	if err != nil {
		return "", err
	}
	if steps > 0 {
		parts = append(parts, fmt.Sprintf("%d cancelled units not returned to redis yet", steps))
	}
	return strings.Join(parts, "; "), nil
}

// lag is group's lag on t, all partitions together.
func (c *Pipeline) lag(ctx context.Context, group string, t event.Topic) (int64, error) {
	lag, err := c.Admin.Lag(ctx, group, t)
	return sum(lag), err
}

func (c *Pipeline) snapshots(ctx context.Context) ([]stock.Snapshot, error) {
	ids := make([]seckill.SessionPrize, len(c.Prizes))
	for i, p := range c.Prizes {
		ids[i] = seckill.SessionPrize{Session: c.Session.ID, Prize: p.ID}
	}
	return c.Gate.Snapshots(ctx, ids)
}

// Verify checks I1–I4, the cancellations' returns and the order topic against the recorded
// answers, one invariant after the other, and adds what it finds to res.
func (c *Pipeline) Verify(ctx context.Context, answers []Answer, res *Result) error {
	res.Requests = len(answers)
	for _, a := range answers {
		if a.Attempts > 1 {
			res.Retried++
		}
	}
	prizes, err := c.verifyNoOversell(ctx, res)
	if err != nil {
		return err
	}
	if err := c.verifyNoDuplicates(ctx, res); err != nil {
		return err
	}
	if err := c.verifyAccepted(ctx, answers, res); err != nil {
		return err
	}
	if err := c.verifyNoDrift(ctx, res, prizes); err != nil {
		return err
	}
	if err := c.verifyReturns(ctx, res, prizes); err != nil {
		return err
	}
	if err := c.verifyBuckets(ctx, answers, res); err != nil {
		return err
	}
	return c.verifyOrderEvents(ctx, res)
}

// prizeStock is one prize's stock in MySQL after the run.
type prizeStock struct {
	left     int // left_stock
	resale   int // units returned while the session was open: back on sale in Redis
	afterEnd int // units returned after it ended: in left_stock, never for sale again
}

// verifyNoOversell checks I1: per session×prize, orders ≤ stock and total = left +
// succeeded (a cancelled order's unit is back in left, so this stays exact through
// cancellations), and a returned unit is sold at most once. It returns each prize's stock.
func (c *Pipeline) verifyNoOversell(ctx context.Context, res *Result) (map[int64]prizeStock, error) {
	prizes := map[int64]prizeStock{}
	cat := store.NewCatalog(c.DB, time.Now)
	for _, p := range c.Prizes {
		// The prize's stock over its buckets (the session_stocks row alone for a prize without).
		stk, err := cat.PrizeStock(ctx, c.Session.ID, p.ID)
		if err != nil {
			return nil, err
		}
		row := struct{ Total, LeftStock int }{stk.Total, stk.Left}
		counts, err := store.NewOrders(c.DB).CountsFor(ctx, c.Session.ID, p.ID)
		if err != nil {
			return nil, err
		}
		res.Orders += counts.Succeeded
		res.Rejected += counts.Rejected
		res.Cancelled += counts.Cancelled
		res.Resold += max(0, counts.Succeeded+counts.Cancelled-row.Total)
		ps := prizeStock{left: row.LeftStock}
		if ps.resale, ps.afterEnd, err = store.NewReturns(c.DB).CountsFor(ctx, c.Session.ID, p.ID); err != nil {
			return nil, err
		}
		prizes[p.ID] = ps
		// A returned unit is sold at most once: whatever was sold beyond the stock is at
		// most what came back.
		if over := counts.Succeeded + counts.Cancelled - row.Total - ps.resale - ps.afterEnd; over > 0 {
			res.Oversold += over
			res.problem("I1 prize %d: %d sold beyond stock %d and the %d units returned", p.ID, over, row.Total, ps.resale+ps.afterEnd)
		}
		if counts.Succeeded > row.Total {
			res.Oversold += counts.Succeeded - row.Total
			res.problem("I1 prize %d: %d orders for stock %d", p.ID, counts.Succeeded, row.Total)
		}
		if row.Total != row.LeftStock+counts.Succeeded {
			res.problem("I1 prize %d: total %d != left %d + succeeded %d", p.ID, row.Total, row.LeftStock, counts.Succeeded)
		}
	}
	return prizes, nil
}

// verifyNoDuplicates checks I2: no request id stored twice, no user over the limit.
func (c *Pipeline) verifyNoDuplicates(ctx context.Context, res *Result) error {
	limit := c.opts.Limit
	var dupIDs []string
	if err := c.DB.WithContext(ctx).Raw("SELECT request_id FROM orders GROUP BY request_id HAVING COUNT(*) > 1").Scan(&dupIDs).Error; err != nil {
		return err
	}
	var overLimit []struct {
		UserID  string
		PrizeID int64
		N       int
	}
	// Slots are held by succeeded orders and by cancelled ones that did not release theirs.
	if err := c.DB.WithContext(ctx).Raw(`SELECT user_id, prize_id, COUNT(*) AS n FROM orders WHERE slot IS NOT NULL
		GROUP BY session_id, prize_id, user_id HAVING COUNT(*) > ?`, limit).Scan(&overLimit).Error; err != nil {
		return err
	}
	res.Duplicates += len(dupIDs) + len(overLimit)
	if len(dupIDs) > 0 {
		res.problem("I2 request ids stored twice: %v", first(dupIDs, 10))
	}
	for i, o := range overLimit {
		if i == 10 {
			break
		}
		res.problem("I2 user %s holds %d orders of prize %d (limit %d)", o.UserID, o.N, o.PrizeID, limit)
	}
	return nil
}

// finalReaders numbers the clients of verifyAccepted's reads in the history, apart from the
// crowd's.
const finalReaders = 10000

// verifyAccepted checks I3: every 202 ended succeeded or rejected-with-reason (or was
// cancelled with one), in MySQL and through the status API.
func (c *Pipeline) verifyAccepted(ctx context.Context, answers []Answer, res *Result) error {
	type grab struct {
		user  string
		prize int64
	}
	accepted := map[string]grab{}
	for _, a := range answers {
		if a.Code == 202 && a.RequestID != "" {
			accepted[a.RequestID] = grab{userName(a.User), c.Prizes[a.Prize].ID}
		}
	}
	// The scenarios' own grabs (a poison row's probes) are held to the same promise.
	for _, op := range c.History.Ops() {
		if op.Kind == history.Grab && op.Code == 202 && op.Client == probeClient {
			accepted[op.RID] = grab{op.User, op.Prize}
		}
	}
	res.Accepted = len(accepted)
	rids := slices.Sorted(maps.Keys(accepted))
	orders, err := store.NewOrders(c.DB).Existing(ctx, rids)
	if err != nil {
		return err
	}
	var lost []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan string)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for rid := range work {
				a := accepted[rid]
				// Every 202 is read again, order or not: the last reads of the row's history.
				reader := Reader{History: c.History, Client: finalReaders + w, User: a.user, Prize: a.prize}
				why := c.finalRead(ctx, reader, rid)
				if _, ok := orders[rid]; !ok && why == "" {
					why = "no order in MySQL"
				}
				if why != "" {
					mu.Lock()
					lost = append(lost, rid+" ("+why+")")
					mu.Unlock()
				}
			}
		}()
	}
	for _, rid := range rids {
		work <- rid
	}
	close(work)
	wg.Wait()
	sort.Strings(lost)
	res.Lost = len(lost)
	if len(lost) > 0 {
		res.problem("I3 accepted but not final: %v", first(lost, 10))
	}
	return nil
}

// finalRead reads an accepted grab's status as its owner, retrying 429s and 503s, then once
// more at once (a final status must read the same twice running: the history check compares
// them), and says what is wrong with it ("" when it is final).
func (c *Pipeline) finalRead(ctx context.Context, reader Reader, rid string) string {
	tok, err := c.Token(reader.User)
	if err != nil {
		return err.Error()
	}
	st, reason, err := PollAs(ctx, reader, "http://"+c.GatewayAddr, tok, rid)
	if err != nil {
		return "status: " + err.Error()
	}
	if st != "succeeded" && !((st == "rejected" || st == "cancelled") && reason != "") {
		return "status " + st
	}
	if _, _, err := PollAs(ctx, reader, "http://"+c.GatewayAddr, tok, rid); err != nil {
		return "second read: " + err.Error()
	}
	return ""
}

// verifyNoDrift checks I4: Redis's left equals MySQL's (less the units returned after the
// session, which are never for sale again), and nothing is pending.
func (c *Pipeline) verifyNoDrift(ctx context.Context, res *Result, prizes map[int64]prizeStock) error {
	snaps, err := c.snapshots(ctx)
	if err != nil {
		return err
	}
	for i, s := range snaps {
		if c.buckets(i) > 1 {
			continue // bucket 0's keys only: verifyBuckets compares every bucket
		}
		ps := prizes[s.PrizeID]
		d := int(s.Left) - (ps.left - ps.afterEnd)
		if !s.Loaded {
			d = ps.left + 1
			res.problem("I4 prize %d: keys missing in Redis", s.PrizeID)
		}
		if d != 0 {
			res.Drift += abs(d)
			res.problem("I4 prize %d: redis left %d, mysql left %d", s.PrizeID, s.Left, ps.left)
		}
		if s.Pending != 0 {
			res.problem("I4 prize %d: %d reservations still pending", s.PrizeID, s.Pending)
		}
	}
	return nil
}

// verifyOrderEvents checks the order topic: exactly one creation event per order, and the
// events that follow creations (verifyFollowEvents). The last reconciler run may have just
// cancelled orders: their events are given a moment to be published.
func (c *Pipeline) verifyOrderEvents(ctx context.Context, res *Result) error {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if n, err := store.NewOutbox(c.DB).CountPending(ctx); err == nil && n == 0 {
			break
		}
	}
	msgs, err := ReadTopic(ctx, c.Brokers, c.Topics.Order)
	if err != nil {
		return err
	}
	perOrder := map[int64]int{}
	cancelledEvents := map[int64]int{}
	refundEvents := map[int64]int{}
	for _, m := range msgs {
		ev, err := event.DecodeOrderEvent(m.Value)
		if err != nil {
			res.problem("order topic: %v", err)
			continue
		}
		switch ev.Type {
		case event.OrderCancelled:
			cancelledEvents[ev.OrderID]++
		case event.OrderRefundRequired:
			refundEvents[ev.OrderID]++
		default:
			perOrder[ev.OrderID]++
		}
	}
	if err := c.verifyFollowEvents(ctx, res, cancelledEvents, refundEvents); err != nil {
		return err
	}
	var total int64
	c.DB.WithContext(ctx).Table("orders").Count(&total)
	var twice []string
	for id, n := range perOrder {
		if n != 1 {
			twice = append(twice, fmt.Sprintf("order %d ×%d", id, n))
		}
	}
	res.Duplicates += len(twice)
	if len(twice) > 0 {
		res.problem("order events not exactly once: %v", first(twice, 10))
	}
	if int64(len(perOrder)) != total {
		res.Lost += int(total) - len(perOrder)
		res.problem("order topic has events for %d orders, MySQL has %d", len(perOrder), total)
	}
	return nil
}

// verifyReturns checks every cancellation against Redis and MySQL: one stock return per
// cancelled order and none for any other, never paid and cancelled, each unit for resale in
// Redis's returned set exactly once (not twice, not lost), and, when anything was cancelled,
// the per-user counts Redis admits with match the slots MySQL holds.
func (c *Pipeline) verifyReturns(ctx context.Context, res *Result, prizes map[int64]prizeStock) error {
	var n struct {
		Cancelled, Returns, Stray, PaidCancelled, Paid int
	}
	err := c.DB.WithContext(ctx).Raw(`SELECT
		(SELECT COUNT(*) FROM orders WHERE status = 'cancelled') AS cancelled,
		(SELECT COUNT(*) FROM stock_returns) AS returns,
		(SELECT COUNT(*) FROM stock_returns r JOIN orders o ON o.id = r.order_id WHERE o.status <> 'cancelled') AS stray,
		(SELECT COUNT(*) FROM orders WHERE status = 'cancelled' AND paid_at IS NOT NULL) AS paid_cancelled,
		(SELECT COUNT(*) FROM orders WHERE paid_at IS NOT NULL) AS paid`).Scan(&n).Error
	if err != nil {
		return err
	}
	res.Paid = n.Paid
	if n.Returns != n.Cancelled || n.Stray > 0 {
		res.Duplicates += abs(n.Returns - n.Cancelled)
		res.problem("returns: %d cancelled orders, %d stock returns (%d for orders not cancelled)", n.Cancelled, n.Returns, n.Stray)
	}
	if n.PaidCancelled > 0 {
		res.Duplicates += n.PaidCancelled
		res.problem("%d orders both paid and cancelled", n.PaidCancelled)
	}
	if n.Cancelled == 0 {
		return nil
	}
	for i, p := range c.Prizes {
		if c.buckets(i) > 1 {
			continue // per bucket in verifyBuckets and verifyHomeBuckets
		}
		k := stock.KeysFor(c.Session.ID, p.ID)
		returned, err := c.Redis.HLen(ctx, k.Returned).Result()
		if err != nil {
			return err
		}
		resale := prizes[p.ID].resale
		if int(returned) != resale {
			res.Drift += abs(int(returned) - resale)
			res.problem("prize %d: redis holds %d returned units, mysql returned %d for resale", p.ID, returned, resale)
		}
		var slots []struct {
			UserID string
			Slots  int
			Limits int
		}
		if err := c.DB.WithContext(ctx).Raw(`SELECT user_id, SUM(slot IS NOT NULL) AS slots,
			SUM(status = 'rejected' AND reason = 'limit') AS limits FROM orders
			WHERE session_id = ? AND prize_id = ? GROUP BY user_id`, c.Session.ID, p.ID).Scan(&slots).Error; err != nil {
			return err
		}
		counts, err := c.Redis.HGetAll(ctx, k.Users).Result()
		if err != nil {
			return err
		}
		var wrong []string
		for _, s := range slots {
			got := 0
			fmt.Sscan(counts[s.UserID], &got)
			if got < s.Slots || got > s.Slots+s.Limits {
				wrong = append(wrong, fmt.Sprintf("%s: redis %d, mysql slots %d", s.UserID, got, s.Slots))
			}
		}
		if len(wrong) > 0 {
			res.problem("prize %d: per-user counts differ for %d users: %v", p.ID, len(wrong), first(wrong, 5))
		}
	}
	return nil
}

// verifyFollowEvents checks the events that follow creations: one order.cancelled per
// cancelled order and none for others; refunds only for cancelled orders, at most one each,
// and one per paid_after_cancel exception case.
func (c *Pipeline) verifyFollowEvents(ctx context.Context, res *Result, cancelledEvents, refundEvents map[int64]int) error {
	var cancelled []int64
	if err := c.DB.WithContext(ctx).Raw("SELECT id FROM orders WHERE status = 'cancelled'").Scan(&cancelled).Error; err != nil {
		return err
	}
	isCancelled := make(map[int64]bool, len(cancelled))
	var missing, twice, stray []string
	for _, id := range cancelled {
		isCancelled[id] = true
		switch cancelledEvents[id] {
		case 1:
		case 0:
			missing = append(missing, fmt.Sprint(id))
		default:
			twice = append(twice, fmt.Sprintf("order %d ×%d", id, cancelledEvents[id]))
		}
	}
	for id := range cancelledEvents {
		if !isCancelled[id] {
			stray = append(stray, fmt.Sprint(id))
		}
	}
	refunds := 0
	for id, k := range refundEvents {
		refunds += k
		if !isCancelled[id] {
			stray = append(stray, fmt.Sprintf("refund for %d", id))
		}
		if k > 1 {
			twice = append(twice, fmt.Sprintf("refund of order %d ×%d", id, k))
		}
	}
	res.Refunds = refunds
	var cases int
	if err := c.DB.WithContext(ctx).Raw("SELECT COUNT(*) FROM exception_cases WHERE kind = 'paid_after_cancel'").Scan(&cases).Error; err != nil {
		return err
	}
	res.Lost += len(missing)
	res.Duplicates += len(twice) + len(stray)
	if len(missing) > 0 {
		res.problem("cancelled orders without an order.cancelled event: %v", first(missing, 10))
	}
	if len(twice)+len(stray) > 0 {
		res.problem("follow events not exactly once: %v %v", first(twice, 10), first(stray, 10))
	}
	if cases != len(refundEvents) {
		res.problem("%d refund events for %d paid_after_cancel cases", len(refundEvents), cases)
	}
	return nil
}

func userName(i int) string { return fmt.Sprintf("crowd-%d", i) }

func first(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("… %d more", len(s)-n))
	}
	return s
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// ReadTopic reads every message a topic holds now, with the brokers' SASL and TLS settings
// from the variables the services read.
func ReadTopic(ctx context.Context, brokers []string, t event.Topic) ([]kafka.Message, error) {
	sec, err := config.LoadKafkaSecurity(os.Getenv)
	if err != nil {
		return nil, err
	}
	admin, err := event.NewAdmin(brokers, event.AdminSecurity(sec))
	if err != nil {
		return nil, err
	}
	offs, err := admin.Offsets(ctx, t.Name)
	if err != nil {
		return nil, err
	}
	var out []kafka.Message
	for _, p := range slices.Sorted(maps.Keys(offs)) {
		po := offs[p]
		if po.End <= po.First {
			continue
		}
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Dialer: sec.Dialer(), Topic: t.Name, Partition: p,
			MaxWait: 50 * time.Millisecond, MaxBytes: 8 << 20})
		if err := r.SetOffset(po.First); err != nil {
			r.Close()
			return nil, err
		}
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		for {
			m, err := r.ReadMessage(rctx)
			if err != nil {
				cancel()
				r.Close()
				return nil, fmt.Errorf("read %s/%d: %w", t.Name, p, err)
			}
			out = append(out, m)
			if m.Offset >= po.End-1 {
				break
			}
		}
		cancel()
		r.Close()
	}
	return out, nil
}
