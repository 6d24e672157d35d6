package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// Stock buckets in the chaos rows (docs/design.md): a scenario with Buckets splits the
// crowd's middle prize (index bucketedPrize: it sells out mid-crowd, so its buckets run dry
// one after the other and units must move) into that many buckets. Besides the checks every
// row makes prize-wide, such a prize is checked per bucket (buckets.go) and for sold_out
// answers given while units remained (the sold_out column).

// bucketedPrize is the index of the prize a scenario's Buckets applies to.
const bucketedPrize = 1

// buckets returns prize i's number of stock buckets: 1 for a prize without.
func (c *Pipeline) buckets(i int) int {
	if i < len(c.opts.Buckets) && c.opts.Buckets[i] > 1 {
		return c.opts.Buckets[i]
	}
	return 1
}

// bucketKeys returns the keys of every bucket of prize i (one set for a prize without).
func (c *Pipeline) bucketKeys(i int) []stock.Keys {
	out := make([]stock.Keys, c.buckets(i))
	for b := range out {
		out[b] = stock.BucketKeysFor(c.Session.ID, c.Prizes[i].ID, b, len(out))
	}
	return out
}

// bucketsInFlight names what keeps a prize with buckets from being drained: reservations
// pending in any bucket, units between buckets, transfers the journal has not finished.
func (c *Pipeline) bucketsInFlight(ctx context.Context) ([]string, error) {
	var parts []string
	for i, p := range c.Prizes {
		n := c.buckets(i)
		if n < 2 {
			continue
		}
		for b, k := range c.bucketKeys(i) {
			pending, err := c.Redis.HLen(ctx, k.Reserved).Result()
			if err != nil {
				return nil, err
			}
			if pending > 0 {
				parts = append(parts, fmt.Sprintf("prize %d bucket %d: %d reservations pending", p.ID, b, pending))
			}
		}
		states, err := c.Gate.Buckets(ctx, c.Session.ID, p.ID, n)
		if err != nil {
			return nil, err
		}
		if f := stock.InFlight(states); f != 0 {
			parts = append(parts, fmt.Sprintf("prize %d: %d units between buckets", p.ID, f))
		}
	}
	open, err := store.NewCatalog(c.DB, time.Now).UnfinishedTransfers(ctx)
	if err != nil {
		return nil, err
	}
	if len(open) > 0 {
		parts = append(parts, fmt.Sprintf("%d bucket transfers unfinished", len(open)))
	}
	return parts, nil
}

// DeleteBucketKeys deletes every key of every bucket of prize i (a Redis key loss of this
// pipeline's prize only: the stack is shared).
func (c *Pipeline) DeleteBucketKeys(ctx context.Context, i int) error {
	for _, k := range c.bucketKeys(i) {
		if err := c.Redis.Del(ctx, k.Meta, k.Users, k.Reserved, k.Outcomes, k.Returned, k.Transfers()).Err(); err != nil {
			return err
		}
	}
	return nil
}

// bucketCount is one bucket's orders and returns in MySQL.
type bucketCount struct {
	Bucket                         int
	Succeeded, Cancelled, Rejected int
	Resale, AfterEnd               int
}

