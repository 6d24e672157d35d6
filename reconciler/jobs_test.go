package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"gorm.io/gorm"

	"github.com/seckill-pipeline/seckill/internal/harness"
	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/event"
	leasepkg "github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
)

// recEnv is an open session×prize on the real stack, with its own topics, consumer group
// and lease, and (optionally) the real consumer binary running against it.
type recEnv struct {
	t        *testing.T
	dsn      string
	db       *gorm.DB
	rdb      redis.UniversalClient
	gate     *stock.Gate
	brokers  []string
	topics   event.Topics
	env      map[string]string
	session  int64
	prize    int64
	ctx      context.Context
	consumer *harness.Proc
	seq      int
}

func newRecEnv(t *testing.T, dbStock, limit int) *recEnv {
	t.Helper()
	return recEnvOf(t, stacktest.NewOpenPrize(t, dbStock, dbStock, limit))
}

// recEnvOf is newRecEnv around a session×prize already made (say a prize with stock buckets).
func recEnvOf(t *testing.T, op *stacktest.OpenPrize) *recEnv {
	t.Helper()
	brokers, topics := stacktest.Kafka(t)
	ctx := stacktest.Context(t, 3*time.Minute)
	id := stacktest.ID(t)
	env := stacktest.ConsumerGroups(t)
	maps.Copy(env, map[string]string{
		"SECKILL_MYSQL_DSN":        op.DSN,
		"SECKILL_TOPIC_PREFIX":     strings.TrimSuffix(topics.Grab.Name, ".seckill.grab"),
		"SECKILL_RECONCILER_LEASE": "t-lease-" + id,
		"SECKILL_LEASE_TTL":        "2s",
		"SECKILL_STALE_AFTER":      "300ms",
		"SECKILL_CATCHUP_WAIT":     "15s",
		"SECKILL_PREHEAT_LEAD":     "0s",
	})
	return &recEnv{t: t, dsn: op.DSN, db: op.DB, rdb: op.Redis, gate: op.Gate, brokers: brokers, topics: topics,
		session: op.SessionID, prize: op.PrizeID, ctx: ctx, env: env}
}

func (e *recEnv) startConsumer() {
	e.t.Helper()
	env := map[string]string{"SECKILL_CONSUMER_ADDR": stacktest.FreeAddr(e.t), "SECKILL_BATCH_WAIT": "2ms"}
	for k, v := range e.env {
		env[k] = v
	}
	e.consumer = stacktest.Start(e.t, "consumer", env)
	stacktest.WaitHTTP(e.t, "http://"+env["SECKILL_CONSUMER_ADDR"]+"/readyz", 30*time.Second)
}

// grab admits one grab in Redis; with produce it also emits the grab event, as the gateway.
func (e *recEnv) grab(user string, produce bool) seckill.Grab {
	e.t.Helper()
	return e.grabAt(user, produce, time.Now())
}

// staleAge is how long ago a test admits a reservation it needs older than the tests'
// SECKILL_STALE_AFTER (300 ms) and younger than the default SECKILL_REPUBLISH_BOUND (1 min).
const staleAge = time.Second

// grabAt is grab admitted at admitted. A test that needs a reservation older than a
// threshold admits it that long ago instead of sleeping: the gate keeps the admission time
// the gateway gives it, and the reconciler ages the reservation from there. (The thresholds'
// instants are TestStaleThresholds', on a fake clock.)
func (e *recEnv) grabAt(user string, produce bool, admitted time.Time) seckill.Grab {
	e.t.Helper()
	e.seq++
	g := seckill.Grab{RequestID: seckill.RequestID(e.session, e.prize, fmt.Sprintf("key-%s-%04d", user, e.seq)),
		UserID: user, SessionID: e.session, PrizeID: e.prize, AdmittedAt: admitted.UTC()}
	v, err := e.gate.Reserve(e.ctx, g)
	if err != nil || v.Code != stock.Admitted {
		e.t.Fatalf("reserve %s: %s %v", user, v.Code, err)
	}
	if produce {
		e.publish(e.topics.Grab.Name, g)
	}
	return g
}

