package linearcheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/internal/history"
)

// A tiny history builder: times are in milliseconds on the recorder's axis.
type hb struct{ ops []history.Op }

func ms(n int) int64 { return int64(time.Duration(n) * time.Millisecond) }

func (b *hb) grab(client int, user, rid string, call, ret, code int, out string) *hb {
	b.ops = append(b.ops, history.Op{Client: client, Kind: history.Grab, User: user, Prize: 1, Key: rid, RID: rid,
		Call: ms(call), Return: ms(ret), Code: code, Out: out})
	return b
}

func (b *hb) read(client int, user, rid string, call, ret, code int, out string) *hb {
	b.ops = append(b.ops, history.Op{Client: client, Kind: history.Status, User: user, Prize: 1, RID: rid,
		Call: ms(call), Return: ms(ret), Code: code, Out: out})
	return b
}

func (b *hb) lost(client int, user, rid string, call, ret int) *hb {
	b.ops = append(b.ops, history.Op{Client: client, Kind: history.Grab, User: user, Prize: 1, Key: rid, RID: rid,
		Call: ms(call), Return: ms(ret), Err: "context deadline exceeded"})
	return b
}

func (b *hb) back(at, units int, out string) *hb {
	b.ops = append(b.ops, history.Op{Kind: history.Returned, Prize: 1, Call: ms(at), Return: ms(at), Units: units, Out: out})
	return b
}

func header(total, limit int) history.Header {
	return history.Header{Row: "test", Limit: limit, Prizes: []history.Prize{{ID: 1, Total: total}}}
}

func classes(r Report) []Class {
	var out []Class
	for _, v := range r.Violations {
		out = append(out, v.Class)
	}
	return out
}

func wantOnly(t *testing.T, r Report, c Class) {
	t.Helper()
	if r.Count(c) == 0 || r.Count(c) != len(r.Violations) {
		t.Fatalf("want only %q, got %v", c, r.Violations)
	}
}

func wantClean(t *testing.T, r Report) {
	t.Helper()
	if !r.Linearizable() {
		t.Fatalf("a correct history was refused: %v", r.Violations)
	}
}

// A correct sale: concurrent grabs, a repeat click answered with its grab's status, a
// sold-out once every unit was taken, a grab whose answer was lost and turned out admitted,
// a limit answer while the user held the slot, and the final reads.
func TestACorrectHistoryPasses(t *testing.T) {
	b := (&hb{}).
		grab(0, "u1", "a", 0, 5, 202, "queued").
		grab(1, "u2", "b", 1, 6, 202, "queued").
		lost(2, "u3", "c", 2, 30).
		grab(0, "u1", "a", 7, 9, 202, "queued").     // a double click
		grab(3, "u4", "d", 31, 33, 409, "sold_out"). // a, b and c took the three units
		grab(0, "u1", "e", 40, 41, 409, "limit_reached").
		read(2, "u3", "c", 50, 51, 200, "succeeded").
		read(9, "u1", "a", 60, 61, 200, "succeeded").
		read(9, "u2", "b", 60, 61, 200, "rejected/sold_out").
		read(9, "u3", "c", 62, 63, 200, "succeeded")
	wantClean(t, Check(header(3, 1), b.ops))
}

// Concurrent answers may come in either order: a read overlapping the grab's admission may
// already see it, and a read overlapping the persist may say queued or succeeded.
func TestOverlappingAnswersMayComeInEitherOrder(t *testing.T) {
	b := (&hb{}).
		grab(0, "u1", "a", 0, 10, 202, "queued").
		read(1, "u1", "a", 2, 12, 200, "succeeded"). // the consumer persisted it meanwhile
		read(0, "u1", "a", 11, 13, 200, "succeeded").
		read(9, "u1", "a", 20, 21, 200, "succeeded")
	wantClean(t, Check(header(1, 1), b.ops))
}

// A cancelled order gives its unit back once: it is sold again, and, where cancellations
// give slots back, the same buyer may grab again.
func TestAReturnedUnitIsSoldOnceAgain(t *testing.T) {
	b := (&hb{}).
		grab(0, "u1", "a", 0, 1, 202, "queued").
		read(0, "u1", "a", 10, 11, 200, "cancelled/buyer_cancelled").
		back(12, 1, "return").
		grab(0, "u1", "b", 20, 21, 202, "queued").
		grab(1, "u2", "c", 22, 23, 409, "sold_out").
		read(9, "u1", "a", 30, 31, 200, "cancelled/buyer_cancelled").
		read(9, "u1", "b", 30, 31, 200, "succeeded")
	h := header(1, 1)
	h.RegrabAfterCancel = true
	wantClean(t, Check(h, b.ops))
}

