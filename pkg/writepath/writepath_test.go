package writepath

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/retry"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

func grab(session, prize int64, key, user string) seckill.Grab {
	return seckill.Grab{RequestID: seckill.RequestID(session, prize, "key-"+key+"-0000"), UserID: user, SessionID: session, PrizeID: prize,
		AdmittedAt: time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC)}
}

func grabMsg(t *testing.T, offset int64, g seckill.Grab) kafka.Message {
	t.Helper()
	m, err := event.EncodeGrab(g)
	if err != nil {
		t.Fatal(err)
	}
	m.Offset = offset
	return m
}

func TestGroup(t *testing.T) {
	a1, b1, a2 := grab(1, 10, "a1", "u1"), grab(1, 20, "b1", "u2"), grab(1, 10, "a2", "u3")
	c1 := grab(2, 10, "c1", "u1") // same prize id, another session: another group
	poison := kafka.Message{Offset: 99, Value: []byte("{not json")}
	tests := []struct {
		name       string
		msgs       []kafka.Message
		wantKeys   []seckill.SessionPrize
		wantItems  [][]string // request ids per group
		wantOffs   [][]int64  // message offsets per group
		wantPoison []int64
	}{
		{name: "empty", msgs: nil},
		{name: "first-seen order, offset order within a group",
			msgs:      []kafka.Message{grabMsg(t, 1, a1), grabMsg(t, 2, b1), grabMsg(t, 3, a2), grabMsg(t, 4, c1)},
			wantKeys:  []seckill.SessionPrize{{Session: 1, Prize: 10}, {Session: 1, Prize: 20}, {Session: 2, Prize: 10}},
			wantItems: [][]string{{a1.RequestID, a2.RequestID}, {b1.RequestID}, {c1.RequestID}},
			wantOffs:  [][]int64{{1, 3}, {2}, {4}}},
		{name: "poison set apart, the rest grouped",
			msgs:       []kafka.Message{grabMsg(t, 1, a1), poison, grabMsg(t, 3, a2)},
			wantKeys:   []seckill.SessionPrize{{Session: 1, Prize: 10}},
			wantItems:  [][]string{{a1.RequestID, a2.RequestID}},
			wantOffs:   [][]int64{{1, 3}},
			wantPoison: []int64{99}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			groups, bad := GroupGrabs(tc.msgs)
			var keys []seckill.SessionPrize
			var items [][]string
			var offs [][]int64
			for _, g := range groups {
				keys = append(keys, g.Key)
				var rids []string
				for _, it := range g.Items {
					rids = append(rids, it.RequestID)
				}
				items = append(items, rids)
				var o []int64
				for _, m := range g.Msgs {
					o = append(o, m.Offset)
				}
				offs = append(offs, o)
			}
			var poisoned []int64
			for _, p := range bad {
				poisoned = append(poisoned, p.Msg.Offset)
				if p.Cause == nil {
					t.Errorf("poison at %d has no cause", p.Msg.Offset)
				}
			}
			if fmt.Sprint(keys) != fmt.Sprint(tc.wantKeys) || fmt.Sprint(items) != fmt.Sprint(tc.wantItems) ||
				fmt.Sprint(offs) != fmt.Sprint(tc.wantOffs) || !slices.Equal(poisoned, tc.wantPoison) {
				t.Fatalf("groups %v %v %v poison %v, want %v %v %v poison %v",
					keys, items, offs, poisoned, tc.wantKeys, tc.wantItems, tc.wantOffs, tc.wantPoison)
			}
		})
	}
}

