package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"gorm.io/gorm"

	"github.com/seckill-pipeline/seckill/internal/harness"
	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/exception"
	"github.com/seckill-pipeline/seckill/pkg/retry"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
	"github.com/seckill-pipeline/seckill/pkg/writepath"
)

// env is one open session with one prize on the real stack.
type env struct {
	dsn     string
	db      *gorm.DB
	rdb     redis.UniversalClient
	gate    *stock.Gate
	brokers []string
	topics  event.Topics
	session int64
	prize   int64
	ctx     context.Context
}

// newEnv creates a session×prize with dbStock in MySQL and redisStock loaded in Redis.
func newEnv(t *testing.T, dbStock, redisStock, limit int) *env {
	t.Helper()
	op := stacktest.NewOpenPrize(t, dbStock, redisStock, limit)
	brokers, topics := stacktest.Kafka(t)
	ctx := stacktest.Context(t, 90*time.Second)
	return &env{dsn: op.DSN, db: op.DB, rdb: op.Redis, gate: op.Gate, brokers: brokers, topics: topics,
		session: op.SessionID, prize: op.PrizeID, ctx: ctx}
}

// consumerVars configures a consumer process for e: its database, its topics, its HTTP
// address and consumer groups of its own.
func (e *env) consumerVars(t *testing.T, addr string) map[string]string {
	t.Helper()
	vars := stacktest.ConsumerGroups(t)
	vars["SECKILL_MYSQL_DSN"], vars["SECKILL_CONSUMER_ADDR"] = e.dsn, addr
	vars["SECKILL_TOPIC_PREFIX"] = strings.TrimSuffix(e.topics.Grab.Name, ".seckill.grab")
	return vars
}

// admit reserves n grabs in Redis (users u0..u(n-1)) and returns their grab messages.
func (e *env) admit(t *testing.T, n int) []kafka.Message {
	t.Helper()
	var msgs []kafka.Message
	for i := range n {
		g := seckill.Grab{RequestID: seckill.RequestID(e.session, e.prize, fmt.Sprintf("key-%08d", i)),
			UserID: fmt.Sprintf("u%d", i), SessionID: e.session, PrizeID: e.prize, AdmittedAt: time.Now().UTC()}
		v, err := e.gate.Reserve(e.ctx, g)
		if err != nil || v.Code != stock.Admitted {
			t.Fatalf("reserve %d: %v %v", i, v.Code, err)
		}
		m, err := event.EncodeGrab(g)
		if err != nil {
			t.Fatal(err)
		}
		m.Topic, m.Offset = e.topics.Grab.Name, int64(i)
		msgs = append(msgs, m)
	}
	return msgs
}