// verifyBuckets checks each prize with buckets bucket by bucket, after the prize-wide checks:
// I1 per bucket row (orders of the bucket within its row's total, total = left + succeeded),
// Redis and MySQL converged per bucket and per prize (left, nothing pending, no unit between
// buckets, sent and received as the journal says, every transfer finished), every order in
// its user's home bucket, and Redis's per-user counts per bucket against MySQL's slots.
func (c *Pipeline) verifyBuckets(ctx context.Context, answers []Answer, res *Result) error {
	log := c.opts.Log
	cat := store.NewCatalog(c.DB, time.Now)
	for i, p := range c.Prizes {
		n := c.buckets(i)
		if n < 2 {
			continue
		}
		res.Bucketed = true
		sid, pid := c.Session.ID, p.ID
		rows, err := cat.Buckets(ctx, sid, pid)
		if err != nil {
			return err
		}
		if len(rows) != n {
			res.problem("prize %d: %d bucket rows, want %d", pid, len(rows), n)
			continue
		}
		counts := make([]bucketCount, n)
		var perBucket []bucketCount
		if err := c.DB.WithContext(ctx).Raw(`SELECT bucket, SUM(status = 'succeeded') AS succeeded, SUM(status = 'cancelled') AS cancelled,
			SUM(status = 'rejected') AS rejected FROM orders WHERE session_id = ? AND prize_id = ? GROUP BY bucket`, sid, pid).Scan(&perBucket).Error; err != nil {
			return err
		}
		var returns []bucketCount
		if err := c.DB.WithContext(ctx).Raw(`SELECT o.bucket, SUM(r.resale) AS resale, SUM(NOT r.resale) AS after_end
			FROM stock_returns r JOIN orders o ON o.id = r.order_id WHERE r.session_id = ? AND r.prize_id = ? GROUP BY o.bucket`, sid, pid).Scan(&returns).Error; err != nil {
			return err
		}
		for _, b := range perBucket {
			if b.Bucket < 0 || b.Bucket >= n {
				res.Oversold += b.Succeeded
				res.problem("prize %d: %d orders in bucket %d of %d", pid, b.Succeeded+b.Cancelled+b.Rejected, b.Bucket, n)
				continue
			}
			counts[b.Bucket].Succeeded, counts[b.Bucket].Cancelled, counts[b.Bucket].Rejected = b.Succeeded, b.Cancelled, b.Rejected
		}
		for _, r := range returns {
			if r.Bucket >= 0 && r.Bucket < n {
				counts[r.Bucket].Resale, counts[r.Bucket].AfterEnd = r.Resale, r.AfterEnd
			}
		}
		states, err := c.Gate.Buckets(ctx, sid, pid, n)
		if err != nil {
			return err
		}
		ledger, err := cat.Ledger(ctx, sid, pid, n)
		if err != nil {
			return err
		}
		transfers, err := cat.Transfers(ctx, sid, pid)
		if err != nil {
			return err
		}
		moved := 0
		for _, t := range transfers {
			if t.State != store.TransferDone && t.State != store.TransferCancelled {
				res.problem("prize %d: transfer %d (%d -> %d) still %s", pid, t.ID, t.From, t.To, t.State)
			}
			moved += t.Units
		}
		fmt.Fprintf(log, "  prize %s: %d buckets, %d transfers moved %d units\n", p.Name, n, len(transfers), moved)
		var redisLeft, mysqlLeft int64
		for b, row := range rows {
			k, st := c.bucketKeys(i)[b], states[b]
			bc := counts[b]
			fmt.Fprintf(log, "    bucket %d: row total %d left %d; succeeded %d cancelled %d rejected %d; redis left %d sent %d received %d\n",
				b, row.Total, row.Left, bc.Succeeded, bc.Cancelled, bc.Rejected, st.Left, st.Sent, st.Received)
			if bc.Succeeded > row.Total {
				res.Oversold += bc.Succeeded - row.Total
				res.problem("I1 prize %d bucket %d: %d orders for the row's total %d", pid, b, bc.Succeeded, row.Total)
			}
			if row.Total != row.Left+bc.Succeeded {
				res.problem("I1 prize %d bucket %d: total %d != left %d + succeeded %d", pid, b, row.Total, row.Left, bc.Succeeded)
			}
			want := int64(row.Left - bc.AfterEnd)
			mysqlLeft += want
			if !st.Loaded {
				res.Drift += row.Left + 1
				res.problem("I4 prize %d bucket %d: keys missing in Redis", pid, b)
				continue
			}
			redisLeft += st.Left
			if st.Left != want {
				res.Drift += abs(int(st.Left - want))
				res.problem("I4 prize %d bucket %d: redis left %d, mysql left %d", pid, b, st.Left, want)
			}
			if st.Sent != int64(ledger[b].Sent) || st.Received != int64(ledger[b].Received) {
				res.problem("prize %d bucket %d: redis sent/received %d/%d, journal %d/%d", pid, b, st.Sent, st.Received, ledger[b].Sent, ledger[b].Received)
			}
			if pending, err := c.Redis.HLen(ctx, k.Reserved).Result(); err != nil {
				return err
			} else if pending > 0 {
				res.problem("I4 prize %d bucket %d: %d reservations still pending", pid, b, pending)
			}
			if returned, err := c.Redis.HLen(ctx, k.Returned).Result(); err != nil {
				return err
			} else if int(returned) != bc.Resale {
				res.Drift += abs(int(returned) - bc.Resale)
				res.problem("prize %d bucket %d: redis holds %d returned units, mysql returned %d of the bucket's orders for resale", pid, b, returned, bc.Resale)
			}
		}
		if f := stock.InFlight(states); f != 0 {
			res.problem("I4 prize %d: %d units between buckets after the run", pid, f)
		}
		if redisLeft != mysqlLeft {
			res.problem("I4 prize %d: redis left %d over its buckets, mysql %d", pid, redisLeft, mysqlLeft)
		}
		if err := c.verifyHomeBuckets(ctx, res, i); err != nil {
			return err
		}
		if err := c.verifySoldOut(ctx, answers, res, i, int(mysqlLeft)); err != nil {
			return err
		}
	}
	return nil
}

