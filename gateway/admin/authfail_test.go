package admin

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seckill-pipeline/seckill/gateway/clientip"
	"github.com/seckill-pipeline/seckill/gateway/lockout"
)

// Failed admin bearer authentications are throttled per client (after 3 in the window, 429
// with Retry-After, the token not even checked, the right one included), logged without the
// token (remote_addr, route, reason) and counted by reason. Another client is not affected,
// and the window's end lets the client in again.
func TestAdminBearerFailuresAreThrottled(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	var logs bytes.Buffer
	a := newAdmin(nil, nil, nil, tokenNames{adminToken: "admin"}, clientip.Peer, func() {},
		slog.New(slog.NewJSONHandler(&logs, nil)))
	a.authFailures = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "admin_auth_failures_total"}, []string{"reason"})
	a.lockout = lockout.New(3, time.Minute, 100, func() time.Time { return now })
	mux := http.NewServeMux()
	a.handle(mux, "GET /admin/v1/activities", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })

	call := func(from, token string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/admin/v1/activities", nil)
		r.RemoteAddr = from + ":5555"
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w
	}
	const guess = "guessed-token-0123456789"
	for i := range 3 {
		if w := call("192.0.2.7", guess); w.Code != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d, want 401", i+1, w.Code)
		}
	}
	for _, tok := range []string{guess, adminToken} {
		w := call("192.0.2.7", tok)
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "60" {
			t.Fatalf("after 3 failures: %d Retry-After %q, want 429 with 60", w.Code, w.Header().Get("Retry-After"))
		}
	}
	if w := call("192.0.2.8", adminToken); w.Code != http.StatusOK {
		t.Fatalf("another client: %d, want 200", w.Code)
	}
	if w := call("192.0.2.8", ""); w.Code != http.StatusUnauthorized {
		t.Fatalf("no credential: %d, want 401", w.Code)
	}
	now = now.Add(time.Minute)
	if w := call("192.0.2.7", adminToken); w.Code != http.StatusOK {
		t.Fatalf("after the window: %d, want 200", w.Code)
	}

	for reason, want := range map[string]float64{"invalid_token": 3, "throttled": 2, "missing": 1, "forbidden": 0} {
		if got := testutil.ToFloat64(a.authFailures.WithLabelValues(reason)); got != want {
			t.Errorf("failures{reason=%q} = %v, want %v", reason, got, want)
		}
	}
	if strings.Contains(logs.String(), guess) {
		t.Fatalf("the log holds the presented token:\n%s", logs.String())
	}
	refused := 0
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] != "admin authentication refused" {
			continue
		}
		refused++
		if rec["route"] != "GET /admin/v1/activities" || rec["remote_addr"] == nil || rec["reason"] == nil {
			t.Errorf("log line without remote_addr, route or reason: %v", rec)
		}
	}
	if refused != 4 { // 3 wrong tokens, 1 missing; the throttled are counted, logged once
		t.Errorf("%d refusals logged, want 4:\n%s", refused, logs.String())
	}
	if !strings.Contains(logs.String(), `"msg":"admin authentication throttled"`) {
		t.Errorf("the lockout is not logged:\n%s", logs.String())
	}
}
