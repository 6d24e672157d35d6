package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// PoisonKinds returns one of each kind of poison a writer of a topic the pipeline consumes
// can produce, all keyed with key so they land on the partition key names: a value of about
// 600 KB that is not an event and carries its bulk in a field a decoder quotes in its error,
// 150 values of 120 KB that are neither UTF-8 nor JSON, JSON with the wrong field types, an
// unknown schema version (header and field), and a thousand small non-JSON values in a row.
func PoisonKinds(key []byte) []kafka.Message {
	var out []kafka.Message
	add := func(value []byte, headers ...kafka.Header) {
		out = append(out, kafka.Message{Key: key, Value: value, Headers: headers})
	}
	huge := strings.Repeat("x", 600<<10)
	add([]byte(`{"v":1,"type":"` + huge + `","request_id":"` + huge[:1000] + `"}`))
	noise := bytes.Repeat([]byte{0xff, 0x00, 0x9c}, 40<<10)
	for range 150 {
		add(noise)
	}
	add([]byte(`{"v":"1","request_id":7,"session_id":"s","prize_id":[],"user_id":{},"type":3}`))
	add([]byte(`{"v":9,"request_id":"1-1-aaaaaaaa"}`), kafka.Header{Key: "schema", Value: []byte("grab.v9")})
	for i := range 1000 {
		add([]byte("not json " + strconv.Itoa(i)))
	}
	return out
}

// poisonDeadline is how soon the valid message written after the poison must be applied:
// a few seconds, whatever the poison was.
const poisonDeadline = 10 * time.Second

// writePoison produces PoisonKinds(key) to topic with w and returns how many it wrote.
func writePoison(ctx context.Context, w *kafka.Writer, key []byte) (int, error) {
	msgs := PoisonKinds(key)
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := w.WriteMessages(wctx, msgs...); err != nil {
		return 0, fmt.Errorf("write poison to %s: %w", w.Topic, err)
	}
	return len(msgs), nil
}

// poisonOnGrabs writes every kind of poison to the grab partition of the prize with the
// most stock while the crowd grabs, then grabs that prize through the gateway as five new
// users: each 202 must be an order within poisonDeadline, and the poison must be one
// exception case each.
func poisonOnGrabs(ctx context.Context, e *Env) error {
	c := e.Pipeline
	prize := len(c.Prizes) - 1
	if _, err := awaitOrders(ctx, e, prize); err != nil {
		return err
	}
	w, err := event.NewGrabWriter(c.Brokers, c.Topics.Grab.Name, event.WithSecurity(c.kafka))
	if err != nil {
		return err
	}
	defer w.Close()
	key := event.PartitionKey(c.Session.ID, c.Prizes[prize].ID)
	n, err := writePoison(ctx, w, key)
	if err != nil {
		return err
	}
	written := time.Now()
	var rids []string
	for i := range 5 {
		rid, err := c.grabOnce(ctx, fmt.Sprintf("poison-probe-%d", i), prize)
		if err != nil {
			return err
		}
		if rid != "" {
			rids = append(rids, rid)
		}
	}
	if len(rids) == 0 {
		return errors.New("every probe grab after the poison was refused (sold out?): the row tested nothing")
	}
	took, err := c.awaitApplied(ctx, written, "request_id IN ?", rids)
	if err != nil {
		return fmt.Errorf("after %d poison messages on grab partition %d: %w", n, event.PartitionOf(key, c.Topics.Grab.Partitions), err)
	}
	fmt.Fprintf(e.Log, "  %d poison messages on grab partition %d; the %d grabs admitted after them were orders %s later\n",
		n, event.PartitionOf(key, c.Topics.Grab.Partitions), len(rids), took.Round(time.Millisecond))
	return c.checkPoisonCases(ctx, c.Topics.Grab, n)
}

