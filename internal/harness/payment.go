package harness

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/internal/history"
	"github.com/seckill-pipeline/seckill/pkg/config"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// Winner is a succeeded order as the harness sees it appear in MySQL.
type Winner struct {
	ID        int64
	RequestID string
	UserID    string
	CreatedAt time.Time
}

// winners returns the succeeded orders stored since a time, oldest first. (Not "ids above
// the last seen": order ids are drawn at INSERT, and concurrent transactions commit out of
// id order, so a high-water mark on ids misses orders committed late.)
func (c *Pipeline) winners(ctx context.Context, since time.Time) ([]Winner, error) {
	var out []Winner
	err := c.DB.WithContext(ctx).Raw(`SELECT id, request_id, user_id, created_at FROM orders
		WHERE created_at >= ? AND status = 'succeeded' ORDER BY id`, since.UTC()).Scan(&out).Error
	return out, err
}

// Feedback writes downstream order feedback to the pipeline's feedback topic, as a downstream
// order system would (keyed by request id).
func (c *Pipeline) Feedback(ctx context.Context, fs ...seckill.Feedback) error {
	if len(fs) == 0 {
		return nil
	}
	c.feedbackOnce.Do(func() {
		c.feedback, c.feedbackErr = event.NewWriter(c.Brokers, c.Topics.Feedback.Name, event.WithSecurity(c.kafka))
	})
	if c.feedbackErr != nil {
		return c.feedbackErr
	}
	msgs := make([]kafka.Message, len(fs))
	for i, f := range fs {
		if f.At.IsZero() {
			f.At = time.Now()
		}
		m, err := event.EncodeFeedback(f)
		if err != nil {
			return err
		}
		msgs[i] = m
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	call := c.History.Now()
	err := c.feedback.WriteMessages(wctx, msgs...)
	ret := c.History.Now()
	for _, f := range fs {
		op := history.Op{Client: downstreamClient, Kind: history.Feedback, RID: f.RequestID, Call: call, Return: ret, Code: 1,
			Out: joinReason(string(f.Kind), string(f.Reason))}
		if prize, ok := prizeOf(f.RequestID); ok {
			op.Prize = prize
		}
		if err != nil {
			op.Code, op.Err = 0, err.Error()
		}
		c.History.Add(op)
	}
	return err
}

// downstreamClient is the downstream order system's client number in the history.
const downstreamClient = 20000

// prizeOf reads the prize id out of a request id (<session>-<prize>-<key>).
func prizeOf(rid string) (int64, bool) {
	parts := strings.SplitN(rid, "-", 3)
	if len(parts) != 3 {
		return 0, false
	}
	id, err := strconv.ParseInt(parts[1], 10, 64)
	return id, err == nil
}

// chance is a seeded number in [0, 1) for one request id: the same order gets the same fate
// in a rerun with the same seed.
func chance(seed uint64, salt, rid string) float64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d|%s|%s", seed, salt, rid)
	// FNV of near-identical strings is not uniform enough by itself: mix (splitmix64).
	z := h.Sum64() + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return float64(z>>11) / float64(1<<53)
}

var downstreamReasons = []seckill.Reason{seckill.ReasonBuyerCancelled, seckill.ReasonPaymentFailed, seckill.ReasonMerchantCancelled}

// watchWinners calls fn with every batch of new winners, every 100 ms, until done is closed
// (and once more after it, for the last ones), or ctx ends.
func watchWinners(ctx context.Context, e *Env, done <-chan struct{}, fn func([]Winner) error) error {
	seen := map[int64]bool{}
	last := time.Unix(0, 0) // the first poll takes every winner so far
	poll := func() error {
		// Orders stored a moment before the last poll but committed after it are in the
		// overlap; seen keeps each winner to one call.
		since := last.Add(-2 * time.Second)
		last = time.Now()
		ws, err := e.Pipeline.winners(ctx, since)
		if err != nil {
			return err
		}
		fresh := ws[:0]
		for _, w := range ws {
			if !seen[w.ID] {
				seen[w.ID] = true
				fresh = append(fresh, w)
			}
		}
		if len(fresh) == 0 {
			return nil
		}
		return fn(fresh)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-done:
			return poll()
		case <-time.After(100 * time.Millisecond):
		}
		if err := poll(); err != nil {
			return err
		}
	}
}

