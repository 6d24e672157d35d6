package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

func TestExceptionCaseLifecycle(t *testing.T) {
	_, db := stacktest.Migrated(t)
	ctx := stacktest.Context(t, 30*time.Second)
	ex := store.NewExceptions(db)
	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	dl := store.CaseReport{Kind: seckill.CaseDeadLetter, Key: "grabs:1-2-abc", SessionID: 1, PrizeID: 2, RequestID: "1-2-abc",
		UserID: "u1", Detail: "no stock row", Evidence: map[string]any{"message": map[string]any{"topic": "grabs"}}}
	drift := store.CaseReport{Kind: seckill.CaseDriftUncorrected, Key: "1:2", SessionID: 1, PrizeID: 2, Detail: "drift"}
	if err := ex.Record(ctx, at, dl, drift); err != nil {
		t.Fatal(err)
	}
	if err := ex.Record(ctx, at.Add(time.Minute), dl); err != nil { // seen again: one case
		t.Fatal(err)
	}
	if err := ex.Record(ctx, at, store.CaseReport{Kind: "x"}); err == nil {
		t.Fatal("a case without a key was recorded")
	}
	open, err := ex.List(ctx, store.CaseFilter{State: seckill.CaseOpen, Kind: seckill.CaseDeadLetter, Limit: 10})
	if err != nil || len(open) != 1 || open[0].Seen != 2 || !open[0].LastSeen.Equal(at.Add(time.Minute)) || !open[0].Replayable {
		t.Fatalf("dead-letter cases %+v %v: want one, seen twice, replayable", open, err)
	}
	id := open[0].ID

	// A refused replay changes nothing but is audited with its reason.
	refuse := func(context.Context, store.CaseDetail) (string, error) {
		return "", fmt.Errorf("no stock row yet: %w", store.ErrNotReplayable)
	}
	d, err := ex.Act(ctx, id, store.ActReplay, "alice", "192.0.2.7", "", at, refuse)
	if !errors.Is(err, store.ErrNotReplayable) || d.State != seckill.CaseOpen || len(d.Actions) != 1 ||
		d.Actions[0].Outcome != "refused: no stock row yet: not replayable" {
		t.Fatalf("refused replay: %+v %v", d, err)
	}
	// A replay that fails (Kafka down) leaves no trace and can be tried again.
	if _, err := ex.Act(ctx, id, store.ActReplay, "alice", "192.0.2.7", "", at, func(context.Context, store.CaseDetail) (string, error) {
		return "", errors.New("kafka down")
	}); err == nil || errors.Is(err, store.ErrNotReplayable) {
		t.Fatalf("failed replay: %v", err)
	}
	calls := 0
	replay := func(_ context.Context, c store.CaseDetail) (string, error) {
		calls++
		if string(c.Evidence) != `{"message":{"topic":"grabs"}}` {
			return "", fmt.Errorf("evidence %s", c.Evidence)
		}
		return "produced", nil
	}
	for range 2 { // a double click replays once
		if d, err = ex.Act(ctx, id, store.ActReplay, "alice", "192.0.2.7", "row restored", at.Add(time.Hour), replay); err != nil || d.State != seckill.CaseReplayed {
			t.Fatalf("replay: %+v %v", d, err)
		}
	}
	if calls != 1 || len(d.Actions) != 2 || d.StateChangedBy != "alice" || d.StateNote != "row restored" {
		t.Fatalf("replayed %d times, case %+v", calls, d)
	}
	// Seen again after the replay: the replay did not fix it, the case opens again.
	if err := ex.Record(ctx, at.Add(2*time.Hour), dl); err != nil {
		t.Fatal(err)
	}
	if d, err = ex.Get(ctx, id); err != nil || d.State != seckill.CaseOpen || d.StateChangedBy != "system" || d.Seen != 3 {
		t.Fatalf("reopened: %+v %v", d, err)
	}

	// Resolve needs a note; resolving twice is one action; a resolved case cannot be dismissed.
	dr, err := ex.List(ctx, store.CaseFilter{Kind: seckill.CaseDriftUncorrected, Limit: 1})
	if err != nil || len(dr) != 1 || dr[0].Replayable {
		t.Fatalf("drift cases %+v %v", dr, err)
	}
	if _, err := ex.Act(ctx, dr[0].ID, store.ActResolve, "bob", "192.0.2.7", "", at, nil); err == nil {
		t.Fatal("resolved without a note")
	}
	if _, err := ex.Act(ctx, dr[0].ID, store.ActReplay, "bob", "192.0.2.7", "", at, replay); !errors.Is(err, store.ErrNotReplayable) {
		t.Fatalf("replay of a drift case: %v", err)
	}
	for range 2 {
		if d, err = ex.Act(ctx, dr[0].ID, store.ActResolve, "bob", "2001:db8::7", "redis restarted from a stale AOF", at, nil); err != nil || d.State != seckill.CaseResolved {
			t.Fatalf("resolve: %+v %v", d, err)
		}
	}
	// Each action keeps the address it came from.
	if len(d.Actions) != 2 || d.Actions[1].Action != store.ActResolve || d.Actions[1].Actor != "bob" ||
		d.Actions[0].RemoteAddr != "192.0.2.7" || d.Actions[1].RemoteAddr != "2001:db8::7" {
		t.Fatalf("actions %+v: want the refused replay and one resolve", d.Actions)
	}
	if _, err := ex.Act(ctx, dr[0].ID, store.ActDismiss, "bob", "192.0.2.7", "never mind", at, nil); !errors.Is(err, store.ErrCaseClosed) {
		t.Fatalf("dismiss a resolved case: %v", err)
	}
	if _, err := ex.Get(ctx, 999999); !errors.Is(err, seckill.ErrNotFound) {
		t.Fatalf("missing case: %v", err)
	}
	byKind, err := ex.OpenByKind(ctx)
	if err != nil || byKind[seckill.CaseDeadLetter] != 1 || byKind[seckill.CaseDriftUncorrected] != 0 {
		t.Fatalf("open by kind %v %v", byKind, err)
	}
}

