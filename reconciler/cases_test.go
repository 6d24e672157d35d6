package main

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/internal/harness"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/exception"
	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

func (e *recEnv) cases(kind string) []store.Case {
	e.t.Helper()
	cases, err := store.NewExceptions(e.db).List(e.ctx, store.CaseFilter{Kind: kind, Limit: 50})
	if err != nil {
		e.t.Fatal(err)
	}
	return cases
}

// A reservation that stays without an order (here: no consumer at all) is re-published
// every run, and handed to a person once SECKILL_STALE_CASE_AFTER old; the exceptions job
// reports it, the run report is kept for the console, and a consumer then settles it.
// Time passing is stood for by the threshold, not by sleeping: the reservation is admitted
// 1500 ms ago, younger than the first run's SECKILL_STALE_CASE_AFTER (1 min), older than the
// second's (1 s). The threshold's instant is TestStaleThresholds', on a fake clock.
func TestStaleReservationHandedToAPerson(t *testing.T) {
	e := newRecEnv(t, 5, 1)
	e.env["SECKILL_REPUBLISH_BOUND"] = "1s"
	e.env["SECKILL_STALE_CASE_AFTER"] = "1m"
	g := e.grabAt("late", false, time.Now().Add(-1500*time.Millisecond))
	rep, err := e.once()
	if err != nil {
		t.Fatal(err)
	}
	if s := jobOf(rep, "stale"); s.Summary["republished"] != 1 || len(e.cases(seckill.CaseStaleReservation)) != 0 {
		t.Fatalf("a young stale reservation: stale job %+v, cases %d", s, len(e.cases(seckill.CaseStaleReservation)))
	}
	e.env["SECKILL_STALE_CASE_AFTER"] = "1s"
	if rep, err = e.once(); err != nil {
		t.Fatal(err)
	}
	cases := e.cases(seckill.CaseStaleReservation)
	if len(cases) != 1 || cases[0].RequestID != g.RequestID || cases[0].UserID != "late" || !cases[0].Replayable {
		t.Fatalf("stale cases %+v", cases)
	}
	if x := jobOf(rep, "exceptions"); x.Summary["open_stale_reservation"] != 1 || x.Summary["open"] != 1 {
		t.Fatalf("exceptions job %+v", x)
	}
	gauge := newOpenCasesGauge(prometheus.NewRegistry(), store.NewExceptions(e.db), time.Second, slog.New(slog.DiscardHandler))
	if err := gauge.sample(e.ctx); err != nil {
		t.Fatal(err)
	}
	if v := testutil.ToFloat64(gauge.open.WithLabelValues(seckill.CaseStaleReservation)); v != 1 {
		t.Fatalf("open stale_reservation gauge %v, want 1", v)
	}
	if n := testutil.CollectAndCount(gauge.open); n != len(caseKinds) {
		t.Fatalf("%d open-case series, want one per kind (%d), at 0 when none", n, len(caseKinds))
	}
	runs, err := store.NewRunReports(e.db).Recent(e.ctx, 5)
	if err != nil || len(runs) != 2 || !strings.Contains(string(runs[0].Report), `"name":"exceptions"`) {
		t.Fatalf("run reports %d %v", len(runs), err)
	}
	e.startConsumer()
	e.waitOrders(1)
}

// movedGate is the real gate whose compare-and-set always finds Redis moved: a writer the
// reconciler does not know keeps changing the stock.
type movedGate struct{ *stock.Gate }

func (movedGate) CorrectLeft(context.Context, int64, int64, stock.View, int64, int64) error {
	return stock.ErrMoved
}