func TestSettlement(t *testing.T) {
	k := seckill.SessionPrize{Session: 1, Prize: 10}
	fresh := store.Outcome{Grab: grab(1, 10, "n1", "u1"), OrderID: 7, Status: seckill.OrderSucceeded}
	rejected := store.Outcome{Grab: grab(1, 10, "n2", "u2"), Status: seckill.OrderRejected, Reason: seckill.Reason("sold_out")}
	again := store.Outcome{Grab: grab(1, 10, "e1", "u3"), Before: true}
	forged := store.Outcome{Grab: grab(1, 10, "e2", "mallory"), Before: true}
	owned := seckill.Order{ID: 5, RequestID: again.Grab.RequestID, UserID: "u3", Status: seckill.OrderSucceeded}
	stolen := seckill.Order{ID: 6, RequestID: forged.Grab.RequestID, UserID: "alice", Status: seckill.OrderSucceeded}
	cancelled := seckill.Order{ID: 8, RequestID: again.Grab.RequestID, UserID: "u3", Status: seckill.OrderCancelled,
		Reason: seckill.ReasonPaymentTimeout}
	tests := []struct {
		name           string
		outcomes       []store.Outcome
		owners         map[string]seckill.Order
		want           []stock.Settlement
		wantMismatches []string // request ids
	}{
		{name: "new outcomes as persisted", outcomes: []store.Outcome{fresh, rejected},
			want: []stock.Settlement{{RequestID: fresh.Grab.RequestID, UserID: "u1", OrderID: 7},
				{RequestID: rejected.Grab.RequestID, UserID: "u2", Reason: "sold_out"}}},
		{name: "earlier order under its stored owner", outcomes: []store.Outcome{fresh, again},
			owners: map[string]seckill.Order{owned.RequestID: owned},
			want: []stock.Settlement{{RequestID: fresh.Grab.RequestID, UserID: "u1", OrderID: 7},
				{RequestID: again.Grab.RequestID, UserID: "u3", OrderID: 5}}},
		{name: "forged event: settled under the order's owner, reported", outcomes: []store.Outcome{forged},
			owners:         map[string]seckill.Order{stolen.RequestID: stolen},
			want:           []stock.Settlement{{RequestID: forged.Grab.RequestID, UserID: "alice", OrderID: 6}},
			wantMismatches: []string{forged.Grab.RequestID}},
		{name: "a cancelled order stays cancelled", outcomes: []store.Outcome{again},
			owners: map[string]seckill.Order{cancelled.RequestID: cancelled},
			want: []stock.Settlement{{RequestID: again.Grab.RequestID, UserID: "u3", OrderID: 8,
				Reason: string(seckill.ReasonPaymentTimeout), Cancelled: true}}},
		{name: "owners unreadable: earlier orders left out", outcomes: []store.Outcome{fresh, again, forged}, owners: nil,
			want: []stock.Settlement{{RequestID: fresh.Grab.RequestID, UserID: "u1", OrderID: 7}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, mm := settlement(k, store.PersistResult{Outcomes: tc.outcomes}, tc.owners)
			if b.SessionID != k.Session || b.PrizeID != k.Prize {
				t.Errorf("batch of session %d prize %d, want %v", b.SessionID, b.PrizeID, k)
			}
			if !slices.Equal(b.Items, tc.want) {
				t.Errorf("items\n got %+v\nwant %+v", b.Items, tc.want)
			}
			var rids []string
			for _, m := range mm {
				rids = append(rids, m.RequestID)
			}
			if !slices.Equal(rids, tc.wantMismatches) {
				t.Errorf("mismatches %v, want %v", rids, tc.wantMismatches)
			}
		})
	}
}

// fakeOrders fails Persist with errs in turn, then succeeds.
type fakeOrders struct {
	errs     []error
	calls    int
	detached bool // every attempt's ctx was alive when it ran
	onFail   func()
}

func (f *fakeOrders) PersistFrom(ctx context.Context, _, _ int64, grabs []seckill.Grab, _ time.Time, _ *store.GrabSource) (store.PersistResult, error) {
	f.calls++
	if ctx.Err() != nil {
		f.detached = false
	}
	if f.calls <= len(f.errs) {
		if f.onFail != nil {
			f.onFail()
		}
		return store.PersistResult{}, f.errs[f.calls-1]
	}
	return store.PersistResult{Succeeded: len(grabs)}, nil
}