// poisonOnFeedback writes every kind of poison to the feedback partition of a winner's
// order, as a downstream system could, then that order's order.paid: it must be applied
// within poisonDeadline, and the poison must be one exception case each.
func poisonOnFeedback(ctx context.Context, e *Env) error {
	c := e.Pipeline
	win, err := firstWinner(ctx, e)
	if err != nil {
		return err
	}
	w, err := event.NewWriter(c.Brokers, c.Topics.Feedback.Name, event.WithSecurity(c.kafka))
	if err != nil {
		return err
	}
	defer w.Close()
	n, err := writePoison(ctx, w, []byte(win.RequestID))
	if err != nil {
		return err
	}
	written := time.Now()
	if err := c.Feedback(ctx, seckill.Feedback{RequestID: win.RequestID, Kind: seckill.FeedbackPaid}); err != nil {
		return err
	}
	took, err := c.awaitApplied(ctx, written, "request_id = ? AND paid_at IS NOT NULL", win.RequestID)
	if err != nil {
		return fmt.Errorf("order.paid after %d poison messages: %w", n, err)
	}
	fmt.Fprintf(e.Log, "  %d poison messages on feedback partition %d; the order.paid after them was applied %s later\n",
		n, event.PartitionOf([]byte(win.RequestID), c.Topics.Feedback.Partitions), took.Round(time.Millisecond))
	return c.checkPoisonCases(ctx, c.Topics.Feedback, n)
}

// probeClient is the probe grabs' client number in the history.
const probeClient = 20001

// grabOnce grabs prize (an index of c.Prizes) as user through the gateway and returns the
// request id of a 202, or "" for a refusal (sold out, limit).
func (c *Pipeline) grabOnce(ctx context.Context, user string, prize int) (string, error) {
	token, err := c.Token(user)
	if err != nil {
		return "", err
	}
	url := fmt.Sprintf("%s/api/v1/sessions/%d/prizes/%d/grab", c.CrowdTargets()[0], c.Session.ID, c.Prizes[prize].ID)
	key := user + "-probe-key"
	rid := seckill.UserRequestID(c.Session.ID, c.Prizes[prize].ID, user, key)
	for try := 1; ; try++ {
		call := c.History.Now()
		code, body, wait, err := (&Crowd{}).post(ctx, url, token, key)
		c.History.Add(grabOp(probeClient, user, c.Prizes[prize].ID, key, rid, call, c.History.Now(), code, body, err))
		switch {
		case err == nil && code == http.StatusAccepted:
			rid, _ := body["request_id"].(string)
			if rid == "" {
				return "", fmt.Errorf("202 without a request id: %v", body)
			}
			return rid, nil
		case err == nil && code == http.StatusConflict:
			return "", nil
		case try == 10 || (err == nil && code != http.StatusServiceUnavailable && code != http.StatusTooManyRequests):
			return "", fmt.Errorf("probe grab as %s: status %d %v %v", user, code, body, err)
		}
		sleepCtx(ctx, max(wait, 200*time.Millisecond))
	}
}