func TestRunReportsKeepTheNewest(t *testing.T) {
	_, db := stacktest.Migrated(t)
	ctx := stacktest.Context(t, 30*time.Second)
	runs := store.NewRunReports(db)
	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	for i := range 3 {
		if err := runs.Save(ctx, at.Add(time.Duration(i)*time.Second), 12, int64(i+1), i == 1, []byte(fmt.Sprintf(`{"fence":%d}`, i+1))); err != nil {
			t.Fatal(err)
		}
	}
	got, err := runs.Recent(ctx, 2)
	if err != nil || len(got) != 2 || string(got[0].Report) != `{"fence":3}` || !got[1].Failed {
		t.Fatalf("recent %+v %v", got, err)
	}
}

// Cases whose rows together exceed the server's max_allowed_packet (150 poison messages of
// 120 KB each, evidence near the per-case bound) are recorded, in as many statements as the
// server takes, all or none. One statement for all of them was refused ("invalid connection":
// the server drops a packet over its limit) and retried forever.
func TestCasesLargerTogetherThanAPacketAreRecorded(t *testing.T) {
	_, db := stacktest.Migrated(t)
	ctx := stacktest.Context(t, 60*time.Second)
	var packet int64
	if err := db.Raw("SELECT @@max_allowed_packet").Row().Scan(&packet); err != nil {
		t.Fatal(err)
	}
	evidence := strings.Repeat("e", 200<<10)
	n := int(packet/(200<<10)) + 50 // together well above one packet
	reports := make([]store.CaseReport, n)
	for i := range reports {
		reports[i] = store.CaseReport{Kind: seckill.CaseDeadLetter, Key: fmt.Sprintf("big/%d", i), Detail: "poison",
			Evidence: map[string]any{"value": evidence}}
	}
	at := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	if err := store.NewExceptions(db).Record(ctx, at, reports...); err != nil {
		t.Fatalf("%d cases of %d KiB each (max_allowed_packet %d): %v", n, 200, packet, err)
	}
	counts, err := store.NewExceptions(db).CountByKind(ctx)
	if err != nil || counts[seckill.CaseDeadLetter] != n {
		t.Fatalf("cases %v %v, want %d", counts, err, n)
	}
}
