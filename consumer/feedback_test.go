package main

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/retry"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// sold persists n admitted grabs (users u0..u(n-1)) and returns their request ids.
func (e *env) sold(t *testing.T, n int) []string {
	t.Helper()
	msgs := e.admit(t, n)
	if err := e.processor(t, store.NewOrders(e.db)).Process(e.ctx, msgs); err != nil {
		t.Fatal(err)
	}
	rids := make([]string, n)
	for i := range n {
		rids[i] = seckill.RequestID(e.session, e.prize, "key-"+pad8(i))
	}
	return rids
}

func pad8(i int) string {
	s := strconv.Itoa(i)
	for len(s) < 8 {
		s = "0" + s
	}
	return s
}

func (e *env) feedbackProcessor(t *testing.T, gate unitReturner) *feedbackProcessor {
	m := newMetrics(prometheus.NewRegistry())
	return &feedbackProcessor{orders: store.NewOrders(e.db), gate: gate, returns: store.NewReturns(e.db), deadLetters: e.deadLetters(t, m.deadLetters),
		policy:  retry.Policy{Immediate: 2, Backoff: 2, Base: time.Millisecond, Max: 5 * time.Millisecond, Jitter: retry.FullJitter},
		metrics: newFeedbackMetrics(prometheus.NewRegistry()), log: slog.New(slog.DiscardHandler), now: time.Now}
}

func feedbackMsg(t *testing.T, e *env, offset int64, f seckill.Feedback) kafka.Message {
	t.Helper()
	if f.At.IsZero() {
		f.At = time.Now()
	}
	m, err := event.EncodeFeedback(f)
	if err != nil {
		t.Fatal(err)
	}
	m.Topic, m.Offset = e.topics.Feedback.Name, offset
	return m
}