func TestSoldOutWhileAUnitRemainedIsCaught(t *testing.T) {
	b := (&hb{}).
		grab(0, "u1", "a", 0, 1, 202, "queued").
		grab(1, "u2", "b", 5, 6, 409, "sold_out"). // one of two units left
		read(9, "u1", "a", 30, 31, 200, "succeeded")
	r := Check(header(2, 1), b.ops)
	wantOnly(t, r, SoldOutEarly)
	if !strings.Contains(r.Violations[0].Detail, "at worst 1 unit") {
		t.Fatalf("detail: %s", r.Violations[0].Detail)
	}
}

// With buckets, the gateways decide from a view of every bucket up to Stale old: a unit that
// came back less than Stale before the answer may not be in it; one that came back earlier is.
func TestSoldOutKnowsTheBucketsStaleView(t *testing.T) {
	base := func() *hb {
		return (&hb{}).
			grab(0, "u1", "a", 0, 1, 202, "queued").
			read(9, "u1", "a", 2, 3, 200, "cancelled/buyer_cancelled").
			back(10, 1, "return")
	}
	h := header(1, 1)
	h.Prizes[0].Stale = 100 * time.Millisecond
	wantClean(t, Check(h, base().grab(1, "u2", "b", 60, 61, 409, "sold_out").ops))
	wantOnly(t, Check(h, base().grab(1, "u2", "b", 200, 201, 409, "sold_out").ops), SoldOutEarly)
}

func TestAStatusThatGoesBackIsCaught(t *testing.T) {
	b := (&hb{}).
		grab(0, "u1", "a", 0, 1, 202, "queued").
		read(0, "u1", "a", 10, 11, 200, "succeeded").
		read(0, "u1", "a", 20, 21, 200, "queued").
		read(9, "u1", "a", 30, 31, 200, "succeeded")
	wantOnly(t, Check(header(5, 1), b.ops), Regressed)
}

func TestAContradictionIsCaught(t *testing.T) {
	b := (&hb{}).
		grab(0, "u1", "a", 0, 1, 202, "queued").
		read(0, "u1", "a", 10, 11, 200, "cancelled/payment_timeout").
		read(0, "u1", "a", 20, 21, 200, "succeeded") // a cancellation acknowledged, then undone
	wantOnly(t, Check(header(5, 1), b.ops), Regressed)
}

// A repeat of an admitted key must hear its grab's status, never a verdict of a new grab.
func TestARepeatAnsweredAsANewGrabIsCaught(t *testing.T) {
	b := (&hb{}).
		grab(0, "u1", "a", 0, 1, 202, "queued").
		grab(0, "u1", "a", 5, 6, 409, "sold_out").
		read(9, "u1", "a", 30, 31, 200, "succeeded")
	r := Check(header(1, 1), b.ops)
	if r.Count(Regressed) != 1 {
		t.Fatalf("want the repeat refused by the buyer's model, got %v", r.Violations)
	}
}

func TestAUnitReturnedTwiceIsCaught(t *testing.T) {
	// One unit, one cancellation: two buyers got it afterwards.
	b := (&hb{}).
		grab(0, "u1", "a", 0, 1, 202, "queued").
		read(0, "u1", "a", 10, 11, 200, "cancelled/buyer_cancelled").
		back(12, 1, "return").
		back(13, 1, "return"). // the server's own records say it twice; the count trusts cancellations
		grab(1, "u2", "b", 20, 21, 202, "queued").
		grab(2, "u3", "c", 20, 21, 202, "queued").
		read(9, "u2", "b", 30, 31, 200, "succeeded").
		read(9, "u3", "c", 30, 31, 200, "rejected/sold_out").
		read(9, "u1", "a", 30, 31, 200, "cancelled/buyer_cancelled")
	wantOnly(t, Check(header(1, 1), b.ops), OverAdmitted)
}

func TestAUserOverTheLimitIsCaught(t *testing.T) {
	b := (&hb{}).
		grab(0, "u1", "a", 0, 1, 202, "queued").
		grab(0, "u1", "b", 5, 6, 202, "queued"). // limit 1, and a is never given up
		read(9, "u1", "a", 30, 31, 200, "succeeded").
		read(9, "u1", "b", 30, 31, 200, "rejected/limit")
	wantOnly(t, Check(header(5, 1), b.ops), OverLimit)
}