// cancellationStorm makes frac of the winners cancel while the crowd is still grabbing:
// each cancellation is sent twice at once (a downstream retry) and a third time a moment
// later (a redelivery), with a reason drawn from the downstream ones.
func cancellationStorm(frac float64) func(ctx context.Context, e *Env) error {
	return func(ctx context.Context, e *Env) error {
		var late []seckill.Feedback
		sent, winners := 0, 0
		err := watchWinners(ctx, e, e.CrowdDone(), func(ws []Winner) error {
			winners += len(ws)
			out := late
			late = nil
			for _, w := range ws {
				if chance(e.Seed, "cancel", w.RequestID) >= frac {
					continue
				}
				r := downstreamReasons[int(chance(e.Seed, "reason", w.RequestID)*3)]
				f := seckill.Feedback{RequestID: w.RequestID, Kind: seckill.FeedbackCancelled, Reason: r}
				out = append(out, f, f)
				late = append(late, f)
				sent++
			}
			return e.Pipeline.Feedback(ctx, out...)
		})
		if err == nil {
			err = e.Pipeline.Feedback(ctx, late...)
		}
		fmt.Fprintf(e.Log, "  storm: %d of %d winners cancelled while the crowd grabbed (each sent 3 times)\n", sent, winners)
		if err == nil && sent == 0 {
			// Otherwise the row passes as a plain crowd, testing no cancellation at all.
			err = fmt.Errorf("the storm cancelled none of %d winners seen while the crowd grabbed", winners)
		}
		return err
	}
}

// payer plays a downstream order system that pays frac of the winners promptly (within a
// poll, 100 ms, of their order appearing) until done; the others never pay (the payment
// timeout cancels them). It returns how many it paid.
func payer(ctx context.Context, e *Env, frac float64, done <-chan struct{}) (paid, winners int, err error) {
	err = watchWinners(ctx, e, done, func(ws []Winner) error {
		winners += len(ws)
		var out []seckill.Feedback
		for _, w := range ws {
			if chance(e.Seed, "pay", w.RequestID) < frac {
				out = append(out, seckill.Feedback{RequestID: w.RequestID, Kind: seckill.FeedbackPaid})
			}
		}
		paid += len(out)
		return e.Pipeline.Feedback(ctx, out...)
	})
	return paid, winners, err
}

// neverPay is the sale of the closing note: downstream pays four fifths of the winners
// within moments; a fifth never pay, the payment timeout cancels them, and the crowd (still
// grabbing) buys their units again.
func neverPay(timeout time.Duration) func(ctx context.Context, e *Env) error {
	return func(ctx context.Context, e *Env) error {
		// Downstream keeps paying after the crowd (the consumers may still be persisting its
		// last grabs) until the last winners' timeouts fell due and the reconciler (every
		// second) cancelled them, so every unpaid order is cancelled when the sale is counted.
		done := make(chan struct{})
		go func() {
			select {
			case <-ctx.Done():
			case <-e.CrowdDone():
				time.Sleep(timeout + 2*time.Second)
			}
			close(done)
		}()
		paid, winners, err := payer(ctx, e, 0.8, done)
		fmt.Fprintf(e.Log, "  downstream paid %d of %d winners\n", paid, winners)
		return err
	}
}