// verifyHomeBuckets checks the per-user limit of a prize with buckets: every order is in its
// user's home bucket (so one slot counted every grab of the user), and each bucket's Redis
// per-user counts match the slots its orders hold in MySQL (a `limit` rejection by MySQL's
// prize-wide guard may leave one more in Redis).
func (c *Pipeline) verifyHomeBuckets(ctx context.Context, res *Result, i int) error {
	sid, pid, n := c.Session.ID, c.Prizes[i].ID, c.buckets(i)
	var rows []struct {
		UserID string
		Bucket int
		Slots  int
		Limits int
	}
	if err := c.DB.WithContext(ctx).Raw(`SELECT user_id, bucket, SUM(slot IS NOT NULL) AS slots,
		SUM(status = 'rejected' AND reason = 'limit') AS limits FROM orders
		WHERE session_id = ? AND prize_id = ? GROUP BY user_id, bucket`, sid, pid).Scan(&rows).Error; err != nil {
		return err
	}
	users := make([]map[string]string, n)
	for b, k := range c.bucketKeys(i) {
		var err error
		if users[b], err = c.Redis.HGetAll(ctx, k.Users).Result(); err != nil {
			return err
		}
	}
	var away, wrong []string
	limitRejections := 0
	inMySQL := make([]map[string]bool, n)
	for b := range inMySQL {
		inMySQL[b] = map[string]bool{}
	}
	for _, r := range rows {
		limitRejections += r.Limits
		if home := stock.HomeBucket(r.UserID, n); r.Bucket != home {
			away = append(away, fmt.Sprintf("%s in bucket %d, home %d", r.UserID, r.Bucket, home))
			continue
		}
		inMySQL[r.Bucket][r.UserID] = true
		got, _ := strconv.Atoi(users[r.Bucket][r.UserID])
		if got < r.Slots || got > r.Slots+r.Limits {
			wrong = append(wrong, fmt.Sprintf("%s: bucket %d redis %d, mysql slots %d", r.UserID, r.Bucket, got, r.Slots))
		}
	}
	for b, m := range users {
		for u, v := range m {
			if !inMySQL[b][u] && v != "0" {
				wrong = append(wrong, fmt.Sprintf("%s: bucket %d redis %s, no order", u, b, v))
			}
		}
	}
	sort.Strings(wrong)
	if len(away) > 0 { // a broken home-bucket rule, not a duplicate: a problem of its own
		res.problem("prize %d: orders outside their user's home bucket: %v", pid, first(away, 10))
	}
	if len(wrong) > 0 {
		res.problem("prize %d: per-user counts differ for %d users: %v", pid, len(wrong), first(wrong, 5))
	}
	if limitRejections > 0 {
		// Redis's bucket let a user past the limit and MySQL's prize-wide slots refused it:
		// not a violation (nothing was sold twice), but the home bucket should have stopped it.
		res.problem("prize %d: %d grabs rejected by MySQL's per-user guard (the home bucket admitted them)", pid, limitRejections)
	}
	return nil
}

