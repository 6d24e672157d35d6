package admin

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// A prize's buckets are named in the request or derived from the settings, shown on read,
// and every session×prize's bucket rows exist once the activity does (docs/design.md).
func TestAdminCreatesBuckets(t *testing.T) {
	e := newAdminEnvWith(t, bucketSettings{units: 10, max: 8})
	body := activityJSON(e.now.Add(time.Hour), func(m map[string]any) {
		m["prizes"] = []map[string]any{
			{"name": "named", "stock": 50, "buckets": 4},
			{"name": "derived", "stock": 35},  // ceil(35 / 10) = 4
			{"name": "capped", "stock": 1000}, // ceil(1000 / 10) = 100, capped at 8
			{"name": "small", "stock": 10},    // one bucket's worth: 1
			{"name": "named one", "stock": 500, "buckets": 1},
		}
	})
	code, act := e.do(t, "POST", "/admin/v1/activities", adminToken, body)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, act)
	}
	want := map[string]int{"named": 4, "derived": 4, "capped": 8, "small": 1, "named one": 1}
	check := func(what string, act map[string]any) map[string]int64 {
		ids := map[string]int64{}
		for _, p := range act["prizes"].([]any) {
			pm := p.(map[string]any)
			name := pm["name"].(string)
			if got := int(pm["buckets"].(float64)); got != want[name] {
				t.Errorf("%s: prize %q has %d buckets, want %d", what, name, got, want[name])
			}
			ids[name] = int64(pm["id"].(float64))
		}
		return ids
	}
	ids := check("create", act)
	_, read := e.do(t, "GET", "/admin/v1/activities/"+itoa(int64(act["id"].(float64))), adminToken, "")
	check("read", read)

	cat := store.NewCatalog(e.db, func() time.Time { return e.now })
	sessions := act["sessions"].([]any)
	stocks := map[string]int{"named": 50, "derived": 35, "capped": 1000, "small": 10, "named one": 500}
	var bucketRows int64
	for _, s := range sessions {
		sid := int64(s.(map[string]any)["id"].(float64))
		for name, pid := range ids {
			ps, err := cat.PrizeStock(context.Background(), sid, pid)
			if err != nil {
				t.Fatal(err)
			}
			if ps.Buckets != want[name] || ps.Total != stocks[name] || ps.Left != stocks[name] {
				t.Errorf("session %d prize %q: %+v, want %d buckets of %d units in all", sid, name, ps, want[name], stocks[name])
			}
			bucketRows += int64(want[name] - 1)
		}
	}
	if n := e.rows(t, "stock_buckets"); n != bucketRows {
		t.Errorf("%d stock_buckets rows, want %d", n, bucketRows)
	}
	// The session view shows each prize's buckets and its stock summed over them.
	sid := int64(sessions[0].(map[string]any)["id"].(float64))
	_, sess := e.do(t, "GET", "/admin/v1/sessions/"+itoa(sid), adminToken, "")
	for _, st := range sess["stock"].([]any) {
		sm := st.(map[string]any)
		var name string
		for n, id := range ids {
			if id == int64(sm["prize_id"].(float64)) {
				name = n
			}
		}
		db := sm["db"].(map[string]any)
		if int(sm["buckets"].(float64)) != want[name] || int(db["total"].(float64)) != stocks[name] || int(db["left"].(float64)) != stocks[name] {
			t.Errorf("session view of %q: %v, want %d buckets of %d units in all", name, sm, want[name], stocks[name])
		}
	}
}

// Without SECKILL_BUCKET_UNITS a prize that names no buckets has none: no bucket row.
func TestAdminBucketsOffByDefault(t *testing.T) {
	e := newAdminEnvWith(t, bucketSettings{max: 16})
	code, act := e.do(t, "POST", "/admin/v1/activities", adminToken, activityJSON(e.now.Add(time.Hour), nil))
	if code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, act)
	}
	for _, p := range act["prizes"].([]any) {
		if b := p.(map[string]any)["buckets"]; b != float64(1) {
			t.Errorf("prize %v: buckets %v, want 1", p, b)
		}
	}
	if n := e.rows(t, "stock_buckets"); n != 0 {
		t.Errorf("%d stock_buckets rows, want none", n)
	}
}