// paidCancelledRace sends, for every winner, reports that race each other and the
// reconciler's payment timeout: a payment timed right around the timeout (some land before
// the reconciler cancels, some after: those are answered by a refund event), a cancellation
// and a payment in one write in either order, or nothing (the timeout cancels).
func paidCancelledRace(timeout time.Duration) func(ctx context.Context, e *Env) error {
	return func(ctx context.Context, e *Env) error {
		var mu sync.Mutex
		var timed []seckill.Feedback
		var wg sync.WaitGroup
		counts := map[string]int{}
		rng := rand.New(rand.NewPCG(e.Seed, 7))
		flush := func() error {
			mu.Lock()
			out := timed
			timed = nil
			mu.Unlock()
			return e.Pipeline.Feedback(ctx, out...)
		}
		// The timed payments go out as they fall due, every 50 ms.
		stopFlusher := make(chan struct{})
		flusherErr := make(chan error, 1)
		go func() {
			for {
				select {
				case <-stopFlusher:
					flusherErr <- flush()
					return
				case <-time.After(50 * time.Millisecond):
				}
				if err := flush(); err != nil {
					flusherErr <- err
					return
				}
			}
		}()
		err := watchWinners(ctx, e, e.CrowdDone(), func(ws []Winner) error {
			var now []seckill.Feedback
			for _, w := range ws {
				p := seckill.Feedback{RequestID: w.RequestID, Kind: seckill.FeedbackPaid}
				c := seckill.Feedback{RequestID: w.RequestID, Kind: seckill.FeedbackCancelled,
					Reason: downstreamReasons[int(chance(e.Seed, "reason", w.RequestID)*3)]}
				switch d := chance(e.Seed, "race", w.RequestID); {
				case d < 0.4:
					// Due at created_at + timeout, and the reconciler runs every second: a
					// payment from half a second before to a second after races it.
					at := w.CreatedAt.Add(timeout + time.Duration(rng.Int64N(int64(1500*time.Millisecond))) - 500*time.Millisecond)
					counts["paid around the timeout"]++
					wg.Add(1)
					time.AfterFunc(time.Until(at), func() {
						defer wg.Done()
						mu.Lock()
						timed = append(timed, p)
						mu.Unlock()
					})
				case d < 0.55:
					counts["cancelled then paid"]++
					now = append(now, c, p)
				case d < 0.7:
					counts["paid then cancelled"]++
					now = append(now, p, c)
				default:
					counts["never paid"]++
				}
			}
			return e.Pipeline.Feedback(ctx, now...)
		})
		wg.Wait()
		close(stopFlusher)
		err = errors.Join(err, <-flusherErr)
		fmt.Fprintf(e.Log, "  race: %v\n", counts)
		return err
	}
}

// cutBetweenCommitAndReturn cuts the consumers off from Redis (their proxy drops every
// connection) during a cancellation storm, so cancellations commit in MySQL and their Redis
// returns fail, then kills both consumers with SIGKILL while returns are pending, restores
// Redis and restarts them. Redeliveries and the reconciler's sweep must give every unit back
// exactly once.
func cutBetweenCommitAndReturn(proxy **Proxy) func(ctx context.Context, e *Env) error {
	storm := cancellationStorm(0.3)
	return func(ctx context.Context, e *Env) error {
		stormErr := make(chan error, 1)
		go func() { stormErr <- storm(ctx, e) }()
		time.Sleep(time.Second) // cancellations flowing
		(*proxy).Cut(true)
		var pending int64
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && pending == 0; time.Sleep(100 * time.Millisecond) {
			if err := e.Pipeline.DB.WithContext(ctx).Raw("SELECT COUNT(*) FROM stock_returns WHERE redis_done_at IS NULL").Scan(&pending).Error; err != nil {
				return err
			}
		}
		time.Sleep(500 * time.Millisecond)
		for _, p := range e.Pipeline.Consumers {
			p.Kill()
		}
		(*proxy).Cut(false)
		for i := range e.Pipeline.Consumers {
			if err := e.Pipeline.RestartConsumer(ctx, i); err != nil {
				return err
			}
		}
		fmt.Fprintf(e.Log, "  consumers killed with %d+ cancellations committed in MySQL and not returned to Redis\n", pending)
		err := <-stormErr
		if pending == 0 {
			return errors.Join(err, errors.New("no cancellation was cut between its commit and its Redis return: the scenario tested nothing"))
		}
		return err
	}
}

// consumerRedisProxy routes the consumers' Redis through a proxy the scenario can cut.
func consumerRedisProxy(proxy **Proxy) func(seed uint64) (map[string]string, func(), error) {
	return func(seed uint64) (map[string]string, func(), error) {
		p, err := NewProxy(env("SECKILL_REDIS_ADDR", config.DefaultRedisAddr), seed, 0, 0)
		if err != nil {
			return nil, nil, err
		}
		*proxy = p
		return map[string]string{"SECKILL_REDIS_ADDR": p.Addr()}, func() { p.Close() }, nil
	}
}

