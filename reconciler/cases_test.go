package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seckill-pipeline/seckill/pkg/event"
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
func TestStaleReservationHandedToAPerson(t *testing.T) {
	e := newRecEnv(t, 5, 1)
	e.env["SECKILL_REPUBLISH_BOUND"] = "1s"
	e.env["SECKILL_STALE_CASE_AFTER"] = "1s"
	g := e.grab("late", false)
	time.Sleep(400 * time.Millisecond)
	rep, err := e.once()
	if err != nil {
		t.Fatal(err)
	}
	if s := jobOf(rep, "stale"); s.Summary["republished"] != 1 || len(e.cases(seckill.CaseStaleReservation)) != 0 {
		t.Fatalf("a young stale reservation: stale job %+v, cases %d", s, len(e.cases(seckill.CaseStaleReservation)))
	}
	time.Sleep(700 * time.Millisecond)
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