// Without regrab after cancel, a cancelled order keeps its buyer's slot.
func TestACancellationGivesNoSlotBackWithoutRegrab(t *testing.T) {
	b := (&hb{}).
		grab(0, "u1", "a", 0, 1, 202, "queued").
		read(0, "u1", "a", 10, 11, 200, "cancelled/buyer_cancelled").
		grab(0, "u1", "b", 20, 21, 202, "queued").
		read(9, "u1", "a", 30, 31, 200, "cancelled/buyer_cancelled").
		read(9, "u1", "b", 30, 31, 200, "succeeded")
	wantOnly(t, Check(header(5, 1), b.ops), OverLimit)
}

func TestLimitReachedBelowTheLimitIsCaught(t *testing.T) {
	b := (&hb{}).grab(0, "u1", "a", 0, 1, 409, "limit_reached")
	wantOnly(t, Check(header(5, 1), b.ops), OverLimit)
}

func TestA202ThatReadsNotFoundIsCaught(t *testing.T) {
	b := (&hb{}).
		grab(0, "u1", "a", 0, 1, 202, "queued").
		read(0, "u1", "a", 10, 11, 404, "not_found").
		read(9, "u1", "a", 30, 31, 200, "succeeded")
	wantOnly(t, Check(header(5, 1), b.ops), Unreadable)
}

func TestA202NeverReadFinalIsCaught(t *testing.T) {
	for name, b := range map[string]*hb{
		"never read":   (&hb{}).grab(0, "u1", "a", 0, 1, 202, "queued"),
		"still queued": (&hb{}).grab(0, "u1", "a", 0, 1, 202, "queued").read(9, "u1", "a", 30, 31, 200, "queued"),
		"unavailable":  (&hb{}).grab(0, "u1", "a", 0, 1, 202, "queued").read(9, "u1", "a", 30, 31, 503, "unavailable"),
	} {
		t.Run(name, func(t *testing.T) { wantOnly(t, Check(header(5, 1), b.ops), Unreadable) })
	}
}

// A grab whose answer was lost may or may not have been admitted: either reading is fine.
func TestAnUnknownOutcomeMayGoEitherWay(t *testing.T) {
	admitted := (&hb{}).lost(0, "u1", "a", 0, 1).read(9, "u1", "a", 30, 31, 200, "succeeded")
	wantClean(t, Check(header(1, 1), admitted.ops))
	never := (&hb{}).lost(0, "u1", "a", 0, 1).read(9, "u1", "a", 30, 31, 404, "not_found").
		grab(1, "u2", "b", 40, 41, 202, "queued").read(9, "u2", "b", 50, 51, 200, "succeeded")
	wantClean(t, Check(header(1, 1), never.ops))
}

func TestTheVisualizationIsWritten(t *testing.T) {
	b := (&hb{}).
		grab(0, "u1", "a", 0, 1, 202, "queued").
		read(0, "u1", "a", 10, 11, 200, "succeeded").
		read(0, "u1", "a", 20, 21, 200, "queued")
	r := Check(header(5, 1), b.ops)
	path := filepath.Join(t.TempDir(), "v.html")
	ok, err := r.WriteHTML(path)
	if err != nil || !ok {
		t.Fatalf("WriteHTML: %v %v", ok, err)
	}
	raw, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(raw), "status(a)") {
		t.Fatalf("the visualization does not show the operations: %v", err)
	}
	if ok, _ := Check(header(5, 1), (&hb{}).ops).WriteHTML(path); ok {
		t.Fatal("a clean report wrote a visualization")
	}
}

// A history round-trips through its file format and checks the same.
func TestAHistoryFileChecksTheSame(t *testing.T) {
	b := (&hb{}).grab(0, "u1", "a", 0, 1, 202, "queued").read(0, "u1", "a", 10, 11, 404, "not_found")
	path := filepath.Join(t.TempDir(), "h.jsonl.gz")
	if err := history.WriteFile(path, header(5, 1), b.ops); err != nil {
		t.Fatal(err)
	}
	h, ops, err := history.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := classes(Check(h, ops)); len(got) == 0 || got[0] != Unreadable {
		t.Fatalf("read back: %v", got)
	}
}

// Where the row's fault lets Redis forget what it admitted, Redis may admit beyond the stock
// and the database refuses the excess: the last guard, not a violation; elsewhere it is one.
func TestWhatTheDatabaseRefusedAfterRedisForgotIsNoViolation(t *testing.T) {
	b := (&hb{}).
		grab(0, "u1", "a", 0, 1, 202, "queued").
		grab(1, "u2", "b", 2, 3, 202, "queued").
		read(9, "u1", "a", 30, 31, 200, "succeeded").
		read(9, "u2", "b", 30, 31, 200, "rejected/sold_out")
	h := header(1, 1)
	wantOnly(t, Check(h, b.ops), OverAdmitted)
	h.RedisMayForget = true
	wantClean(t, Check(h, b.ops))
}
