package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/store"
)

// A prize's buckets are named in the request or derived from the settings, shown on read,
// and every session×prize's bucket rows exist once the activity does (docs/buckets.md).
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

// A bucketed prize's stock cannot be adjusted yet (it needs the transfers journal's
// "outside" bucket): a clear 409 that changes nothing; a prize without buckets still can.
func TestAdminAdjustRefusesBucketedPrize(t *testing.T) {
	e := newAdminEnvWith(t, bucketSettings{max: 16})
	code, act := e.do(t, "POST", "/admin/v1/activities", adminToken, activityJSON(e.now.Add(time.Hour), func(m map[string]any) {
		m["prizes"] = []map[string]any{{"name": "hot", "stock": 40, "buckets": 4}, {"name": "plain", "stock": 5}}
	}))
	if code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, act)
	}
	sid := int64(act["sessions"].([]any)[0].(map[string]any)["id"].(float64))
	prizes := act["prizes"].([]any)
	hot, plain := int64(prizes[0].(map[string]any)["id"].(float64)), int64(prizes[1].(map[string]any)["id"].(float64))
	path := "/admin/v1/sessions/" + itoa(sid) + "/prizes/"
	code, out := e.do(t, "PUT", path+itoa(hot)+"/stock", adminToken, `{"total": 80, "reason": "more"}`)
	if code != http.StatusConflict || out["error"] != "bucketed" {
		t.Fatalf("adjust of a bucketed prize: %d %v, want 409 bucketed", code, out)
	}
	ps, err := store.NewCatalog(e.db, func() time.Time { return e.now }).PrizeStock(context.Background(), sid, hot)
	if err != nil {
		t.Fatal(err)
	}
	if ps.Total != 40 || ps.Left != 40 || ps.Buckets != 4 {
		t.Fatalf("after a refused adjustment: %+v", ps)
	}
	if n := e.rows(t, "audit_log"); n != 0 {
		t.Fatalf("%d audit rows after a refused adjustment", n)
	}
	if code, out := e.do(t, "PUT", path+itoa(plain)+"/stock", adminToken, `{"total": 8, "reason": "more"}`); code != http.StatusOK {
		t.Fatalf("adjust of a prize without buckets: %d %v", code, out)
	}
}