// othersCache is the gateways' SECKILL_BUCKET_OTHERS_CACHE: how long a read of every bucket
// answers the grabs of a prize whose home bucket is dry.
func (c *Pipeline) othersCache() time.Duration {
	for _, v := range []string{c.opts.GatewayEnv["SECKILL_BUCKET_OTHERS_CACHE"], os.Getenv("SECKILL_BUCKET_OTHERS_CACHE")} {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
	}
	return 100 * time.Millisecond
}

// verifySoldOut counts the sold_out answers of prize i (with buckets) given while units
// remained, the rule of docs/design.md ("The chaos rows with buckets"). An answer sent at
// s and received at t is wrong when
//
//	left at the end + units admitted after t − units that came back into Redis after s − W > 0
//
// where "admitted after t" counts the orders that took a unit (succeeded or cancelled) whose
// admission (orders.admitted_at, stamped by the gateway before its script ran) is later than
// t, "came back" counts the returns for resale whose Redis step was stamped (redis_done_at,
// after the script) later than s − W and the units drift gave Redis back (audit entries
// correct_redis_stock upwards, recorded after the script) later than s − W, and W is
// SECKILL_BUCKET_OTHERS_CACHE: the gateway decided between s and t, from a read of every
// bucket at most W old. Every unit in that sum was therefore in some bucket or between
// buckets when the gateway read them, and the prize was not sold out.
func (c *Pipeline) verifySoldOut(ctx context.Context, answers []Answer, res *Result, i, leftAtEnd int) error {
	sid, pid := c.Session.ID, c.Prizes[i].ID
	w := c.othersCache()
	var admitted, returned []time.Time
	if err := c.DB.WithContext(ctx).Raw(`SELECT admitted_at FROM orders WHERE session_id = ? AND prize_id = ?
		AND status IN ('succeeded', 'cancelled') ORDER BY admitted_at`, sid, pid).Scan(&admitted).Error; err != nil {
		return err
	}
	if err := c.DB.WithContext(ctx).Raw(`SELECT redis_done_at FROM stock_returns WHERE session_id = ? AND prize_id = ?
		AND resale AND redis_done_at IS NOT NULL ORDER BY redis_done_at`, sid, pid).Scan(&returned).Error; err != nil {
		return err
	}
	var raised []unitsBack
	if err := c.DB.WithContext(ctx).Raw(`SELECT at, after_value - before_value AS units FROM audit_log WHERE session_id = ? AND prize_id = ?
		AND action = 'correct_redis_stock' AND after_value > before_value`, sid, pid).Scan(&raised).Error; err != nil {
		return err
	}
	for _, t := range returned {
		raised = append(raised, unitsBack{At: t, Units: 1})
	}
	var outs []Answer
	for _, a := range answers {
		if a.Prize == i && a.Code == 409 && a.Status == "sold_out" {
			outs = append(outs, a)
		}
	}
	early, worst, worstAt := soldOutsWhileUnitsRemained(outs, leftAtEnd, admitted, raised, w)
	res.SoldOutEarly += early
	fmt.Fprintf(c.opts.Log, "  prize %s: %d sold_out answers, %d while units remained\n", c.Prizes[i].Name, len(outs), early)
	if early > 0 {
		res.problem("prize %d: %d sold_out answers while units remained (at worst %d units, answered %s)", pid, early, worst,
			worstAt.UTC().Format("15:04:05.000"))
	}
	return nil
}