// timeoutsWhileKeysLost makes a payment timeout fire while Redis has lost a prize's keys,
// every run, by arranging each precondition and waiting for it (bounded) instead of hoping
// the crowd's timing provides it (it did in half the runs of one seed):
//
//  1. Downstream pays half the first winners, then stops paying, and its reports are read
//     (feedback lag 0): from here no report is in flight that could make an order paid.
//  2. An unpaid order of the prize with the most stock, whose creation event was published
//     within the last half second: it falls due (timeout 2s) at least 1.5s later, so after
//     the keys are gone. Only that prize: one the crowd has sold out gets no admissions, so
//     its partition never lags, and the reconciler rightly rebuilds its keys at once (a run
//     whose only fresh orders were the smallest prize's, the others' partitions still being
//     assigned, saw every timeout find its keys rebuilt and tested nothing).
//  3. The consumers die (SIGKILL: a SIGSTOP would freeze their open transactions and with
//     them the stock rows every writer locks), and the crowd's next admissions of that prize
//     pile up on its grab partition: the reconciler's rebuild waits for that partition, so
//     its keys stay lost until the consumers are back.
//  4. The prizes' keys are deleted (the pipeline's own: the stack is shared) and the
//     scenario waits until the reconciler cancelled a due order whose unit cannot go back
//     to Redis (its return waits for the keys), then a run more, and restarts the consumers.
//
// Once the consumers are back the reconciler rebuilds the keys from MySQL, counting those
// units once, and its sweep finds them done.
func timeoutsWhileKeysLost(ctx context.Context, e *Env) error {
	c := e.Pipeline
	db := c.DB.WithContext(ctx)
	stopPaying := make(chan struct{})
	payErr := make(chan error, 1)
	go func() {
		paid, winners, err := payer(ctx, e, 0.5, stopPaying)
		fmt.Fprintf(e.Log, "  downstream paid %d of the first %d winners, then stopped paying\n", paid, winners)
		payErr <- err
	}()
	wait := func(what string, d time.Duration, done func() (bool, error)) error {
		for deadline := time.Now().Add(d); ; time.Sleep(50 * time.Millisecond) {
			ok, err := done()
			if err != nil || ok {
				return err
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: not within %s, the scenario would test nothing", what, d)
			}
		}
	}
	count := func(query string, args ...any) (int64, error) {
		var n int64
		err := db.Raw(query, args...).Scan(&n).Error
		return n, err
	}
	// 1. Half the first 20 winners paid, and every report read.
	if err := wait("20 winners", 30*time.Second, func() (bool, error) {
		n, err := count("SELECT COUNT(*) FROM orders WHERE status = 'succeeded'")
		return n >= 20, err
	}); err != nil {
		close(stopPaying)
		return errors.Join(err, <-payErr)
	}
	close(stopPaying)
	if err := <-payErr; err != nil {
		return err
	}
	if err := wait("downstream's reports read", 20*time.Second, func() (bool, error) {
		n, err := c.lag(ctx, c.Env["SECKILL_FEEDBACK_GROUP"], c.Topics.Feedback)
		return n == 0, err
	}); err != nil {
		return err
	}
	// 2. A fresh unpaid order of the prize with the most stock: published within the last
	// 500 ms (the payment timeout is 2s).
	big := c.Prizes[0]
	for _, p := range c.Prizes[1:] {
		if p.StockPerSession > big.StockPerSession {
			big = p
		}
	}
	var fresh struct{ RequestID string }
	if err := wait(big.Name+": an unpaid order published in the last 500ms", 20*time.Second, func() (bool, error) {
		// Published: stamped by the relay, or (published from memory) its batch recorded, when
		// the payment clock starts at created_at.
		err := db.Raw(`SELECT o.request_id FROM orders o WHERE o.status = 'succeeded' AND o.paid_at IS NULL
			AND o.prize_id = ? AND COALESCE(o.event_published_at, o.created_at) > ?
			AND (o.event_published_at IS NOT NULL OR o.grab_seq <
				(SELECT g.next_seq FROM order_event_progress g WHERE g.grab_partition = o.grab_partition))
			ORDER BY COALESCE(o.event_published_at, o.created_at) DESC LIMIT 1`,
			big.ID, time.Now().Add(-500*time.Millisecond).UTC()).Scan(&fresh).Error
		return fresh.RequestID != "", err
	}); err != nil {
		return err
	}
	// 3. The consumers die; admissions pile up on a prize's partition.
	for _, p := range c.Consumers {
		p.Kill()
	}
	partitions, err := c.Admin.Partitions(ctx, c.Topics.Grab.Name)
	if err != nil {
		return err
	}
	bigPartition := event.PartitionOf(event.PartitionKey(c.Session.ID, big.ID), partitions)
	if err := wait(big.Name+": grabs piling up while the consumers are dead", 10*time.Second, func() (bool, error) {
		lag, err := c.Admin.Lag(ctx, c.Env["SECKILL_CONSUMER_GROUP"], c.Topics.Grab)
		return lag[bigPartition] > 0, err
	}); err != nil {
		return err
	}
	// 4. The keys are lost; a timeout fires while they are.
	for _, p := range c.Prizes {
		k := stock.KeysFor(c.Session.ID, p.ID)
		if err := c.Redis.Del(ctx, k.Meta, k.Users, k.Reserved, k.Outcomes, k.Returned).Err(); err != nil {
			return err
		}
	}
	var waiting int64
	if err := wait(big.Name+": a payment timeout while the keys are lost", 15*time.Second, func() (bool, error) {
		var err error
		waiting, err = count(`SELECT COUNT(*) FROM stock_returns WHERE redis_done_at IS NULL AND reason = ? AND prize_id = ?`,
			string(seckill.ReasonPaymentTimeout), big.ID)
		return waiting > 0, err
	}); err != nil {
		return err
	}
	time.Sleep(1200 * time.Millisecond) // another reconciler run with the keys still gone
	for i := range c.Consumers {
		if err := c.RestartConsumer(ctx, i); err != nil {
			return err
		}
	}
	fmt.Fprintf(e.Log, "  %d+ payment timeouts fired while the keys were lost (the freshest unpaid order: %s)\n", waiting, fresh.RequestID)
	return nil
}