func (e *env) redisLeft(t *testing.T) int {
	t.Helper()
	n, err := e.rdb.HGet(e.ctx, stock.KeysFor(e.session, e.prize).Meta, "left").Int()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// One batch of downstream feedback: a payment, a cancellation and its duplicate, a report for
// an order that does not exist, and a message that is not feedback at all. The cancelled
// unit is back in MySQL and Redis once; the unknown order is an exception case; the poison
// is dead-lettered; everything is accounted for, so the offsets may be committed.
func TestFeedbackBatchAppliedWithTheGrabTopicsCare(t *testing.T) {
	e := newEnv(t, 3, 3, 1)
	rids := e.sold(t, 3)
	p := e.feedbackProcessor(t, e.gate)
	cancelled := seckill.Feedback{RequestID: rids[1], Kind: seckill.FeedbackCancelled, Reason: seckill.ReasonBuyerCancelled}
	batch := []kafka.Message{
		feedbackMsg(t, e, 0, seckill.Feedback{RequestID: rids[0], Kind: seckill.FeedbackPaid}),
		feedbackMsg(t, e, 1, cancelled),
		{Topic: e.topics.Feedback.Name, Offset: 2, Key: []byte(rids[2]), Value: []byte(`{"v":1,"type":"order.refunded"}`)},
		feedbackMsg(t, e, 3, cancelled),
		feedbackMsg(t, e, 4, seckill.Feedback{RequestID: seckill.RequestID(e.session, e.prize, "never-was-1"), Kind: seckill.FeedbackPaid}),
	}
	if err := p.Process(e.ctx, batch); err != nil {
		t.Fatal(err)
	}
	if err := p.Process(e.ctx, batch[1:2]); err != nil { // redelivered after a crash
		t.Fatal(err)
	}
	if left, _ := e.stock(t); left != 1 || e.redisLeft(t) != 1 {
		t.Fatalf("mysql left %d, redis left %d; want the one cancelled unit back in both", left, e.redisLeft(t))
	}
	if n := e.count(t, "status = 'cancelled'"); n != 1 {
		t.Fatalf("%d cancelled orders, want 1", n)
	}
	if n := e.count(t, "paid_at IS NOT NULL"); n != 1 {
		t.Fatalf("%d paid orders, want 1", n)
	}
	l, _ := e.gate.Lookup(e.ctx, rids[1])
	if l.Status.State != "cancelled" || l.Status.Reason != "buyer_cancelled" {
		t.Fatalf("status %+v, want cancelled buyer_cancelled", l.Status)
	}
	dl := readAll(t, e.brokers, e.topics.DeadLetter)
	if len(dl) != 1 || header(dl[0], "origin-topic") != e.topics.Feedback.Name || header(dl[0], "origin-offset") != "2" {
		t.Fatalf("dead letters %v", dl)
	}
	cases, err := store.NewExceptions(e.db).CountByKind(e.ctx)
	if err != nil || cases[seckill.CaseUnknownOrder] != 1 || len(cases) != 1 {
		t.Fatalf("exception cases %v %v", cases, err)
	}
	if got := testutil.ToFloat64(p.metrics.exceptions.WithLabelValues(seckill.CaseUnknownOrder)); got != 1 {
		t.Fatalf("exception metric %v", got)
	}
	if got := testutil.ToFloat64(p.metrics.reports.WithLabelValues("cancelled", "duplicate")); got != 2 {
		t.Fatalf("duplicate cancellations counted %v, want 2", got)
	}
	if n, _ := store.NewReturns(e.db).CountPendingRedis(e.ctx); n != 0 {
		t.Fatalf("%d redis steps pending", n)
	}
}

// failOnce makes the first Redis return fail after MySQL committed: the crash window between
// the database commit and the Redis return.
type failOnce struct {
	unitReturner
	failed atomic.Bool
}

func (f *failOnce) ReturnAll(ctx context.Context, items []stock.UnitReturn) (stock.ReturnReport, error) {
	if f.failed.CompareAndSwap(false, true) {
		return stock.ReturnReport{}, errors.New("injected crash before the redis return")
	}
	return f.unitReturner.ReturnAll(ctx, items)
}

// The process dies between the database commit and the Redis return: the unit is in MySQL,
// not in Redis, and the return is pending. The redelivered report (its offset was never
// committed) completes the Redis step, once, with the slot released for a re-grab.
func TestRedeliveryCompletesAReturnCutShort(t *testing.T) {
	e := newEnv(t, 2, 2, 1)
	if err := e.db.Exec("UPDATE activities SET regrab_after_cancel = 1").Error; err != nil {
		t.Fatal(err)
	}
	rids := e.sold(t, 2)
	p := e.feedbackProcessor(t, &failOnce{unitReturner: e.gate})
	m := feedbackMsg(t, e, 0, seckill.Feedback{RequestID: rids[0], Kind: seckill.FeedbackCancelled, Reason: seckill.ReasonPaymentFailed})
	if err := p.Process(e.ctx, []kafka.Message{m}); err != nil {
		t.Fatal(err)
	}
	if left, _ := e.stock(t); left != 1 || e.redisLeft(t) != 0 {
		t.Fatalf("after the cut: mysql left %d, redis left %d; want 1 and 0", left, e.redisLeft(t))
	}
	if n, _ := store.NewReturns(e.db).CountPendingRedis(e.ctx); n != 1 {
		t.Fatalf("%d redis steps pending, want 1", n)
	}
	for range 2 {
		if err := p.Process(e.ctx, []kafka.Message{m}); err != nil {
			t.Fatal(err)
		}
	}
	if left, _ := e.stock(t); left != 1 || e.redisLeft(t) != 1 {
		t.Fatalf("after the redeliveries: mysql left %d, redis left %d; want 1 and 1", left, e.redisLeft(t))
	}
	if n, _ := store.NewReturns(e.db).CountPendingRedis(e.ctx); n != 0 {
		t.Fatalf("%d redis steps pending", n)
	}
	// u0 may grab again (the activity allows it): Redis no longer counts the cancelled grab.
	v, err := e.gate.Reserve(e.ctx, seckill.Grab{RequestID: seckill.RequestID(e.session, e.prize, "again-0001"), UserID: "u0",
		SessionID: e.session, PrizeID: e.prize, AdmittedAt: time.Now()})
	if err != nil || v.Code != stock.Admitted {
		t.Fatalf("u0 grabbing again: %v %v", v.Code, err)
	}
}