func TestAdminBucketsValidation(t *testing.T) {
	e := newAdminEnvWith(t, bucketSettings{max: 16})
	start := e.now.Add(time.Hour)
	prize := func(buckets any) string {
		return activityJSON(start, func(m map[string]any) {
			m["prizes"] = []map[string]any{{"name": "ok", "stock": 100}, {"name": "x", "stock": 100, "buckets": buckets}}
		})
	}
	for _, tc := range []struct {
		name string
		body string
	}{
		{"zero", prize(0)},
		{"negative", prize(-2)},
		{"beyond the cap", prize(17)},
		{"beyond the domain's cap", prize(5000)},
		{"not a number", prize("four")},
		{"fraction", prize(2.5)},
		{"more buckets than units", activityJSON(start, func(m map[string]any) {
			m["prizes"] = []map[string]any{{"name": "x", "stock": 3, "buckets": 4}}
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := e.do(t, "POST", "/admin/v1/activities", adminToken, tc.body)
			if code != http.StatusBadRequest {
				t.Fatalf("status %d (%v), want 400", code, out)
			}
			if out["error"] != "invalid_input" {
				t.Fatalf("error %v, want invalid_input", out)
			}
			if tc.name == "not a number" || tc.name == "fraction" {
				return // the decoder's message names the field in its text
			}
			fields, _ := out["fields"].([]any)
			if len(fields) != 1 || fields[0].(map[string]any)["field"] == nil {
				t.Fatalf("error %v does not name one field", out)
			}
			if f := fields[0].(map[string]any)["field"]; f != "prizes[1].buckets" && f != "prizes[0].buckets" {
				t.Fatalf("error names %v, want the prize's buckets", f)
			}
		})
	}
	for _, table := range []string{"activities", "prizes", "sessions", "session_stocks", "stock_buckets"} {
		if n := e.rows(t, table); n != 0 {
			t.Errorf("%s has %d rows after only rejected requests", table, n)
		}
	}
}

// A prize with stock buckets is adjusted through the transfers journal: the API answers 202
// with the plan (levelling transfers from or to outside the prize, one audit row) and the
// prize's total changes once the reconciler ran them. Add, then remove on a 4-bucket prize:
// the sums come out right; a total below what is sold, a second adjustment while one is
// being applied and an adjustment after the end are refused with 409, changing nothing; a
// prize without buckets is adjusted as before.
func TestAdminAdjustsBucketedPrize(t *testing.T) {
	e := newAdminEnvWith(t, bucketSettings{max: 16})
	start := e.now.Add(time.Hour)
	code, act := e.do(t, "POST", "/admin/v1/activities", adminToken, activityJSON(start, func(m map[string]any) {
		m["prizes"] = []map[string]any{{"name": "hot", "stock": 40, "buckets": 4}, {"name": "plain", "stock": 5}}
	}))
	if code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, act)
	}
	sid := int64(act["sessions"].([]any)[0].(map[string]any)["id"].(float64))
	prizes := act["prizes"].([]any)
	hot, plain := int64(prizes[0].(map[string]any)["id"].(float64)), int64(prizes[1].(map[string]any)["id"].(float64))
	path := "/admin/v1/sessions/" + itoa(sid) + "/prizes/"
	ctx := stacktest.Context(t, 30*time.Second)
	cat := store.NewCatalog(e.db, func() time.Time { return e.now })
	prize := func() (store.PrizeStock, []int) {
		t.Helper()
		ps, err := cat.PrizeStock(ctx, sid, hot)
		if err != nil {
			t.Fatal(err)
		}
		bs, err := cat.Buckets(ctx, sid, hot)
		if err != nil {
			t.Fatal(err)
		}
		lefts := make([]int, len(bs))
		for i, b := range bs {
			lefts[i] = b.Left
		}
		return ps, lefts
	}
	// planned reads a 202's plan as units per bucket (+ added, - taken).
	planned := func(out map[string]any) []int {
		t.Helper()
		units := make([]int, 4)
		for _, x := range out["transfers"].([]any) {
			tr := x.(map[string]any)
			units[int(tr["bucket"].(float64))] += int(tr["units"].(float64))
		}
		return units
	}
	// The reconciler's part, as its executor runs it for buckets not preheated (no Redis
	// key: the take finds nothing and the give records only the revision; the reconciler's
	// TestAdjustmentResumesAfterEveryStep runs the whole executor on loaded buckets).
	l := lease.New(e.db, "t-adjust-"+stacktest.ID(t), time.Minute)
	h, ok, err := l.TryAcquire(ctx)
	if err != nil || !ok {
		t.Fatalf("lease: %v %v", ok, err)
	}
	apply := func() {
		t.Helper()
		open, err := cat.UnfinishedTransfers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range open {
			if _, _, err := cat.MoveTransfer(ctx, h.Fence, tr.ID, tr.Requested); err != nil {
				t.Fatal(err)
			}
			if err := cat.FinishTransfer(ctx, h.Fence, tr.ID); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Add 6 to 40 units in buckets of 10.
	code, out := e.do(t, "PUT", path+itoa(hot)+"/stock", adminToken, `{"total": 46, "reason": "more"}`)
	if code != http.StatusAccepted || out["state"] != "planned" || out["before"] != float64(40) || out["after"] != float64(46) || out["buckets"] != float64(4) {
		t.Fatalf("raise: %d %v, want 202 planned 40 -> 46", code, out)
	}
	if got := planned(out); !slices.Equal(got, []int{2, 2, 1, 1}) {
		t.Fatalf("raise planned %v, want [2 2 1 1]", got)
	}
	if ps, _ := prize(); ps.Total != 40 || e.rows(t, "audit_log") != 1 {
		t.Fatalf("before the reconciler ran it: %+v, %d audit rows; want 40 and one row", ps, e.rows(t, "audit_log"))
	}
	code, out = e.do(t, "PUT", path+itoa(hot)+"/stock", adminToken, `{"total": 50, "reason": "again"}`)
	if code != http.StatusConflict || out["error"] != "conflict" || e.rows(t, "bucket_transfers") != 4 || e.rows(t, "audit_log") != 1 {
		t.Fatalf("a second adjustment while the first is applied: %d %v, want 409 and nothing new", code, out)
	}
	apply()
	if ps, lefts := prize(); ps.Total != 46 || ps.Left != 46 || !slices.Equal(lefts, []int{12, 12, 11, 11}) {
		t.Fatalf("after the raise: %+v %v", ps, lefts)
	}
	_, sess := e.do(t, "GET", "/admin/v1/sessions/"+itoa(sid), adminToken, "")
	for _, st := range sess["stock"].([]any) {
		sm := st.(map[string]any)
		if int64(sm["prize_id"].(float64)) == hot && sm["db"].(map[string]any)["total"] != float64(46) {
			t.Errorf("the session view after the raise: %v, want total 46", sm)
		}
	}

	// The session opens and sells 20: bucket 0 sells out, bucket 1 sells 8.
	e.now = start.Add(time.Minute)
	for _, q := range []string{
		"UPDATE session_stocks SET left_stock = 0 WHERE session_id = ? AND prize_id = ?",
		"UPDATE stock_buckets SET left_stock = 4 WHERE session_id = ? AND prize_id = ? AND bucket = 1",
	} {
		if err := e.db.Exec(q, sid, hot).Error; err != nil {
			t.Fatal(err)
		}
	}
	journal, audits := e.rows(t, "bucket_transfers"), e.rows(t, "audit_log")
	code, out = e.do(t, "PUT", path+itoa(hot)+"/stock", adminToken, `{"total": 19, "reason": "below sold"}`)
	if code != http.StatusConflict || out["error"] != "conflict" {
		t.Fatalf("a cut below the 20 sold: %d %v, want 409", code, out)
	}
	if ps, lefts := prize(); ps.Total != 46 || ps.Left != 26 || !slices.Equal(lefts, []int{0, 4, 11, 11}) ||
		e.rows(t, "bucket_transfers") != journal || e.rows(t, "audit_log") != audits {
		t.Fatalf("a refused cut changed something: %+v %v", ps, lefts)
	}

	// Remove 16: from the buckets with most left.
	code, out = e.do(t, "PUT", path+itoa(hot)+"/stock", adminToken, `{"total": 30, "reason": "fewer"}`)
	if code != http.StatusAccepted || out["before"] != float64(46) || out["after"] != float64(30) {
		t.Fatalf("cut: %d %v, want 202 46 -> 30", code, out)
	}
	if got := planned(out); !slices.Equal(got, []int{0, -1, -8, -7}) {
		t.Fatalf("cut planned %v, want [0 -1 -8 -7]", got)
	}
	apply()
	if ps, lefts := prize(); ps.Total != 30 || ps.Left != 10 || !slices.Equal(lefts, []int{0, 3, 3, 4}) {
		t.Fatalf("after the cut: %+v %v, want total 30, left 10 in [0 3 3 4]", ps, lefts)
	}
	if code, out := e.do(t, "PUT", path+itoa(hot)+"/stock", adminToken, `{"total": 30, "reason": "same"}`); code != http.StatusAccepted || len(out["transfers"].([]any)) != 0 {
		t.Fatalf("no change: %d %v, want 202 with no transfer", code, out)
	}

	// A prize without buckets: as before (its session has started: refused as always).
	if code, out := e.do(t, "PUT", path+itoa(plain)+"/stock", adminToken, `{"total": 8, "reason": "more"}`); code != http.StatusConflict || out["error"] != "session_started" {
		t.Fatalf("adjust of a started prize without buckets: %d %v, want 409 session_started", code, out)
	}
	e.now = start.Add(time.Hour)
	if code, out := e.do(t, "PUT", path+itoa(hot)+"/stock", adminToken, `{"total": 40, "reason": "late"}`); code != http.StatusConflict || out["error"] != "session_ended" {
		t.Fatalf("after the end: %d %v, want 409 session_ended", code, out)
	}
}