func sum(m map[int]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// logPrizes prints, per prize, where its units went: sold (ever), cancelled, back for resale
// or after the session, resold, left.
func (c *Pipeline) logPrizes(ctx context.Context, log io.Writer) error {
	cat := store.NewCatalog(c.DB, time.Now)
	for _, p := range c.Prizes {
		st, err := cat.PrizeStock(ctx, c.Session.ID, p.ID) // over its buckets, if any
		if err != nil {
			return err
		}
		var row struct {
			Succeeded, Cancelled, Paid, Resale, AfterEnd int
		}
		err = c.DB.WithContext(ctx).Raw(`SELECT
			(SELECT COUNT(*) FROM orders o WHERE o.session_id = @s AND o.prize_id = @p AND o.status = 'succeeded') AS succeeded,
			(SELECT COUNT(*) FROM orders o WHERE o.session_id = @s AND o.prize_id = @p AND o.status = 'cancelled') AS cancelled,
			(SELECT COUNT(*) FROM orders o WHERE o.session_id = @s AND o.prize_id = @p AND o.paid_at IS NOT NULL) AS paid,
			(SELECT COUNT(*) FROM stock_returns r WHERE r.session_id = @s AND r.prize_id = @p AND r.resale) AS resale,
			(SELECT COUNT(*) FROM stock_returns r WHERE r.session_id = @s AND r.prize_id = @p AND NOT r.resale) AS after_end`,
			map[string]any{"s": c.Session.ID, "p": p.ID}).Scan(&row).Error
		if err != nil {
			return err
		}
		fmt.Fprintf(log, "  prize %s: stock %d, winners %d (paid %d, still unpaid %d, cancelled %d), units back for resale %d (after the session %d), resold %d, left %d\n",
			p.Name, st.Total, row.Succeeded+row.Cancelled, row.Paid, row.Succeeded-row.Paid, row.Cancelled, row.Resale, row.AfterEnd,
			max(0, row.Succeeded+row.Cancelled-st.Total), st.Left)
	}
	return nil
}