func (e *recEnv) publish(topic string, grabs ...seckill.Grab) {
	e.t.Helper()
	w, err := event.NewGrabWriter(e.brokers, topic)
	if err != nil {
		e.t.Fatal(err)
	}
	defer w.Close()
	var msgs []kafka.Message
	for _, g := range grabs {
		m, err := event.EncodeGrab(g)
		if err != nil {
			e.t.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	if err := w.WriteMessages(e.ctx, msgs...); err != nil {
		e.t.Fatal(err)
	}
}

func (e *recEnv) orders(where string, args ...any) int64 {
	e.t.Helper()
	var n int64
	if err := e.db.Table("orders").Where(where, args...).Count(&n).Error; err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *recEnv) waitOrders(n int64) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for e.orders("1=1") < n {
		if time.Now().After(deadline) {
			out := ""
			if e.consumer != nil {
				out = e.consumer.Output()
			}
			e.t.Fatalf("%d orders after 30s, want %d\n%s", e.orders("1=1"), n, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitSettled waits until Redis holds no pending reservation (consumer settled them).
func (e *recEnv) waitSettled() {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, _ := e.gate.Snapshots(e.ctx, []seckill.SessionPrize{{Session: e.session, Prize: e.prize}})
		if s[0].Pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%d reservations still pending after 30s", s[0].Pending)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *recEnv) dbLeft() int64 {
	e.t.Helper()
	var left int64
	e.db.Raw("SELECT left_stock FROM session_stocks WHERE session_id = ? AND prize_id = ?", e.session, e.prize).Row().Scan(&left)
	return left
}

func (e *recEnv) redisLeft() int64 {
	e.t.Helper()
	n, err := e.rdb.HGet(e.ctx, stock.KeysFor(e.session, e.prize).Meta, "left").Int64()
	if err != nil {
		e.t.Fatalf("redis left: %v", err)
	}
	return n
}

// once runs the reconciler in this process with --once --json and returns its report.
func (e *recEnv) once() (report, error) {
	e.t.Helper()
	var out bytes.Buffer
	err := run(e.ctx, []string{"--once", "--json"}, stacktest.Getenv(e.env), &out, io.Discard)
	var rep report
	line := out.String()
	if i := strings.LastIndex(strings.TrimSpace(line), "\n"); i >= 0 {
		line = line[i+1:]
	}
	if jerr := json.Unmarshal([]byte(line), &rep); jerr != nil {
		e.t.Fatalf("report %q: %v (run error %v)", out.String(), jerr, err)
	}
	return rep, err
}

func jobOf(rep report, name string) jobReport {
	for _, j := range rep.Jobs {
		if j.Name == name {
			return j
		}
	}
	return jobReport{}
}

func (e *recEnv) audits(action string) int64 {
	var n int64
	e.db.Table("audit_log").Where("action = ? AND session_id = ?", action, e.session).Count(&n)
	return n
}

func TestDriftCorrectedBothWaysButNotWhileInFlight(t *testing.T) {
	e := newRecEnv(t, 20, 1)
	e.startConsumer()
	for _, u := range []string{"a", "b", "c"} {
		e.grab(u, true)
	}
	e.waitOrders(3)
	e.waitSettled()

	for _, tc := range []struct {
		name  string
		delta int64
		dir   string
	}{{"redis too high", +5, "redis_high"}, {"redis too low", -4, "redis_low"}} {
		k := stock.KeysFor(e.session, e.prize)
		e.rdb.HIncrBy(e.ctx, k.Meta, "left", tc.delta)
		rep, err := e.once()
		if err != nil {
			t.Fatalf("%s: %v %+v", tc.name, err, rep)
		}
		d := jobOf(rep, "drift")
		if d.Summary[tc.dir] != 1 || d.Summary["corrected"] != 1 {
			t.Fatalf("%s: drift job %+v", tc.name, d)
		}
		if got, want := e.redisLeft(), e.dbLeft(); got != want || want != 17 {
			t.Fatalf("%s: redis left %d, db left %d, want both 17", tc.name, got, want)
		}
	}
	if n := e.audits("correct_redis_stock"); n != 2 {
		t.Fatalf("%d audit rows, want 2", n)
	}

	// Consumers stopped with events in flight: the comparison would be wrong, so the drift
	// (here real: 2 admitted, not yet orders, and 3 injected) is left alone.
	if err := e.consumer.Stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	e.grab("d", true)
	e.grab("f", true)
	e.rdb.HIncrBy(e.ctx, stock.KeysFor(e.session, e.prize).Meta, "left", 3)
	before := e.redisLeft()
	rep, _ := e.once()
	if d := jobOf(rep, "drift"); d.Summary["skipped_in_flight"] != 1 || d.Summary["corrected"] != 0 {
		t.Fatalf("drift job with events in flight: %+v", d)
	}
	if e.redisLeft() != before {
		t.Fatal("redis corrected while events were in flight")
	}
	// Once the consumers caught up, the remaining drift (3 too high) is corrected.
	e.startConsumer()
	e.waitOrders(5)
	e.waitSettled()
	if _, err := e.once(); err != nil {
		t.Fatal(err)
	}
	if got, want := e.redisLeft(), e.dbLeft(); got != want || want != 15 {
		t.Fatalf("after catch-up: redis left %d, db left %d, want 15", got, want)
	}
}

// An admitted grab whose event never reached Kafka (produce failed, gateway killed)
// becomes an order after one reconciler run.
func TestStaleReservationBecomesOrder(t *testing.T) {
	e := newRecEnv(t, 5, 1)
	e.startConsumer()
	g := e.grabAt("lost", false, time.Now().Add(-staleAge)) // older than SECKILL_STALE_AFTER
	rep, err := e.once()
	if err != nil {
		t.Fatal(err)
	}
	if s := jobOf(rep, "stale"); s.Summary["republished"] != 1 {
		t.Fatalf("stale job %+v", s)
	}
	e.waitOrders(1)
	e.waitSettled()
	l, _ := e.gate.Lookup(e.ctx, g.RequestID)
	if l.Status.State != "succeeded" {
		t.Fatalf("status %+v", l)
	}
	// A second run finds nothing stale and changes nothing.
	rep, _ = e.once()
	if s := jobOf(rep, "stale"); s.Summary["stale"] != 0 || e.orders("1=1") != 1 {
		t.Fatalf("second run: %+v, %d orders", s, e.orders("1=1"))
	}
}

func TestCompensationReplayedTwiceMovesStockOnce(t *testing.T) {
	e := newRecEnv(t, 1, 1)
	e.rdb.HSet(e.ctx, stock.KeysFor(e.session, e.prize).Meta, "left", 2) // Redis drifted high
	win := e.grab("first", false)
	lose := e.grab("second", false) // Redis admitted it, but MySQL's last unit goes to "first"
	e.rdb.HSet(e.ctx, stock.KeysFor(e.session, e.prize).Meta, "left", 0)
	e.publish(e.topics.Compensation.Name, win, lose, win) // a duplicate already in the first pass
	rep, err := e.once()
	if err != nil {
		t.Fatalf("%v %+v", err, rep)
	}
	c := jobOf(rep, "compensation")
	if c.Summary["replayed"] != 3 || c.Summary["succeeded"] != 1 || c.Summary["rejected"] != 1 {
		t.Fatalf("compensation job %+v", c)
	}
	if e.orders("status = 'succeeded'") != 1 || e.orders("status = 'rejected' AND reason = 'sold_out'") != 1 || e.dbLeft() != 0 {
		t.Fatalf("orders %d/%d, left %d", e.orders("status = 'succeeded'"), e.orders("status = 'rejected'"), e.dbLeft())
	}
	l, _ := e.gate.Lookup(e.ctx, lose.RequestID)
	if l.Status.State != "rejected" || l.Status.Reason != "sold_out" {
		t.Fatalf("loser's status %+v", l)
	}
	if n, _ := e.rdb.HGet(e.ctx, stock.KeysFor(e.session, e.prize).Users, "second").Int(); n != 0 {
		t.Fatalf("loser's reservation not released: count %d", n)
	}
	// Replayed again: nothing moves.
	e.publish(e.topics.Compensation.Name, win, lose)
	rep, err = e.once()
	if err != nil {
		t.Fatal(err)
	}
	if c := jobOf(rep, "compensation"); c.Summary["existing"] != 2 {
		t.Fatalf("second replay %+v", c)
	}
	if e.orders("1=1") != 2 || e.dbLeft() != 0 {
		t.Fatalf("second replay changed orders or stock: %d orders, left %d", e.orders("1=1"), e.dbLeft())
	}
}

// Redis lost the prize's keys mid-session: admission answers "not loaded" (503), the
// reconciler waits for the consumers, rebuilds stock, per-user counts and outcomes from
// MySQL, and admission resumes with the per-user limit still held.
func TestRedisLossRebuiltAfterCatchUp(t *testing.T) {
	e := newRecEnv(t, 10, 1)
	e.startConsumer()
	a := e.grab("a", true)
	e.grab("b", true)
	e.waitOrders(2)
	e.waitSettled()
	// Consumers stop; one more grab is in flight when Redis loses the keys.
	if err := e.consumer.Stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	e.grab("c", true)
	k := stock.KeysFor(e.session, e.prize)
	e.rdb.Del(e.ctx, k.Meta, k.Users, k.Reserved, k.Outcomes)
	v, err := e.gate.Reserve(e.ctx, seckill.Grab{RequestID: seckill.RequestID(e.session, e.prize, "key-x-000001"),
		UserID: "x", SessionID: e.session, PrizeID: e.prize, AdmittedAt: time.Now()})
	if err != nil || v.Code != stock.NotLoaded {
		t.Fatalf("grab with keys lost: %s %v, want not loaded (503)", v.Code, err)
	}

	// The reconciler must not rebuild while "c" is in flight: with a short wait it gives up.
	e.env["SECKILL_CATCHUP_WAIT"] = "500ms"
	rep, err := e.once()
	if err == nil || jobOf(rep, "rebuild").Summary["waiting_for_consumers"] != 1 {
		t.Fatalf("rebuild while in flight: %v %+v", err, jobOf(rep, "rebuild"))
	}
	if n, err := e.rdb.Exists(e.ctx, k.Meta).Result(); err != nil || n != 0 {
		t.Fatal("keys rebuilt while events were in flight")
	}
	e.env["SECKILL_CATCHUP_WAIT"] = "30s"
	e.startConsumer()
	rep, err = e.once()
	if err != nil || jobOf(rep, "rebuild").Summary["rebuilt"] != 1 {
		t.Fatalf("rebuild: %v %+v", err, jobOf(rep, "rebuild"))
	}
	if e.orders("status = 'succeeded'") != 3 || e.redisLeft() != 7 || e.dbLeft() != 7 {
		t.Fatalf("after rebuild: %d orders, redis left %d, db left %d", e.orders("status = 'succeeded'"), e.redisLeft(), e.dbLeft())
	}
	// Per-user limit held: "a" cannot grab again; the old outcome is readable again.
	v, _ = e.gate.Reserve(e.ctx, seckill.Grab{RequestID: seckill.RequestID(e.session, e.prize, "key-a-again1"),
		UserID: "a", SessionID: e.session, PrizeID: e.prize, AdmittedAt: time.Now()})
	if v.Code != stock.Limit {
		t.Fatalf("user a after rebuild: %s, want limit", v.Code)
	}
	if l, _ := e.gate.Lookup(e.ctx, a.RequestID); l.Status.State != "succeeded" {
		t.Fatalf("a's outcome after rebuild: %+v", l)
	}
	if e.audits("rebuild_redis_stock") != 1 {
		t.Fatal("rebuild not audited")
	}
}

// A reconciler killed mid-run leaves its lease to expire; the next run finishes the job.
func TestKilledMidRunNextRunFinishes(t *testing.T) {
	e := newRecEnv(t, 10, 1)
	e.startConsumer()
	e.grab("a", true)
	e.waitOrders(1)
	e.waitSettled()
	if err := e.consumer.Stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	e.grab("b", true) // in flight: the rebuild below has to wait
	k := stock.KeysFor(e.session, e.prize)
	e.rdb.Del(e.ctx, k.Meta, k.Users, k.Reserved, k.Outcomes)

	env := map[string]string{"SECKILL_RECONCILER_ADDR": stacktest.FreeAddr(t), "SECKILL_CATCHUP_WAIT": "60s"}
	for k, v := range e.env {
		if _, ok := env[k]; !ok {
			env[k] = v
		}
	}
	rec := stacktest.Start(t, "reconciler", env, "--once")
	// Kill it while it holds the lease and waits for the consumers.
	deadline := time.Now().Add(20 * time.Second)
	for {
		if holder, _, _ := leasepkg.New(e.db, e.env["SECKILL_RECONCILER_LEASE"], time.Second).Holder(e.ctx); holder != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("reconciler never took the lease:\n%s", rec.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
	rec.Signal(syscall.SIGKILL)
	_ = rec.Wait(10 * time.Second)

	e.startConsumer()
	// Until the dead holder's lease expires (2s TTL) a new run stands aside, never acts.
	var rep report
	var err error
	for time.Now().Before(deadline.Add(20 * time.Second)) {
		if rep, err = e.once(); rep.Lease == "held" {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil || rep.Lease != "held" || jobOf(rep, "rebuild").Summary["rebuilt"] != 1 {
		t.Fatalf("next run: %v %+v", err, rep)
	}
	if e.redisLeft() != 8 || e.dbLeft() != 8 {
		t.Fatalf("redis left %d, db left %d, want 8", e.redisLeft(), e.dbLeft())
	}
}