func (e *env) writer(t *testing.T, topic string) *kafka.Writer {
	w, err := event.NewGrabWriter(e.brokers, topic, event.WithSecurity(stacktest.KafkaSecurity(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func (e *env) processor(t *testing.T, orders writepath.Orders) *processor {
	m := newMetrics(prometheus.NewRegistry())
	dls := e.deadLetters(t, m.deadLetters)
	log := slog.New(slog.DiscardHandler)
	policy := retry.Policy{Immediate: 2, Backoff: 2, Base: time.Millisecond, Max: 5 * time.Millisecond, Jitter: retry.FullJitter}
	return &processor{write: writepath.New(orders, e.gate, policy, m, log, time.Now),
		compensation: e.writer(t, e.topics.Compensation.Name),
		deadLetters:  exception.NewDeadLetters(dls, store.NewExceptions(e.db), time.Now, log),
		metrics:      m, log: log}
}

// deadLetters writes e's dead-letter topic as the consumer does, counting on counter.
func (e *env) deadLetters(t *testing.T, counter prometheus.Counter) *event.DeadLetters {
	t.Helper()
	w, err := event.NewDeadLetterWriter(e.brokers, e.topics.DeadLetter, event.WithSecurity(stacktest.KafkaSecurity(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	dls, err := event.NewDeadLetters(w, counter, e.topics.DeadLetter.MaxMessageBytes)
	if err != nil {
		t.Fatal(err)
	}
	return dls
}

func (e *env) admin(t *testing.T) *event.Admin {
	a, err := event.NewAdmin(e.brokers, event.AdminSecurity(stacktest.KafkaSecurity(t)))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func (e *env) stock(t *testing.T) (left int, version int64) {
	t.Helper()
	row := e.db.Raw("SELECT left_stock, version FROM session_stocks WHERE session_id = ? AND prize_id = ?", e.session, e.prize).Row()
	if err := row.Scan(&left, &version); err != nil {
		t.Fatal(err)
	}
	return left, version
}

func (e *env) count(t *testing.T, where string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := e.db.Table("orders").Where(where, args...).Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

// readAll reads every message a topic holds now.
func readAll(t *testing.T, brokers []string, topic event.Topic) []kafka.Message {
	t.Helper()
	msgs, err := harness.ReadTopic(stacktest.Context(t, 30*time.Second), brokers, topic)
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

func TestRedeliveryChangesNothing(t *testing.T) {
	e := newEnv(t, 10, 10, 1)
	msgs := e.admit(t, 6)
	p := e.processor(t, store.NewOrders(e.db))
	if err := p.Process(e.ctx, msgs); err != nil {
		t.Fatal(err)
	}
	left, version := e.stock(t)
	// The whole batch again (a crash between the DB commit and the offset commit), then
	// one event on its own.
	if err := p.Process(e.ctx, msgs); err != nil {
		t.Fatal(err)
	}
	if err := p.Process(e.ctx, msgs[2:3]); err != nil {
		t.Fatal(err)
	}
	if n := e.count(t, "1=1"); n != 6 {
		t.Fatalf("%d orders after redelivery, want 6", n)
	}
	l2, v2 := e.stock(t)
	if left != 4 || l2 != left || v2 != version {
		t.Fatalf("stock %d/v%d after first delivery, %d/v%d after redelivery; want 4 and unchanged", left, version, l2, v2)
	}
	if pending, _ := store.NewOutbox(e.db).CountPending(e.ctx); pending != 6 {
		t.Fatalf("%d order events to publish, want 6 (one per order, none for redeliveries)", pending)
	}
	// Redis: every reservation settled into an outcome.
	snap, _ := e.gate.Snapshots(e.ctx, []seckill.SessionPrize{{Session: e.session, Prize: e.prize}})
	if snap[0].Pending != 0 || snap[0].Settled != 6 {
		t.Fatalf("redis after settle: %+v", snap[0])
	}
	l, _ := e.gate.Lookup(e.ctx, seckill.RequestID(e.session, e.prize, "key-00000002"))
	if l.Status.State != "succeeded" || l.Status.OrderID == 0 {
		t.Fatalf("status after settle: %+v", l)
	}
}

// bumper is a concurrent writer: it bumps the stock row's version from another connection
// right after Persist read it, for the first n transactions (n < 0: forever).
func bumper(e *env, n int64) (store.Option, *atomic.Int64) {
	var bumps atomic.Int64
	return store.WithAfterRead(func(ctx context.Context, sid, pid int64) {
		if n >= 0 && bumps.Load() >= n {
			return
		}
		bumps.Add(1)
		// Another connection, outside the transaction: a real concurrent writer.
		e.db.Exec("UPDATE session_stocks SET version = version + 1 WHERE session_id = ? AND prize_id = ?", sid, pid)
	}), &bumps
}

func TestConflictsRetryAndConverge(t *testing.T) {
	e := newEnv(t, 10, 10, 1)
	msgs := e.admit(t, 5)
	// One event a person replayed from the workbench: its order is timed under that path.
	msgs[0].Headers = append(msgs[0].Headers, kafka.Header{Key: exception.HeaderReplayedBy, Value: []byte("case:1")})
	opt, bumps := bumper(e, 3) // more than the immediate retries: the backoff tier runs too
	p := e.processor(t, store.NewOrders(e.db, opt))
	if err := p.Process(e.ctx, msgs); err != nil {
		t.Fatal(err)
	}
	if bumps.Load() != 3 {
		t.Fatalf("%d conflicts injected, want 3", bumps.Load())
	}
	if n := e.count(t, "status = 'succeeded'"); n != 5 {
		t.Fatalf("%d orders, want 5", n)
	}
	if left, _ := e.stock(t); left != 5 {
		t.Fatalf("left %d, want 5", left)
	}
	// The conflict rate's numerator and denominator: 3 conflicts in 4 attempts.
	if c, tx := testutil.ToFloat64(p.metrics.conflicts), testutil.ToFloat64(p.metrics.transactions); c != 3 || tx != 4 {
		t.Fatalf("conflicts %v in %v transactions, want 3 in 4", c, tx)
	}
	grab := histogramCount(t, p.metrics.admitToOrder.WithLabelValues(writepath.PathGrab).(prometheus.Histogram))
	bench := histogramCount(t, p.metrics.admitToOrder.WithLabelValues(writepath.PathWorkbench).(prometheus.Histogram))
	if grab != 4 || bench != 1 {
		t.Fatalf("admission-to-order observations: %d grab, %d workbench; want 4 and 1 (one per new order)", grab, bench)
	}
}

func histogramCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

func TestConflictStormCompensates(t *testing.T) {
	e := newEnv(t, 10, 10, 1)
	msgs := e.admit(t, 4)
	opt, bumps := bumper(e, -1)
	p := e.processor(t, store.NewOrders(e.db, opt))
	if err := p.Process(e.ctx, msgs); err != nil {
		t.Fatalf("Process must account for the batch (compensated) so it can be committed: %v", err)
	}
	if want := int64(1 + 2 + 2); bumps.Load() != want {
		t.Fatalf("%d attempts, want %d (1 + immediate + backoff)", bumps.Load(), want)
	}
	if n := e.count(t, "1=1"); n != 0 {
		t.Fatalf("%d orders written during a storm that never let a transaction through", n)
	}
	comp := readAll(t, e.brokers, e.topics.Compensation)
	if len(comp) != 4 {
		t.Fatalf("%d compensation events, want 4", len(comp))
	}
	for _, m := range comp {
		if _, err := event.DecodeGrab(m.Value); err != nil || header(m, "attempts") != "5" || header(m, "origin-topic") == "" {
			t.Fatalf("compensation message %s headers %v: %v", m.Value, m.Headers, err)
		}
	}
	if left, v := e.stock(t); left != 10 || v != bumps.Load() {
		t.Fatalf("stock %d v%d: the storm's bumps only, no deduction", left, v)
	}
}

func header(m kafka.Message, k string) string {
	for _, h := range m.Headers {
		if h.Key == k {
			return string(h.Value)
		}
	}
	return ""
}

// Redis admitted 8 but MySQL has 5 (drift): exactly 5 orders succeed, 3 are rejected as
// sold out, and stock never goes below zero.
func TestDatabaseHasLessThanRedisAdmitted(t *testing.T) {
	e := newEnv(t, 5, 8, 1)
	msgs := e.admit(t, 8)
	p := e.processor(t, store.NewOrders(e.db))
	if err := p.Process(e.ctx, msgs); err != nil {
		t.Fatal(err)
	}
	if s, r := e.count(t, "status = 'succeeded'"), e.count(t, "status = 'rejected' AND reason = 'sold_out'"); s != 5 || r != 3 {
		t.Fatalf("%d succeeded, %d rejected; want 5 and 3", s, r)
	}
	if left, _ := e.stock(t); left != 0 {
		t.Fatalf("left %d, want 0", left)
	}
	// The first five in event order won; the rejected users see it and may try again.
	l, _ := e.gate.Lookup(e.ctx, seckill.RequestID(e.session, e.prize, "key-00000007"))
	if l.Status.State != "rejected" || l.Status.Reason != "sold_out" {
		t.Fatalf("status of the 8th: %+v", l)
	}
	if n, _ := e.rdb.HGet(e.ctx, stock.KeysFor(e.session, e.prize).Users, "u7").Int(); n != 0 {
		t.Fatalf("rejected user still counted %d times in redis", n)
	}
}

func TestPoisonIsDeadLetteredAndGoodOnesPersist(t *testing.T) {
	e := newEnv(t, 10, 10, 1)
	good := e.admit(t, 2)
	poison := kafka.Message{Topic: e.topics.Grab.Name, Partition: 0, Offset: 7, Key: []byte("x"), Value: []byte(`{"v":9}`)}
	p := e.processor(t, store.NewOrders(e.db))
	if err := p.Process(e.ctx, []kafka.Message{good[0], poison, good[1]}); err != nil {
		t.Fatal(err)
	}
	if n := e.count(t, "status = 'succeeded'"); n != 2 {
		t.Fatalf("%d orders, want 2", n)
	}
	dl := readAll(t, e.brokers, e.topics.DeadLetter)
	if len(dl) != 1 || string(dl[0].Value) != `{"v":9}` || header(dl[0], "origin-offset") != "7" ||
		header(dl[0], "origin-partition") != "0" || header(dl[0], "origin-topic") != e.topics.Grab.Name ||
		header(dl[0], "error") == "" {
		t.Fatalf("dead letters %v", dl)
	}
	if n := testutil.ToFloat64(p.metrics.deadLetters); n != 1 {
		t.Fatalf("dead letters counted %v, want 1", n)
	}
	// A grab on a session×prize MySQL does not know: poison too, and on the workbench with
	// the grab's ids, keyed by request id so a re-publish of it is the same case.
	orphan := seckill.Grab{RequestID: seckill.RequestID(e.session+1000, e.prize, "key-orphan"), UserID: "u9",
		SessionID: e.session + 1000, PrizeID: e.prize, AdmittedAt: time.Now().UTC()}
	om, err := event.EncodeGrab(orphan)
	if err != nil {
		t.Fatal(err)
	}
	om.Topic, om.Offset = e.topics.Grab.Name, 8
	for range 2 {
		if err := p.Process(e.ctx, []kafka.Message{om}); err != nil {
			t.Fatal(err)
		}
	}
	cases, err := store.NewExceptions(e.db).List(e.ctx, store.CaseFilter{Kind: seckill.CaseDeadLetter, Limit: 10})
	if err != nil || len(cases) != 2 {
		t.Fatalf("dead-letter cases %+v %v, want 2", cases, err)
	}
	byKey := map[string]store.Case{}
	for _, c := range cases {
		byKey[c.Key] = c
	}
	undecodable, ok := byKey[e.topics.Grab.Name+"/0@7"]
	if !ok || undecodable.RequestID != "" || undecodable.State != seckill.CaseOpen {
		t.Fatalf("undecodable message's case %+v (cases %v)", undecodable, byKey)
	}
	c, ok := byKey[e.topics.Grab.Name+":"+orphan.RequestID]
	if !ok || c.Seen != 2 || c.UserID != "u9" || c.SessionID == nil || *c.SessionID != orphan.SessionID || !c.Replayable {
		t.Fatalf("orphan grab's case %+v (cases %v)", c, byKey)
	}
	d, err := store.NewExceptions(e.db).Get(e.ctx, c.ID)
	if err != nil || !strings.Contains(string(d.Evidence), `"cause":"session `) || !strings.Contains(string(d.Evidence), "no stock row") {
		t.Fatalf("evidence %s %v", d.Evidence, err)
	}
}

// failingMark makes MarkPublished fail once after the events were produced: the crash
// window between publishing and recording it.
type failingMark struct {
	*store.Outbox
	failed atomic.Bool
}

func (f *failingMark) MarkPublished(ctx context.Context, ids []int64, at time.Time) error {
	if f.failed.CompareAndSwap(false, true) {
		return errors.New("injected crash after produce")
	}
	return f.Outbox.MarkPublished(ctx, ids, at)
}

func TestOrderEventsExactlyOncePerOrder(t *testing.T) {
	e := newEnv(t, 3, 5, 1)
	msgs := e.admit(t, 5)
	p := e.processor(t, store.NewOrders(e.db))
	// Orders committed, then "killed" before any event was published.
	if err := p.Process(e.ctx, msgs); err != nil {
		t.Fatal(err)
	}
	out := &failingMark{Outbox: store.NewOutbox(e.db)}
	relay := &outboxRelay{outbox: out, writer: e.writer(t, e.topics.Order.Name), offsets: e.admin(t), brokers: e.brokers,
		topic: e.topics.Order.Name, lock: mysqlRelayLock{db: e.db, name: "t-" + stacktest.ID(t)}, batch: 100,
		idle: 20 * time.Millisecond, wake: make(chan struct{}, 1), metrics: newMetrics(prometheus.NewRegistry()),
		log: slog.New(slog.DiscardHandler), now: time.Now}
	// First round: publishes, then fails to record it.
	alwaysHeld := func(context.Context) error { return nil }
	if err := relay.relay(e.ctx, alwaysHeld); err == nil {
		t.Fatal("injected failure not reported")
	}
	// Second round (a restarted relay): must find the events on the topic, not re-send. It
	// runs until the outbox is empty; the bound is generous because a loaded machine (a
	// fresh broker, the race detector, other packages' tests) made 2 s too short (issue 28's
	// fresh-state runs: 1 in 10 left the 5 rows pending).
	rctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	go func() {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if n, _ := store.NewOutbox(e.db).CountPending(e.ctx); n == 0 {
				cancel()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	if err := relay.relay(rctx, alwaysHeld); err != nil && rctx.Err() == nil {
		t.Fatal(err)
	}
	events := readAll(t, e.brokers, e.topics.Order)
	byOrder := map[int64][]string{}
	types := map[string]int{}
	for _, m := range events {
		ev, err := event.DecodeOrderEvent(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Key) != ev.RequestID {
			t.Fatalf("event key %q, want the request id %q", m.Key, ev.RequestID)
		}
		byOrder[ev.OrderID] = append(byOrder[ev.OrderID], ev.EventID)
		types[ev.Type]++
	}
	if len(events) != 5 || len(byOrder) != 5 {
		t.Fatalf("%d events for %d orders, want exactly 5 for 5", len(events), len(byOrder))
	}
	if types[event.OrderCreated] != 3 || types[event.OrderRejected] != 2 {
		t.Fatalf("event types %v, want 3 created and 2 rejected", types)
	}
	if n, _ := store.NewOutbox(e.db).CountPending(e.ctx); n != 0 {
		t.Fatalf("%d outbox rows still pending", n)
	}
}

// A redelivered grab event whose request id already has an order settles in Redis under
// the order's owner. A forged or mismatched event (same request id, another user) must not
// make Redis say that user owns the order, and it is counted.
func TestRedeliveryWithAnotherUserSettlesUnderTheOrderOwner(t *testing.T) {
	e := newEnv(t, 10, 10, 1)
	msgs := e.admit(t, 2)
	p := e.processor(t, store.NewOrders(e.db))
	if err := p.Process(e.ctx, msgs); err != nil {
		t.Fatal(err)
	}
	rid := seckill.RequestID(e.session, e.prize, "key-00000000")
	forged := seckill.Grab{RequestID: rid, UserID: "mallory", SessionID: e.session, PrizeID: e.prize, AdmittedAt: time.Now().UTC()}
	m, err := event.EncodeGrab(forged)
	if err != nil {
		t.Fatal(err)
	}
	m.Topic, m.Offset = e.topics.Grab.Name, 99
	// In one batch with an honest redelivery of the other order.
	if err := p.Process(e.ctx, []kafka.Message{m, msgs[1]}); err != nil {
		t.Fatal(err)
	}
	l, err := e.gate.Lookup(e.ctx, rid)
	if err != nil {
		t.Fatal(err)
	}
	if !l.Found || l.Owner != "u0" || l.Status.State != "succeeded" || l.Status.OrderID == 0 {
		t.Fatalf("redis says %+v for u0's order after a redelivery as mallory; want owner u0, succeeded", l)
	}
	if l, _ := e.gate.Lookup(e.ctx, seckill.RequestID(e.session, e.prize, "key-00000001")); l.Owner != "u1" || l.Status.State != "succeeded" {
		t.Fatalf("honest redelivery settled as %+v", l)
	}
	if n := e.count(t, "user_id = 'mallory'"); n != 0 {
		t.Fatalf("%d orders for mallory", n)
	}
	if n := testutil.ToFloat64(p.metrics.mismatched); n != 1 {
		t.Fatalf("mismatched redeliveries counted %v, want 1", n)
	}
}