func (f *fakeOrders) Existing(context.Context, []string) (map[string]seckill.Order, error) {
	return nil, nil
}

type countingObserver struct {
	nop
	attempts, persisted int
	failed              []retry.Action
}

func (o *countingObserver) Attempted(time.Duration) { o.attempts++ }
func (o *countingObserver) Persisted(seckill.SessionPrize, int, store.PersistResult, time.Time) {
	o.persisted++
}
func (o *countingObserver) Failed(a retry.Action) { o.failed = append(o.failed, a) }

func TestPersist(t *testing.T) {
	conflict := fmt.Errorf("persist: %w", seckill.ErrConflict)
	gone := &mysql.MySQLError{Number: 2006, Message: "MySQL server has gone away"}
	noRow := fmt.Errorf("persist: %w", store.ErrNoStockRow)
	policy := retry.Policy{Immediate: 1, Backoff: 2, Base: time.Millisecond, Max: 2 * time.Millisecond}
	tests := []struct {
		name          string
		errs          []error
		cancelAfter   int // cancel ctx after this many failed attempts (0: never)
		wantCalls     int
		wantFailed    []retry.Action
		wantGiveUp    retry.Action // -1: no GiveUp
		wantErrIs     []error
		wantPersisted int
	}{
		{name: "first attempt commits", wantCalls: 1, wantGiveUp: -1, wantPersisted: 1},
		{name: "contention retried, then commits", errs: []error{conflict, conflict}, wantCalls: 3,
			wantFailed: []retry.Action{retry.Now, retry.Later}, wantGiveUp: -1, wantPersisted: 1},
		{name: "no stock row: dead-letter at once", errs: []error{noRow}, wantCalls: 1,
			wantFailed: []retry.Action{retry.DeadLetter}, wantGiveUp: retry.DeadLetter, wantErrIs: []error{store.ErrNoStockRow}},
		{name: "contention outlasts the retries: compensate", errs: []error{conflict, conflict, conflict, conflict, conflict},
			wantCalls: 4, wantFailed: []retry.Action{retry.Now, retry.Later, retry.Later, retry.Compensate},
			wantGiveUp: retry.Compensate, wantErrIs: []error{seckill.ErrConflict}},
		{name: "mysql down is waited out, never compensated", errs: []error{gone, gone, gone, gone, gone, gone}, wantCalls: 7,
			wantFailed: slices.Repeat([]retry.Action{retry.WaitForDB}, 6), wantGiveUp: -1, wantPersisted: 1},
		// A primary fenced in a failover answers 1290 (--read-only) or 1836 (read-only mode)
		// until the address reaches the promoted server: an outage, never a rejection.
		{name: "read-only server is waited out, never compensated",
			errs: []error{&mysql.MySQLError{Number: 1290, Message: "The MariaDB server is running with the --read-only option"},
				fmt.Errorf("persist: %w", &mysql.MySQLError{Number: 1836, Message: "Running in read-only mode"}),
				&mysql.MySQLError{Number: 1290}, &mysql.MySQLError{Number: 1290}, &mysql.MySQLError{Number: 1290}, &mysql.MySQLError{Number: 1290}},
			wantCalls: 7, wantFailed: slices.Repeat([]retry.Action{retry.WaitForDB}, 6), wantGiveUp: -1, wantPersisted: 1},
		{name: "shutdown while mysql is down: stop, not accounted for", errs: []error{gone, gone, gone}, cancelAfter: 2,
			wantCalls: 2, wantFailed: []retry.Action{retry.WaitForDB, retry.WaitForDB}, wantGiveUp: -1,
			wantErrIs: []error{context.Canceled, gone}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			orders := &fakeOrders{errs: tc.errs, detached: true}
			orders.onFail = func() {
				if orders.calls == tc.cancelAfter {
					cancel()
				}
			}
			obs := &countingObserver{}
			w := New(orders, nil, policy, obs, slog.New(slog.DiscardHandler), time.Now)
			_, err := w.Persist(ctx, seckill.SessionPrize{Session: 1, Prize: 10}, []seckill.Grab{grab(1, 10, "k", "u")})
			if orders.calls != tc.wantCalls || obs.attempts != tc.wantCalls {
				t.Errorf("attempts %d (observed %d), want %d", orders.calls, obs.attempts, tc.wantCalls)
			}
			if !slices.Equal(obs.failed, tc.wantFailed) || obs.persisted != tc.wantPersisted {
				t.Errorf("observed failures %v persisted %d, want %v %d", obs.failed, obs.persisted, tc.wantFailed, tc.wantPersisted)
			}
			var giveUp *GiveUp
			switch {
			case tc.wantGiveUp >= 0 && !errors.As(err, &giveUp):
				t.Fatalf("err = %v, want a GiveUp (%s)", err, tc.wantGiveUp)
			case tc.wantGiveUp >= 0 && (giveUp.Action != tc.wantGiveUp || giveUp.Attempts != tc.wantCalls):
				t.Errorf("gave up with %s after %d, want %s after %d", giveUp.Action, giveUp.Attempts, tc.wantGiveUp, tc.wantCalls)
			case tc.wantGiveUp < 0 && errors.As(err, &giveUp):
				t.Errorf("err = %v, want no GiveUp", err)
			case len(tc.wantErrIs) == 0 && tc.wantGiveUp < 0 && err != nil:
				t.Errorf("err = %v, want nil", err)
			}
			for _, want := range tc.wantErrIs {
				if !errors.Is(err, want) {
					t.Errorf("err = %v, want it to wrap %v", err, want)
				}
			}
		})
	}
}