// bucketRow makes a scenario a stock-buckets row: the middle prize in four buckets, two units
// per user (users with several clicks may buy twice, prize-wide), the usual consumers.
func bucketRow(sc Scenario) Scenario {
	sc.Buckets, sc.Limit = 4, 2
	if sc.Consumers == 0 {
		sc.Consumers = 2
	}
	if sc.Repeats == 0 {
		sc.Repeats = 0.1
	}
	return sc
}

// bucketCrowd is the flash crowd on a 4-bucket prize: its buckets run dry one after the other
// while the others hold units, so the rebalance loop must move units and the gateways answer
// 503 rebalancing (never sold_out) until every bucket is empty.
func bucketCrowd() Scenario {
	return bucketRow(Scenario{Name: "buckets: flash crowd on a 4-bucket prize", Short: true})
}

// bucketConsumersKilled kills -9 both consumers at once while the bucketed prize's batches
// are in flight, restarts them, and kills the first again: batches of several buckets are
// cut between their commit and their settlement and redelivered.
func bucketConsumersKilled() Scenario {
	return bucketRow(Scenario{Name: "buckets: consumers killed mid-batch", Short: true, At: 0.08,
		During: func(ctx context.Context, e *Env) error {
			c := e.Pipeline
			n, err := awaitOrders(ctx, e, bucketedPrize)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.Log, "  both consumers killed with %d orders of the bucketed prize committed\n", n)
			for _, p := range c.Consumers {
				p.Kill()
			}
			for i := range c.Consumers {
				if err := c.RestartConsumer(ctx, i); err != nil {
					return err
				}
			}
			sleepCtx(ctx, 700*time.Millisecond)
			c.Consumers[0].Kill()
			return c.RestartConsumer(ctx, 0)
		}})
}

// bucketCancellationStorm cancels 30% of the winners while the crowd (paced over 10 s in
// either suite, so the consumers' first batches come well before its end) still grabs: each
// unit goes back to its order's bucket and is sold again, there or, moved, in another.
func bucketCancellationStorm() Scenario {
	return bucketRow(Scenario{Name: "buckets: cancellation storm with resale", Short: true, At: 0.1, Pace: 10 * time.Second,
		RegrabAfterCancel: true, During: cancellationStorm(0.3)})
}

// bucketKeyLoss deletes every key of every bucket of the bucketed prize as soon as the
// transfers journal holds its first transfer (so a transfer may be in flight and the ledger
// matters): the reconciler rebuilds each bucket from its row, its orders and the journal.
func bucketKeyLoss() Scenario {
	return bucketRow(Scenario{Name: "buckets: Redis key loss and rebuild", Short: true, At: 0.05, RedisMayForget: true,
		During: func(ctx context.Context, e *Env) error {
			c := e.Pipeline
			p := c.Prizes[bucketedPrize]
			cat := store.NewCatalog(c.DB, time.Now)
			var transfers []store.Transfer
			for t := time.Now(); len(transfers) == 0; sleepCtx(ctx, 20*time.Millisecond) {
				var err error
				if transfers, err = cat.Transfers(ctx, c.Session.ID, p.ID); err != nil {
					return err
				}
				if len(transfers) == 0 && (time.Since(t) > 30*time.Second || ctx.Err() != nil) {
					return errors.New("no bucket transfer within 30 s: the row would test no rebuild with transfers")
				}
			}
			if err := c.DeleteBucketKeys(ctx, bucketedPrize); err != nil {
				return err
			}
			n := c.buckets(bucketedPrize)
			fmt.Fprintf(e.Log, "  every key of the prize's %d buckets deleted, transfer %d %s\n", n, transfers[0].ID, transfers[0].State)
			// The reconciler (every second) must rebuild them while the sale goes on, not only
			// the last run after the crowd.
			for t := time.Now(); ; sleepCtx(ctx, 50*time.Millisecond) {
				states, err := c.Gate.Buckets(ctx, c.Session.ID, p.ID, n)
				loaded := 0
				for _, st := range states {
					if st.Loaded {
						loaded++
					}
				}
				if err == nil && loaded == n {
					fmt.Fprintf(e.Log, "  every bucket rebuilt %s later\n", time.Since(t).Round(10*time.Millisecond))
					return nil
				}
				if time.Since(t) > 30*time.Second || ctx.Err() != nil {
					return fmt.Errorf("%d of %d buckets rebuilt 30 s after the loss (last error %v)", loaded, n, err)
				}
			}
		}})
}

