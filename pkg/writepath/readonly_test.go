package writepath_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/retry"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
	"github.com/seckill-pipeline/seckill/pkg/writepath"
)

// readOnlyWatch records the write path's failed attempts and their errors' MySQL numbers.
type readOnlyWatch struct {
	mu     sync.Mutex
	failed []retry.Action
}

func (w *readOnlyWatch) Attempted(time.Duration)                                             {}
func (w *readOnlyWatch) Persisted(seckill.SessionPrize, int, store.PersistResult, time.Time) {}
func (w *readOnlyWatch) Mismatched()                                                         {}
func (w *readOnlyWatch) SettleFailed()                                                       {}
func (w *readOnlyWatch) Failed(a retry.Action) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failed = append(w.failed, a)
}

func (w *readOnlyWatch) snapshot() []retry.Action {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]retry.Action(nil), w.failed...)
}

// numberedOrders keeps the MySQL error numbers the real server answered.
type numberedOrders struct {
	*store.Orders
	mu      sync.Mutex
	numbers []uint16
}

func (o *numberedOrders) PersistFrom(ctx context.Context, session, prize int64, grabs []seckill.Grab, now time.Time, src *store.GrabSource) (store.PersistResult, error) {
	res, err := o.Orders.PersistFrom(ctx, session, prize, grabs, now, src)
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		o.mu.Lock()
		o.numbers = append(o.numbers, me.Number)
		o.mu.Unlock()
	}
	return res, err
}

// TestReadOnlyServerIsWaitedOutThenWritten: a server that answers read-only (a primary
// fenced in a failover, before the writer address moved) makes the consumer's write path
// wait and retry, never reject or compensate; once the server is writable the same group
// commits, once. A MariaDB of the test's own, since read_only acts on the whole server.
func TestReadOnlyServerIsWaitedOutThenWritten(t *testing.T) {
	srv := stacktest.PrivateMariaDB(t)
	ctx := stacktest.Context(t, 90*time.Second)
	db, err := store.Connect(ctx, store.Conn{DSN: srv.DSN})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close(db) })
	if _, err := store.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	cat := store.NewCatalog(db, func() time.Time { return now })
	act, err := cat.CreateActivity(ctx, seckill.Activity{Name: "read-only", WindowStart: now.Add(-time.Minute),
		WindowEnd: now.Add(time.Hour), Interval: time.Hour, SessionLength: time.Hour, PerUserLimit: 1,
		Prizes: []seckill.Prize{{Name: "p", StockPerSession: 5}}})
	if err != nil {
		t.Fatal(err)
	}
	sessions, err := cat.Sessions(ctx, act.ID)
	if err != nil {
		t.Fatal(err)
	}
	k := seckill.SessionPrize{Session: sessions[0].ID, Prize: act.Prizes[0].ID}
	g := seckill.Grab{RequestID: seckill.RequestID(k.Session, k.Prize, "key-readonly-0001"), UserID: "u1",
		SessionID: k.Session, PrizeID: k.Prize, AdmittedAt: now}

	srv.ReadOnly(t, true)
	orders := &numberedOrders{Orders: store.NewOrders(db)}
	watch := &readOnlyWatch{}
	policy := retry.Policy{Immediate: 1, Backoff: 1, Base: 5 * time.Millisecond, Max: 20 * time.Millisecond}
	w := writepath.New(orders, nil, policy, watch, slog.New(slog.DiscardHandler), time.Now)
	type result struct {
		res store.PersistResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := w.Persist(ctx, k, []seckill.Grab{g})
		done <- result{res, err}
	}()
	// More failed attempts than the policy allows for contention (1 + 1): with any other
	// classification the group would have been given up by now.
	for len(watch.snapshot()) < 5 {
		select {
		case r := <-done:
			t.Fatalf("Persist returned while the server was read-only: %+v", r)
		case <-ctx.Done():
			t.Fatalf("fewer than 5 failed attempts: %v", watch.snapshot())
		case <-time.After(10 * time.Millisecond):
		}
	}
	srv.ReadOnly(t, false)
	r := <-done
	if r.err != nil {
		t.Fatalf("Persist after the server became writable: %v", r.err)
	}
	for _, a := range watch.snapshot() {
		if a != retry.WaitForDB {
			t.Fatalf("failed attempts classified %v, want only %s", watch.snapshot(), retry.WaitForDB)
		}
	}
	orders.mu.Lock()
	numbers := orders.numbers
	orders.mu.Unlock()
	for _, n := range numbers {
		if n != 1290 && n != 1836 {
			t.Fatalf("the server answered %v, want read-only errors (1290, 1836) only", numbers)
		}
	}
	if len(numbers) == 0 {
		t.Fatal("no read-only error seen: the test tested nothing")
	}
	if len(r.res.Outcomes) != 1 || r.res.Outcomes[0].Status != seckill.OrderSucceeded {
		t.Fatalf("outcomes %+v, want one succeeded order", r.res.Outcomes)
	}
	var orderRows, left int64
	if err := db.WithContext(ctx).Raw("SELECT COUNT(*) FROM orders WHERE request_id = ?", g.RequestID).Row().Scan(&orderRows); err != nil {
		t.Fatal(err)
	}
	if err := db.WithContext(ctx).Raw("SELECT left_stock FROM session_stocks WHERE session_id = ? AND prize_id = ?", k.Session, k.Prize).Row().Scan(&left); err != nil {
		t.Fatal(err)
	}
	if orderRows != 1 || left != 4 {
		t.Fatalf("%d order rows, left_stock %d; want 1 and 4", orderRows, left)
	}
}