// TestPersistAttemptOutlivesShutdown: a transaction that started finishes even if shutdown
// began meanwhile (the reconciler's replay used to pass the run's context straight through).
func TestPersistAttemptOutlivesShutdown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	orders := &fakeOrders{detached: true}
	w := New(orders, nil, retry.Default(), nil, slog.New(slog.DiscardHandler), time.Now)
	if _, err := w.Persist(ctx, seckill.SessionPrize{Session: 1, Prize: 10}, []seckill.Grab{grab(1, 10, "k", "u")}); err != nil {
		t.Fatal(err)
	}
	if !orders.detached {
		t.Fatal("the attempt ran with the caller's ended context")
	}
}

type fakeReturner struct{ got []stock.UnitReturn }

func (f *fakeReturner) ReturnAll(_ context.Context, items []stock.UnitReturn) (stock.ReturnReport, error) {
	f.got = items
	return stock.ReturnReport{Returned: len(items)}, nil
}

func TestReturnUnits(t *testing.T) {
	steps := []store.StockReturn{{SessionID: 1, PrizeID: 10, RequestID: "1-10-k", UserID: "u", OrderID: 7,
		Reason: seckill.ReasonPaymentTimeout, Resale: true, ReleaseSlot: true}}
	var g fakeReturner
	rep, err := ReturnUnits(context.Background(), &g, steps)
	if err != nil || rep.Returned != 1 {
		t.Fatalf("ReturnUnits = %+v, %v", rep, err)
	}
	want := []stock.UnitReturn{{SessionID: 1, PrizeID: 10, RequestID: "1-10-k", UserID: "u", OrderID: 7,
		Reason: string(seckill.ReasonPaymentTimeout), Resale: true, ReleaseSlot: true}}
	if !slices.Equal(g.got, want) {
		t.Fatalf("returned %+v, want %+v", g.got, want)
	}
	g.got = nil
	if rep, err := ReturnUnits(context.Background(), &g, nil); err != nil || rep.Returned != 0 || g.got != nil {
		t.Fatalf("no steps: %+v %v, gate called with %v", rep, err, g.got)
	}
}