// awaitApplied waits until every order the condition names (a count of rows equal to the
// ids given, or one) is in MySQL, and returns how long after since that was.
func (c *Pipeline) awaitApplied(ctx context.Context, since time.Time, cond string, args ...any) (time.Duration, error) {
	want := int64(1)
	if ids, ok := args[0].([]string); ok {
		want = int64(len(ids))
	}
	for {
		var n int64
		if err := c.DB.WithContext(ctx).Table("orders").Where(cond, args...).Count(&n).Error; err != nil {
			return 0, fmt.Errorf("count orders: %w", err)
		}
		if n == want {
			return time.Since(since), nil
		}
		if time.Since(since) > poisonDeadline || ctx.Err() != nil {
			return 0, fmt.Errorf("%d of %d valid messages applied %s after the poison (want all within %s)",
				n, want, time.Since(since).Round(time.Millisecond), poisonDeadline)
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
}

// checkPoisonCases checks that each of the n poison messages written to t is one
// dead-letter exception case (cases are keyed by where the message was read, so a
// redelivery is the same case).
func (c *Pipeline) checkPoisonCases(ctx context.Context, t event.Topic, n int) error {
	var cases int64
	err := c.DB.WithContext(ctx).Table("exception_cases").
		Where("kind = ? AND case_key LIKE ?", seckill.CaseDeadLetter, t.Name+"/%").Count(&cases).Error
	if err != nil {
		return fmt.Errorf("count dead-letter cases: %w", err)
	}
	if cases != int64(n) {
		return fmt.Errorf("%d dead-letter cases from %s, want one per poison message (%d)", cases, t.Name, n)
	}
	return nil
}

// poisonOnCompensation writes every kind of poison to the compensation partition of a
// winner's prize, then a valid compensation event after it (the winner's grab again, which
// the replay finds already persisted): the reconciler's replay must get past
// all of it within poisonDeadline (its stored position reaches the partition's end), and
// the poison must be one exception case each.
func poisonOnCompensation(ctx context.Context, e *Env) error {
	c := e.Pipeline
	win, err := firstWinner(ctx, e)
	if err != nil {
		return err
	}
	var o struct {
		SessionID, PrizeID int64
		Bucket             int
		CreatedAt          time.Time
	}
	if err := c.DB.WithContext(ctx).Raw("SELECT session_id, prize_id, bucket, created_at FROM orders WHERE id = ?", win.ID).Row().
		Scan(&o.SessionID, &o.PrizeID, &o.Bucket, &o.CreatedAt); err != nil {
		return fmt.Errorf("read winner %d: %w", win.ID, err)
	}
	valid, err := event.EncodeGrab(seckill.Grab{RequestID: win.RequestID, UserID: win.UserID, SessionID: o.SessionID,
		PrizeID: o.PrizeID, Bucket: o.Bucket, AdmittedAt: o.CreatedAt})
	if err != nil {
		return err
	}
	w, err := event.NewWriter(c.Brokers, c.Topics.Compensation.Name, event.WithSecurity(c.kafka))
	if err != nil {
		return err
	}
	defer w.Close()
	n, err := writePoison(ctx, w, valid.Key)
	if err != nil {
		return err
	}
	written := time.Now()
	if err := w.WriteMessages(ctx, event.Compensation(valid, errors.New("chaos: written after the poison"), 1)); err != nil {
		return fmt.Errorf("write the valid compensation event: %w", err)
	}
	part := event.PartitionOf(valid.Key, c.Topics.Compensation.Partitions)
	for {
		ends, err := c.Admin.Offsets(ctx, c.Topics.Compensation.Name)
		if err != nil {
			return err
		}
		done, err := store.NewCatalog(c.DB, time.Now).ReplayOffsets(ctx, c.Topics.Compensation.Name)
		if err != nil {
			return err
		}
		if done[part] >= ends[part].End {
			fmt.Fprintf(e.Log, "  %d poison messages on compensation partition %d; the replay was past the valid event after them %s later\n",
				n, part, time.Since(written).Round(time.Millisecond))
			break
		}
		if time.Since(written) > poisonDeadline || ctx.Err() != nil {
			return fmt.Errorf("compensation partition %d replayed to %d of %d, %s after %d poison messages and a valid event (want all within %s)",
				part, done[part], ends[part].End, time.Since(written).Round(time.Millisecond), n, poisonDeadline)
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	return c.checkPoisonCases(ctx, c.Topics.Compensation, n)
}

// firstWinner waits for the crowd's first order and returns the oldest winner.
func firstWinner(ctx context.Context, e *Env) (Winner, error) {
	if _, err := awaitOrders(ctx, e, -1); err != nil {
		return Winner{}, err
	}
	ws, err := e.Pipeline.winners(ctx, time.Unix(0, 0))
	if err != nil || len(ws) == 0 {
		return Winner{}, fmt.Errorf("a winner: %d found, %v", len(ws), err)
	}
	return ws[0], nil
}
