package admin

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/seckill-pipeline/seckill/gateway/clientip"
	"github.com/seckill-pipeline/seckill/gateway/operator"
	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/preheat"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

const adminToken = "admin-token-for-tests-0123456789"

// tokenNames are the operators' credentials: token → name.
type tokenNames map[string]string

func (t tokenNames) Authenticate(token string) (string, bool) {
	name, ok := t[token]
	return name, ok
}

// Role: every test credential is an admin (TestAdminRoutesByRole tests the roles).
func (t tokenNames) Role(name string) operator.Role {
	for _, n := range t {
		if n == name {
			return operator.RoleAdmin
		}
	}
	return 0
}

type adminEnv struct {
	srv *httptest.Server
	db  *gorm.DB
	now time.Time
}

func newAdminEnv(t *testing.T) *adminEnv {
	t.Helper()
	return newAdminEnvWith(t, bucketSettings{})
}

// newAdminEnvWith is newAdminEnv with the gateway's bucket settings.
func newAdminEnvWith(t *testing.T, buckets bucketSettings) *adminEnv {
	t.Helper()
	_, db := stacktest.Migrated(t)
	rdb := stacktest.Redis(t)
	stacktest.CleanupKeys(t, rdb, db)
	ctx := stacktest.Context(t, 30*time.Second)
	gate, err := stock.NewGate(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	env := &adminEnv{db: db, now: time.Now().UTC()}
	now := func() time.Time { return env.now }
	cat := store.NewCatalog(db, now)
	mux := http.NewServeMux()
	adm := newAdmin(cat, gate, preheat.New(cat, gate, time.Hour, now), tokenNames{adminToken: "admin"}, clientip.Peer, func() {},
		slog.New(slog.DiscardHandler))
	adm.buckets = buckets
	adm.register(mux)
	(&prizePage{catalog: cat, gate: gate, now: now, fail: adm.fail}).register(adm, mux)
	env.srv = httptest.NewServer(mux)
	t.Cleanup(env.srv.Close)
	return env
}

func (e *adminEnv) do(t *testing.T, method, path, token, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out
}

func activityJSON(start time.Time, mutate func(m map[string]any)) string {
	m := map[string]any{
		"name": "test sale", "window_start": start.Format(time.RFC3339),
		"window_end": start.Add(time.Hour).Format(time.RFC3339), "interval": "30m",
		"session_length": "10m", "per_user_limit": 1,
		"prizes": []map[string]any{{"name": "phone", "stock": 5}, {"name": "case", "stock": 50}},
	}
	if mutate != nil {
		mutate(m)
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func (e *adminEnv) rows(t *testing.T, table string) int64 {
	var n int64
	if err := e.db.Table(table).Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

func TestAdminAuth(t *testing.T) {
	e := newAdminEnv(t)
	body := activityJSON(e.now.Add(time.Hour), nil)
	for _, tc := range []struct {
		name, token string
		want        int
	}{
		{"missing", "", http.StatusUnauthorized},
		{"wrong", "admin-token-for-tests-0123456788", http.StatusUnauthorized},
		{"prefix of the right one", adminToken[:10], http.StatusUnauthorized},
		{"right", adminToken, http.StatusCreated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.rows(t, "activities")
			code, _ := e.do(t, "POST", "/admin/v1/activities", tc.token, body)
			if code != tc.want {
				t.Fatalf("status %d, want %d", code, tc.want)
			}
			if code == http.StatusUnauthorized && e.rows(t, "activities") != before {
				t.Fatal("an unauthorized call changed the database")
			}
		})
	}
	if code, _ := e.do(t, "GET", "/admin/v1/activities", "", ""); code != http.StatusUnauthorized {
		t.Fatalf("GET without a token: %d", code)
	}
}

func TestAdminValidationWritesNothing(t *testing.T) {
	e := newAdminEnv(t)
	start := e.now.Add(time.Hour)
	cases := []struct {
		name   string
		body   string
		status int
		field  string
	}{
		{"unknown field", activityJSON(start, func(m map[string]any) { m["stok"] = 1 }), 400, ""},
		{"interval 0", activityJSON(start, func(m map[string]any) { m["interval"] = "0s" }), 400, "interval"},
		{"interval not a duration", activityJSON(start, func(m map[string]any) { m["interval"] = "often" }), 400, "interval"},
		{"session longer than interval", activityJSON(start, func(m map[string]any) { m["session_length"] = "1h" }), 400, "session_length"},
		{"end before start", activityJSON(start, func(m map[string]any) { m["window_end"] = start.Add(-time.Hour).Format(time.RFC3339) }), 400, "window_end"},
		{"bad time", activityJSON(start, func(m map[string]any) { m["window_start"] = "tomorrow" }), 400, "window_start"},
		{"negative stock", activityJSON(start, func(m map[string]any) { m["prizes"] = []map[string]any{{"name": "x", "stock": -1}} }), 400, "prizes[0].stock"},
		{"missing stock", activityJSON(start, func(m map[string]any) { m["prizes"] = []map[string]any{{"name": "x"}} }), 400, "prizes[0].stock"},
		{"limit 0", activityJSON(start, func(m map[string]any) { m["per_user_limit"] = 0 }), 400, "per_user_limit"},
		{"no prizes", activityJSON(start, func(m map[string]any) { m["prizes"] = []any{} }), 400, "prizes"},
		{"absurd window", activityJSON(start, func(m map[string]any) { m["window_end"] = start.Add(5 * 365 * 24 * time.Hour).Format(time.RFC3339) }), 400, "window_end"},
		{"wrong type", `{"name": 5}`, 400, ""},
		{"trailing data", activityJSON(start, nil) + "{}", 400, ""},
		{"not JSON", "name=x", 400, ""},
		{"huge body", `{"name":"` + strings.Repeat("x", 70<<10) + `"}`, 413, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out := e.do(t, "POST", "/admin/v1/activities", adminToken, tc.body)
			if code != tc.status {
				t.Fatalf("status %d (%v), want %d", code, out, tc.status)
			}
			if tc.field != "" {
				fields, _ := out["fields"].([]any)
				found := false
				for _, f := range fields {
					if fm, _ := f.(map[string]any); fm["field"] == tc.field {
						found = true
					}
				}
				if !found {
					t.Fatalf("error %v does not name field %q", out, tc.field)
				}
			}
		})
	}
	for _, table := range []string{"activities", "prizes", "sessions", "session_stocks", "audit_log"} {
		if n := e.rows(t, table); n != 0 {
			t.Errorf("%s has %d rows after only rejected requests", table, n)
		}
	}
}

func TestAdminLifecycle(t *testing.T) {
	e := newAdminEnv(t)
	code, act := e.do(t, "POST", "/admin/v1/activities", adminToken, activityJSON(e.now.Add(time.Hour), nil))
	if code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, act)
	}
	sessions := act["sessions"].([]any)
	if len(sessions) != 2 {
		t.Fatalf("%d sessions, want 2", len(sessions))
	}
	s1 := sessions[0].(map[string]any)
	sid := int64(s1["id"].(float64))
	path := "/admin/v1/sessions/" + itoa(sid)

	code, res := e.do(t, "POST", path+"/preheat", adminToken, "")
	if code != http.StatusOK || len(res["loaded"].([]any)) != 2 {
		t.Fatalf("preheat: %d %v", code, res)
	}
	code, res = e.do(t, "POST", path+"/preheat", adminToken, "")
	if code != http.StatusOK || len(res["kept"].([]any)) != 2 {
		t.Fatalf("second preheat: %d %v", code, res)
	}
	_, sess := e.do(t, "GET", path, adminToken, "")
	first := sess["stock"].([]any)[0].(map[string]any)
	db, rds := first["db"].(map[string]any), first["redis"].(map[string]any)
	if db["left"].(float64) != 5 || rds["left"].(float64) != 5 || rds["loaded"] != true {
		t.Fatalf("stock side by side: db %v redis %v", db, rds)
	}

	prize := int64(first["prize_id"].(float64))
	code, res = e.do(t, "PUT", path+"/prizes/"+itoa(prize)+"/stock", adminToken, `{"total": 8, "reason": "more units arrived"}`)
	if code != http.StatusOK || res["after"].(float64) != 8 || res["redis_updated"] != true {
		t.Fatalf("adjust: %d %v", code, res)
	}
	code, res = e.do(t, "PUT", path+"/prizes/"+itoa(prize)+"/stock", adminToken, `{"total": 8}`)
	if code != http.StatusBadRequest {
		t.Fatalf("adjust without reason: %d %v", code, res)
	}
	_, audit := e.do(t, "GET", path+"/audit", adminToken, "")
	if n := len(audit["entries"].([]any)); n != 1 {
		t.Fatalf("%d audit entries, want 1", n)
	}

	code, res = e.do(t, "POST", path+"/close", adminToken, "")
	if code != http.StatusOK || res["closed_at"] == nil {
		t.Fatalf("close: %d %v", code, res)
	}
	e.now = e.now.Add(2 * time.Hour) // every session has started
	if code, _ := e.do(t, "POST", "/admin/v1/sessions/"+itoa(sid+1)+"/preheat", adminToken, ""); code != http.StatusConflict {
		t.Fatalf("preheat of a started session: %d, want 409", code)
	}
	if code, _ := e.do(t, "PUT", path+"/prizes/"+itoa(prize)+"/stock", adminToken, `{"total": 1, "reason": "late"}`); code != http.StatusConflict {
		t.Fatalf("adjust of a started session: %d, want 409", code)
	}
	if code, _ := e.do(t, "GET", "/admin/v1/sessions/999999", adminToken, ""); code != http.StatusNotFound {
		t.Fatalf("unknown session: %d", code)
	}
	if code, _ := e.do(t, "GET", "/admin/v1/sessions/abc", adminToken, ""); code != http.StatusBadRequest {
		t.Fatalf("bad id: %d", code)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