// Drift no run can correct becomes a case after SECKILL_DRIFT_CASE_RUNS runs, with the
// figures a person needs; a person resolves it.
func TestDriftLeftUncorrectedBecomesACase(t *testing.T) {
	e := newRecEnv(t, 20, 1)
	e.rdb.HIncrBy(e.ctx, stock.KeysFor(e.session, e.prize).Meta, "left", 4)
	admin, err := event.NewAdmin(e.brokers)
	if err != nil {
		t.Fatal(err)
	}
	j := driftJob{catalog: store.NewCatalog(e.db, time.Now), gate: movedGate{e.gate}, returns: store.NewReturns(e.db), orders: store.NewOrders(e.db),
		lag: grabLag{reader: admin, group: e.env["SECKILL_CONSUMER_GROUP"], topic: e.topics.Grab}, grace: time.Hour,
		cases: store.NewExceptions(e.db), caseRuns: 2, metrics: newDriftMetrics(prometheus.NewRegistry()),
		log: slog.New(slog.DiscardHandler), now: time.Now}
	l := lease.New(e.db, e.env["SECKILL_RECONCILER_LEASE"], time.Minute)
	for run := 1; run <= 3; run++ {
		var res result
		var jerr error
		if _, err := l.Do(e.ctx, func(ctx context.Context, f lease.Fence) error {
			res, jerr = j.Run(ctx, f)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if jerr != errUncorrected || res.Summary["uncorrected"] != 1 || res.Summary["cases"] != int64(min(1, run-1)) {
			t.Fatalf("run %d: %+v %v", run, res.Summary, jerr)
		}
	}
	cases := e.cases(seckill.CaseDriftUncorrected)
	if len(cases) != 1 || cases[0].Seen != 2 || cases[0].Replayable || *cases[0].PrizeID != e.prize {
		t.Fatalf("drift cases %+v", cases)
	}
	d, err := store.NewExceptions(e.db).Get(e.ctx, cases[0].ID)
	if err != nil || !strings.Contains(string(d.Evidence), `"redis_left":24`) || !strings.Contains(string(d.Evidence), `"expected_redis_left":20`) {
		t.Fatalf("evidence %s %v", d.Evidence, err)
	}
}

// A compensation group whose replay fails run after run (here a constraint an operator
// added by mistake) is one case however many runs fail on it; once the cause is removed
// the next run replays it.
func TestFailingCompensationIsACase(t *testing.T) {
	e := newRecEnv(t, 5, 1)
	if err := e.db.Exec("ALTER TABLE orders ADD CONSTRAINT ck_test_mistake CHECK (user_id <> 'blocked')").Error; err != nil {
		t.Fatal(err)
	}
	g := e.grab("blocked", false)
	e.publish(e.topics.Compensation.Name, g)
	for range 2 {
		if _, err := e.once(); err == nil {
			t.Fatal("a run whose compensation replay failed reported no problem")
		}
	}
	cases := e.cases(seckill.CaseCompensationFailing)
	if len(cases) != 1 || cases[0].Seen != 2 || *cases[0].SessionID != e.session || !strings.Contains(cases[0].Detail, "gave up") {
		t.Fatalf("compensation cases %+v", cases)
	}
	if err := e.db.Exec("ALTER TABLE orders DROP CONSTRAINT ck_test_mistake").Error; err != nil {
		t.Fatal(err)
	}
	if _, err := e.once(); err != nil {
		t.Fatal(err)
	}
	if e.orders("request_id = ? AND status = 'succeeded'", g.RequestID) != 1 {
		t.Fatal("the compensation was not replayed after the fix")
	}
}

// A dead-lettered grab's unit is counted by Redis only while its reservation lives. After
// Redis lost the keys, the rebuild copies MySQL, where the grab never arrived, so its unit is
// sold again; replaying the dead letter then would hand out that unit twice (MySQL refuses
// the order: an admitted_rejected case). The replay is refused with the reason, audited,
// and nothing is produced.
func TestDeadLetterReplayRefusedAfterTheKeysWereRebuilt(t *testing.T) {
	e := newRecEnv(t, 2, 1)
	g := e.grab("dora", false)
	m, err := event.EncodeGrab(g)
	if err != nil {
		t.Fatal(err)
	}
	m.Topic, m.Partition, m.Offset = e.topics.Grab.Name, 0, 0
	cases := store.NewExceptions(e.db)
	if err := cases.Record(e.ctx, time.Now(), exception.DeadLetterReport(event.Poison{Msg: m, Cause: errors.New("no stock row")})); err != nil {
		t.Fatal(err)
	}
	dead := e.cases(seckill.CaseDeadLetter)
	if len(dead) != 1 || dead[0].RequestID != g.RequestID {
		t.Fatalf("dead-letter cases %+v", dead)
	}

	// Redis loses the keys; the rebuild restores both units from MySQL, and they are sold.
	k := stock.KeysFor(e.session, e.prize)
	e.rdb.Del(e.ctx, k.Meta, k.Users, k.Reserved, k.Outcomes)
	rep, err := e.once()
	if r := jobOf(rep, "rebuild"); err != nil || r.Summary["rebuilt"] != 1 {
		t.Fatalf("rebuild: %v %+v", err, r)
	}
	e.grab("erin", true)
	e.grab("fay", true)
	e.startConsumer()
	e.waitOrders(2)

	// The workbench's replay, producing for real: had it produced, the consumer would
	// reject the grab (sold out in MySQL) and record an admitted_rejected case.
	writer := func(topic string) *kafka.Writer {
		w, err := event.NewGrabWriter(e.brokers, topic)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		return w
	}
	replayer := exception.NewReplayer(store.NewOrders(e.db), store.NewCatalog(e.db, time.Now), e.gate, e.topics,
		writer(e.topics.Grab.Name), writer(e.topics.Compensation.Name))
	d, err := cases.Act(e.ctx, dead[0].ID, store.ActReplay, "carol", "192.0.2.7", "keys were rebuilt", time.Now(), replayer.Replay)
	if !errors.Is(err, store.ErrNotReplayable) || !strings.Contains(err.Error(), "Redis no longer holds "+g.RequestID) {
		t.Errorf("replay after the rebuild: %v, want a refusal saying Redis no longer holds the reservation", err)
	}
	if d.State != seckill.CaseOpen {
		t.Errorf("refused replay: case %s, want open", d.State)
	}
	var audited int64
	if err := e.db.Raw("SELECT COUNT(*) FROM exception_actions WHERE case_id = ? AND actor = 'carol' AND action = 'replay' AND outcome LIKE 'refused: Redis no longer holds%'",
		dead[0].ID).Scan(&audited).Error; err != nil || audited != 1 {
		t.Errorf("audited refusals %d %v, want 1", audited, err)
	}
	e.waitCaughtUp()
	if msgs, err := harness.ReadTopic(e.ctx, e.brokers, e.topics.Grab); err != nil || len(msgs) != 2 {
		t.Errorf("grab topic holds %d events (%v), want the 2 sold after the rebuild", len(msgs), err)
	}
	if n := len(e.cases(seckill.CaseAdmittedRejected)); n != 0 || e.orders("request_id = ?", g.RequestID) != 0 {
		t.Errorf("%d admitted_rejected cases, %d orders for the dead-lettered grab; want none", n, e.orders("request_id = ?", g.RequestID))
	}
}

// waitCaughtUp waits until the consumer group has read every grab event.
func (e *recEnv) waitCaughtUp() {
	e.t.Helper()
	admin, err := event.NewAdmin(e.brokers)
	if err != nil {
		e.t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		lag, err := admin.Lag(e.ctx, e.env["SECKILL_CONSUMER_GROUP"], e.topics.Grab)
		total := int64(0)
		for _, n := range lag {
			total += n
		}
		if err == nil && total == 0 {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("consumer lag %v %v after 30s", lag, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