// bucketPrimaryKilled (cluster) kills -9 the Redis primary of a bucket (1 or above) whose slot
// lives on another primary than bucket 0's, 5% into the crowd: that bucket's users hear 503
// until its replica is promoted, the other buckets sell, and drift per bucket corrects what
// the failover lost.
func bucketPrimaryKilled() Scenario {
	return bucketRow(Scenario{Name: "cluster buckets: kill -9 the Redis primary of one bucket", Short: true, At: 0.05, Consumers: 3, RedisMayForget: true,
		During: func(ctx context.Context, e *Env) error {
			c := e.Pipeline
			keys := c.bucketKeys(bucketedPrize)
			home, err := c.redisPrimaryOf(ctx, keys[0].Meta)
			if err != nil {
				return err
			}
			for b := 1; b < len(keys); b++ {
				node, err := c.redisPrimaryOf(ctx, keys[b].Meta)
				if err != nil {
					return err
				}
				if node != home {
					fmt.Fprintf(e.Log, "  bucket %d on %s, bucket 0 on %s\n", b, node, home)
					return failOverRedisKey(ctx, e, keys[b].Meta)
				}
			}
			return fmt.Errorf("every bucket on %s, bucket 0's primary: the row would test nothing", home)
		}})
}

// skewToBucketZero sends half the clicks on the bucketed prize (a seeded half) to users whose
// home bucket is 0: a uniform crowd drains the buckets evenly and the rebalance loop has
// little to move, while a hot bucket runs dry with units left elsewhere, every run, so its
// users meet 503 rebalancing and transfers. A remapped click keeps its key and goes to the
// next user at or after its own whose home is bucket 0.
func skewToBucketZero(clicks []Click, n, users int, seed uint64) {
	home0 := make([]int, users) // home0[u]: the first user at or after u (wrapping) homed in bucket 0
	next := -1
	for pass := 0; pass < 2; pass++ {
		for u := users - 1; u >= 0; u-- {
			if stock.HomeBucket(userName(u), n) == 0 {
				next = u
			}
			home0[u] = next
		}
	}
	if next < 0 {
		return
	}
	for i, k := range clicks {
		if k.Prize == bucketedPrize && chance(seed, "skew", k.Key) < 0.5 {
			clicks[i].User = home0[k.User]
		}
	}
}

// unitsBack is units that came back into a prize's Redis stock at a time: a return for
// resale (redis_done_at) or drift raising a bucket (its audit entry).
type unitsBack struct {
	At    time.Time
	Units int
}

// soldOutsWhileUnitsRemained applies verifySoldOut's rule to the sold_out answers outs:
// admitted holds the admission times of the orders that took a unit, sorted; back the units
// that came back into Redis. It returns how many answers were wrong, the most units one of
// them left behind, and when that one was answered.
func soldOutsWhileUnitsRemained(outs []Answer, leftAtEnd int, admitted []time.Time, back []unitsBack, w time.Duration) (int, int, time.Time) {
	early, worst := 0, 0
	var worstAt time.Time
	for _, a := range outs {
		from := a.Sent.Add(-w)
		came := 0
		for _, b := range back {
			if b.At.After(from) {
				came += b.Units
			}
		}
		later := len(admitted) - sort.Search(len(admitted), func(k int) bool { return admitted[k].After(a.At) })
		if units := leftAtEnd + later - came; units > 0 {
			early++
			if units > worst {
				worst, worstAt = units, a.At
			}
		}
	}
	return early, worst, worstAt
}
