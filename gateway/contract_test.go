package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/gateway/admin"
	"github.com/seckill-pipeline/seckill/gateway/console"
	"github.com/seckill-pipeline/seckill/internal/contract"
	"github.com/seckill-pipeline/seckill/internal/harness"
	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/auth"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
)

const contractJWTSecret = "contract-jwt-secret-0123456789-0123456789"

// contractListener sends requests to one of the gateway's listeners and checks every exchange
// against that listener's OpenAPI document.
type contractListener struct {
	api    *contract.API
	base   string // http://host:port
	client *http.Client
}

// contractCall is one request and what the gateway must answer.
type contractCall struct {
	method, path string
	token        string            // sent as "Authorization: Bearer <token>"
	cookie       string            // sent as the console session cookie (checkRequestWithCookies)
	header       map[string]string // more request headers
	body         string            // sent with Content-Type: application/json when not empty
	status       int               // the status the gateway must answer (0: any)
	code         string            // the error code it must carry ("" for a success)
	// docRefuses: the document refuses the request as well, so a client that follows it
	// would not send it (no credential, a malformed key, an unknown field...). Otherwise the
	// document must accept the request: it describes what the gateway takes.
	docRefuses bool
}

// do sends c and checks the exchange: the status and error code the test expects, the
// answer against the document (status documented, headers, content type, body), and the
// request against the document.
func (l contractListener) do(t testing.TB, c contractCall) (contract.Exchange, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(c.method, l.base+c.path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.cookie != "" {
		req.AddCookie(&http.Cookie{Name: console.CookieName, Value: c.cookie})
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	var body []byte
	if c.body != "" {
		body = []byte(c.body)
		req.Header.Set("Content-Type", "application/json")
	}
	x, err := contract.Do(l.client, req, body)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	_ = json.Unmarshal(x.Answer, &out)
	if c.status != 0 && (x.Status != c.status || (c.code != "" && out["error"] != c.code)) {
		t.Fatalf("%s %s: %d %.300s, want %d %s", c.method, c.path, x.Status, x.Answer, c.status, c.code)
	}
	if err := l.api.CheckAnswer(x); err != nil {
		t.Fatalf("answer breaks the contract: %v", err)
	}
	checkRequest := l.api.CheckRequest
	if c.cookie != "" {
		checkRequest = func(x contract.Exchange) error { return checkRequestWithCookies(l.api, x) }
	}
	switch err := checkRequest(x); {
	case c.docRefuses && err == nil:
		t.Fatalf("%s %s: the document accepts a request the test says it refuses", c.method, c.path)
	case !c.docRefuses && err != nil:
		t.Fatalf("%s %s: the document refuses a request the gateway takes: %v", c.method, c.path, err)
	}
	return x, out
}

// until repeats c (each exchange checked) until the gateway answers status, at most n times.
func (l contractListener) until(t testing.TB, c contractCall, status, n int) contract.Exchange {
	t.Helper()
	for range n {
		x, _ := l.do(t, c)
		if x.Status == status {
			return x
		}
	}
	t.Fatalf("%s %s: no %d in %d tries", c.method, c.path, status, n)
	return contract.Exchange{}
}

func jsonID(v any) string { return fmt.Sprint(int64(v.(float64))) }

// Every route of both listeners, through the real gateway on the real stack, answers what
// docs/api/openapi-public.yaml and openapi-admin.yaml say: a representative request per
// route and per error class, each answer checked for its status, headers and body, and
// every request checked against the document. A documented answer that no request
// produced fails the test (unless exempt below, with the reason), so a status the code no
// longer answers cannot stay documented. The gateway's grab events are checked against
// asyncapi.yaml.
func TestGatewayAnswersMatchTheContract(t *testing.T) {
	publicAPI := contract.LoadAPI(t, contract.PublicAPI)
	adminAPI := contract.LoadAPI(t, contract.AdminAPI)
	events := contract.LoadEvents(t)
	client := &http.Client{Timeout: 10 * time.Second}
	var finished atomic.Int32 // subtests that ran to the end (not skipped)
	var real realAnswers

	t.Run("routes", func(t *testing.T) {
		t.Run("gateway", func(t *testing.T) {
			t.Parallel()
			dsn, db := stacktest.Migrated(t)
			rdb := stacktest.Redis(t)
			stacktest.CleanupKeys(t, rdb, db)
			brokers, topics := stacktest.Kafka(t)
			pub, adm := startGateway(t, map[string]string{"SECKILL_MYSQL_DSN": dsn, "SECKILL_JWT_SECRET": contractJWTSecret,
				"SECKILL_TOPIC_PREFIX": strings.TrimSuffix(topics.Grab.Name, ".seckill.grab")})
			public := contractListener{publicAPI, "http://" + pub, client}
			admin := contractListener{adminAPI, "http://" + adm, client}
			signer := auth.NewSigner([]byte(contractJWTSecret), "seckill", "seckill-gateway")
			token := func(user string) string {
				tok, err := signer.Token(user, time.Now(), time.Hour)
				if err != nil {
					t.Fatal(err)
				}
				return tok
			}
			ctx := stacktest.Context(t, 60*time.Second)
			gate, err := stock.NewGate(ctx, rdb)
			if err != nil {
				t.Fatal(err)
			}
			real.closed = checkAdmin(t, admin, gate)
			var rids []string
			rids, real.admitted, real.soldOut, real.limited = checkPublic(t, public, admin, gate, token)
			openCase := checkWorkbench(t, admin, db, gate, topics, &real.workbench)
			checkConsole(t, admin, openCase, &real.workbench)
			checkMisdirected(t, admin)
			// On an activity of its own, created last: checkPublic and checkWorkbench read the first one listed.
			var winners []kafka.Message
			winners, real.drawn = checkDraw(t, public, admin, db, rdb, gate, token)
			for _, m := range winners {
				if err := events.Check("grab", m); err != nil {
					t.Errorf("the draw's grab event of a winner breaks the contract: %v", err)
				}
			}

			msgs, err := harness.ReadTopic(ctx, brokers, topics.Grab)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for _, m := range msgs {
				if err := events.Check("grab", m); err != nil {
					t.Errorf("the gateway's grab event breaks the contract: %v", err)
				}
				var p struct {
					RequestID string `json:"request_id"`
				}
				_ = json.Unmarshal(m.Value, &p)
				seen[p.RequestID] = true
			}
			for _, rid := range rids {
				if !seen[rid] {
					t.Errorf("admitted grab %s has no event on %s (%d events)", rid, topics.Grab.Name, len(msgs))
				}
			}
			finished.Add(1)
		})
		t.Run("kafka hangs", func(t *testing.T) {
			t.Parallel()
			hang := blackhole(t)
			dsn, _ := stacktest.Migrated(t)
			pub, adm := startGateway(t, map[string]string{"SECKILL_MYSQL_DSN": dsn, "SECKILL_KAFKA_BROKERS": hang})
			done := make(chan struct{})
			go func() {
				defer close(done)
				contractListener{adminAPI, "http://" + adm, client}.do(t, contractCall{method: "GET", path: "/readyz", status: 503})
			}()
			contractListener{publicAPI, "http://" + pub, client}.do(t, contractCall{method: "GET", path: "/readyz", status: 503, code: "not_ready"})
			<-done
			// The live view without Kafka: its figures are null and named in errors.
			x, live := contractListener{adminAPI, "http://" + adm, client}.do(t, contractCall{method: "GET", path: "/admin/v1/overview",
				token: testAdminToken, status: 200})
			if live["consumer_lag"] != nil || live["compensation_backlog"] != nil || len(live["errors"].([]any)) != 2 {
				t.Errorf("overview without Kafka: %v", live)
			}
			real.overviewDown = x
			finished.Add(1)
		})
		t.Run("per-address limit", func(t *testing.T) {
			t.Parallel()
			// The draw's public record is read without a token: only the per-address bucket
			// (SECKILL_RATE_PER_IP, 2000/s by default) limits it, which this gateway sets low.
			dsn, _ := stacktest.Migrated(t)
			pub, _ := startGateway(t, map[string]string{"SECKILL_MYSQL_DSN": dsn, "SECKILL_RATE_PER_IP": "1", "SECKILL_BURST_PER_IP": "2"})
			contractListener{publicAPI, "http://" + pub, client}.until(t, contractCall{method: "GET",
				path: "/api/v1/sessions/1/prizes/1/draw"}, http.StatusTooManyRequests, 5)
			finished.Add(1)
		})
		t.Run("locked out", func(t *testing.T) {
			t.Parallel()
			dsn, _ := stacktest.Migrated(t)
			_, adm := startGateway(t, map[string]string{"SECKILL_MYSQL_DSN": dsn})
			checkLockout(t, contractListener{adminAPI, "http://" + adm, client})
			finished.Add(1)
		})
	})
	if t.Failed() || finished.Load() != 4 { // failed, or skipped without a stack
		return
	}
	real.refusedByWrongDocuments(t)

	internal := "500 internal needs MySQL or Redis to fail in the middle of an admin request"
	exempt := map[string]string{}
	for _, op := range []string{"POST /admin/v1/activities", "GET /admin/v1/activities", "GET /admin/v1/activities/{id}",
		"GET /admin/v1/sessions/{id}", "GET /admin/v1/sessions/{id}/prizes/{prize}", "POST /admin/v1/sessions/{id}/preheat", "POST /admin/v1/sessions/{id}/close",
		"PUT /admin/v1/sessions/{id}/prizes/{prize}/stock", "GET /admin/v1/sessions/{id}/audit",
		"GET /admin/v1/sessions/{id}/prizes/{prize}/draw", "PUT /admin/v1/sessions/{id}/prizes/{prize}/draw/beacon",
		"GET /admin/v1/exceptions", "GET /admin/v1/exceptions/{id}", "GET /admin/v1/overview", "GET /admin/v1/reconciler/reports"} {
		exempt[op+" 500"] = internal
	}
	for _, action := range []string{"replay", "resolve", "dismiss"} {
		exempt["POST /admin/v1/exceptions/{id}/"+action+" 500"] = "500 internal needs MySQL or Redis to fail in the middle of an " +
			"action, or Kafka to refuse a replayed event after the checks passed"
	}
	if unseen := adminAPI.Unseen(exempt); len(unseen) > 0 {
		t.Errorf("documented admin answers no request produced (answer them, or drop them from %s):\n%s",
			contract.AdminAPI, strings.Join(unseen, "\n"))
	}
	// The in-flight cap's 503 needs every slot taken, which gateway/grab's
	// TestGrabAnswersMatchTheContract does on the grab path alone (the draw's routes answer
	// their 503 unavailable only when MySQL fails in the middle of a request).
	overloaded := "overloaded: gateway/grab's TestGrabAnswersMatchTheContract"
	if unseen := publicAPI.Unseen(map[string]string{"GET /api/v1/grabs/{request_id} 503": overloaded,
		"GET /api/v1/sessions/{session}/prizes/{prize}/draw 503":       overloaded,
		"GET /api/v1/sessions/{session}/prizes/{prize}/draw/proof 503": overloaded}); len(unseen) > 0 {
		t.Errorf("documented public answers no request produced (answer them, or drop them from %s):\n%s",
			contract.PublicAPI, strings.Join(unseen, "\n"))
	}
}

// checkAdmin drives the admin contractListener through every route and error class, and leaves an
// activity whose first session is open, second preheated and third closed.
func checkAdmin(t *testing.T, admin contractListener, gate *stock.Gate) (closedSession contract.Exchange) {
	t.Helper()
	const tok = testAdminToken
	start := time.Now().UTC().Add(-time.Minute).Truncate(time.Second)
	body := func(mutate func(m map[string]any)) string {
		m := map[string]any{"name": "contract sale", "window_start": start.Format(time.RFC3339),
			"window_end": start.Add(3 * time.Hour).Format(time.RFC3339), "interval": "1h", "session_length": "50m",
			"per_user_limit": 1, "payment_timeout": "15m", "regrab_after_cancel": true,
			"prizes": []map[string]any{{"name": "phone", "stock": 1}, {"name": "case", "stock": 5}, {"name": "hot", "stock": 4, "buckets": 2}}}
		if mutate != nil {
			mutate(m)
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	_, act := admin.do(t, contractCall{method: "POST", path: "/admin/v1/activities", token: tok, body: body(nil),
		header: map[string]string{"X-Admin-Actor": "contract-test"}, status: 201})
	sessions := act["sessions"].([]any)
	if len(sessions) != 3 {
		t.Fatalf("%d sessions, want 3", len(sessions))
	}
	if act["payment_timeout"] != "15m0s" || act["regrab_after_cancel"] != true {
		t.Fatalf("payment settings answered %v, %v", act["payment_timeout"], act["regrab_after_cancel"])
	}
	s1, s2, s3 := jsonID(sessions[0].(map[string]any)["id"]), jsonID(sessions[1].(map[string]any)["id"]), jsonID(sessions[2].(map[string]any)["id"])
	prizes := act["prizes"].([]any)
	p1, p2 := jsonID(prizes[0].(map[string]any)["id"]), jsonID(prizes[1].(map[string]any)["id"])
	hot := jsonID(prizes[2].(map[string]any)["id"]) // two stock buckets: its adjustments are planned (202)
	aid := jsonID(act["id"])
	const none = "999999999"

	for _, c := range []contractCall{
		{method: "POST", path: "/admin/v1/activities", body: body(nil), status: 401, code: "unauthorized", docRefuses: true},
		{method: "POST", path: "/admin/v1/activities", token: "wrong-token-0123456789", body: body(nil), status: 401, code: "unauthorized"},
		{method: "POST", path: "/admin/v1/activities", token: tok, body: body(func(m map[string]any) { m["interval"] = "0s" }),
			status: 400, code: "invalid_input"},
		{method: "POST", path: "/admin/v1/activities", token: tok, body: body(func(m map[string]any) { m["payment_timeout"] = "10ms" }),
			status: 400, code: "invalid_input"},
		{method: "POST", path: "/admin/v1/activities", token: tok, body: body(func(m map[string]any) { m["stok"] = 1 }),
			status: 400, code: "invalid_input", docRefuses: true},
		{method: "POST", path: "/admin/v1/activities", token: tok,
			body: body(func(m map[string]any) { m["name"] = strings.Repeat("x", 70<<10) }), status: 413, code: "body_too_large", docRefuses: true},
		{method: "GET", path: "/admin/v1/activities", token: tok, status: 200},
		{method: "GET", path: "/admin/v1/activities", status: 401, code: "unauthorized", docRefuses: true},
		{method: "GET", path: "/admin/v1/activities/" + aid, token: tok, status: 200},
		{method: "GET", path: "/admin/v1/activities/abc", token: tok, status: 400, code: "invalid_input", docRefuses: true},
		{method: "GET", path: "/admin/v1/activities/" + none, token: tok, status: 404, code: "not_found"},
		{method: "GET", path: "/admin/v1/activities/" + aid, status: 401, code: "unauthorized", docRefuses: true},
		{method: "GET", path: "/admin/v1/sessions/" + s1, token: tok, status: 200},
		{method: "GET", path: "/admin/v1/sessions/abc", token: tok, status: 400, code: "invalid_input", docRefuses: true},
		{method: "GET", path: "/admin/v1/sessions/" + none, token: tok, status: 404, code: "not_found"},
		{method: "GET", path: "/admin/v1/sessions/" + s1, status: 401, code: "unauthorized", docRefuses: true},
		{method: "GET", path: "/admin/v1/sessions/" + s1 + "/prizes/" + p1, token: tok, status: 200},
		{method: "GET", path: "/admin/v1/sessions/" + s1 + "/prizes/abc", token: tok, status: 400, code: "invalid_input", docRefuses: true},
		{method: "GET", path: "/admin/v1/sessions/" + s1 + "/prizes/" + none, token: tok, status: 404, code: "not_found"},
		{method: "GET", path: "/admin/v1/sessions/" + s1 + "/prizes/" + p1, status: 401, code: "unauthorized", docRefuses: true},
		{method: "POST", path: "/admin/v1/sessions/" + s2 + "/preheat", token: tok, status: 200},
		{method: "POST", path: "/admin/v1/sessions/" + s1 + "/preheat", token: tok, status: 409, code: "session_started"},
		{method: "POST", path: "/admin/v1/sessions/" + none + "/preheat", token: tok, status: 404, code: "not_found"},
		{method: "POST", path: "/admin/v1/sessions/abc/preheat", token: tok, status: 400, code: "invalid_input", docRefuses: true},
		{method: "POST", path: "/admin/v1/sessions/" + s2 + "/preheat", status: 401, code: "unauthorized", docRefuses: true},
		{method: "PUT", path: "/admin/v1/sessions/" + s3 + "/prizes/" + p1 + "/stock", token: tok,
			body: `{"total": 8, "reason": "more units arrived"}`, status: 200},
		{method: "PUT", path: "/admin/v1/sessions/" + s2 + "/prizes/" + p1 + "/stock", token: tok,
			body: `{"total": 6, "reason": "one more"}`, status: 200},
		{method: "PUT", path: "/admin/v1/sessions/" + s1 + "/prizes/" + p1 + "/stock", token: tok,
			body: `{"total": 6, "reason": "too late"}`, status: 409, code: "session_started"},
		{method: "PUT", path: "/admin/v1/sessions/" + s1 + "/prizes/" + hot + "/stock", token: tok,
			body: `{"total": 6, "reason": "two more during the sale"}`, status: 202},
		{method: "PUT", path: "/admin/v1/sessions/" + s1 + "/prizes/" + hot + "/stock", token: tok,
			body: `{"total": 8, "reason": "the first is not applied yet"}`, status: 409, code: "conflict"},
		{method: "PUT", path: "/admin/v1/sessions/" + s2 + "/prizes/" + p1 + "/stock", token: tok,
			body: `{"total": 6}`, status: 400, code: "invalid_input", docRefuses: true},
		{method: "PUT", path: "/admin/v1/sessions/" + s2 + "/prizes/" + none + "/stock", token: tok,
			body: `{"total": 6, "reason": "no such prize"}`, status: 404, code: "not_found"},
		{method: "PUT", path: "/admin/v1/sessions/" + s2 + "/prizes/" + p1 + "/stock", token: tok,
			body: `{"total": 6, "reason": "` + strings.Repeat("x", 70<<10) + `"}`, status: 413, code: "body_too_large", docRefuses: true},
		{method: "PUT", path: "/admin/v1/sessions/" + s2 + "/prizes/" + p1 + "/stock",
			body: `{"total": 6, "reason": "who am I"}`, status: 401, code: "unauthorized", docRefuses: true},
		{method: "GET", path: "/admin/v1/sessions/" + s2 + "/audit", token: tok, status: 200},
		{method: "GET", path: "/admin/v1/sessions/abc/audit", token: tok, status: 400, code: "invalid_input", docRefuses: true},
		{method: "GET", path: "/admin/v1/sessions/" + s2 + "/audit", status: 401, code: "unauthorized", docRefuses: true},
		{method: "POST", path: "/admin/v1/sessions/" + s3 + "/close", token: tok, status: 200},
		{method: "PUT", path: "/admin/v1/sessions/" + s3 + "/prizes/" + hot + "/stock", token: tok,
			body: `{"total": 6, "reason": "after the close"}`, status: 409, code: "session_ended"},
		{method: "POST", path: "/admin/v1/sessions/" + none + "/close", token: tok, status: 404, code: "not_found"},
		{method: "POST", path: "/admin/v1/sessions/abc/close", token: tok, status: 400, code: "invalid_input", docRefuses: true},
		{method: "POST", path: "/admin/v1/sessions/" + s3 + "/close", status: 401, code: "unauthorized", docRefuses: true},
		{method: "GET", path: "/metrics", token: tok, status: 200},
		{method: "GET", path: "/metrics", status: 401, code: "unauthorized", docRefuses: true},
		{method: "GET", path: "/debug/pprof/", token: tok, status: 200},
		{method: "GET", path: "/debug/pprof/", status: 401, code: "unauthorized", docRefuses: true},
		{method: "GET", path: "/debug/pprof/goroutine?debug=1", token: tok, status: 200},
		{method: "GET", path: "/debug/pprof/nope", token: tok, status: 404, docRefuses: true},
		{method: "GET", path: "/debug/pprof/heap", status: 401, code: "unauthorized", docRefuses: true},
		{method: "GET", path: "/healthz", status: 200},
		{method: "GET", path: "/readyz", status: 200},
		{method: "GET", path: "/nope", token: tok, status: 404, code: "not_found", docRefuses: true},
		{method: "DELETE", path: "/admin/v1/activities", token: tok, status: 405, code: "method_not_allowed", docRefuses: true},
	} {
		admin.do(t, c)
	}

	// Redis refuses an adjustment once a grab was admitted for the prize (a gateway whose
	// clock runs ahead): 409 conflict.
	sid, pid := int64(sessions[1].(map[string]any)["id"].(float64)), int64(prizes[1].(map[string]any)["id"].(float64))
	g := seckill.Grab{RequestID: seckill.RequestID(sid, pid, "early-key-0001"), UserID: "early", SessionID: sid, PrizeID: pid,
		AdmittedAt: time.Now()}
	if v, err := gate.Reserve(stacktest.Context(t, 10*time.Second), g); err != nil || v.Code != stock.Admitted {
		t.Fatalf("reserve: %v %v", v, err)
	}
	admin.do(t, contractCall{method: "PUT", path: "/admin/v1/sessions/" + s2 + "/prizes/" + p2 + "/stock", token: tok,
		body: `{"total": 9, "reason": "after an admission"}`, status: 409, code: "conflict"})

	x, closed := admin.do(t, contractCall{method: "GET", path: "/admin/v1/sessions/" + s3, token: tok, status: 200})
	_, audit := admin.do(t, contractCall{method: "GET", path: "/admin/v1/sessions/" + s2 + "/audit", token: tok, status: 200})
	if closed["closed_at"] == nil || len(audit["entries"].([]any)) == 0 {
		t.Fatalf("closed session %v, audit %v", closed, audit)
	}
	return x
}

// checkPublic drives the public listener through every route and error class on the
// activity checkAdmin left. It returns the request ids of the grabs it admitted, and three
// of the real answers: an admission, a sold-out refusal and a rate-limited one.
func checkPublic(t *testing.T, public, admin contractListener, gate *stock.Gate, token func(string) string) (
	rids []string, admitted, soldOut, limited contract.Exchange) {
	t.Helper()
	ctx := stacktest.Context(t, 30*time.Second)
	_, list := admin.do(t, contractCall{method: "GET", path: "/admin/v1/activities", token: testAdminToken, status: 200})
	_, act := admin.do(t, contractCall{method: "GET", path: "/admin/v1/activities/" + jsonID(list["activities"].([]any)[0].(map[string]any)["id"]),
		token: testAdminToken, status: 200})
	s1, s2 := int64(act["sessions"].([]any)[0].(map[string]any)["id"].(float64)), int64(act["sessions"].([]any)[1].(map[string]any)["id"].(float64))
	p1, p2 := int64(act["prizes"].([]any)[0].(map[string]any)["id"].(float64)), int64(act["prizes"].([]any)[1].(map[string]any)["id"].(float64))
	grab := func(s, p int64) string { return fmt.Sprintf("/api/v1/sessions/%d/prizes/%d/grab", s, p) }
	key := func(k string) map[string]string { return map[string]string{"Idempotency-Key": k} }
	// The first session has started, so preheat refuses it: load its first prize's stock the
	// way the reconciler's rebuild would, straight into the gate.
	load := func(p int64, stock int) {
		t.Helper()
		st := seckill.Stock{SessionID: s1, PrizeID: p, Total: stock, Left: stock, PerUserLimit: 1}
		if _, err := gate.Load(ctx, []seckill.Stock{st}, time.Now().Add(2*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	load(p1, 1)

	admitted, first := public.do(t, contractCall{method: "POST", path: grab(s1, p1), token: token("alice"), header: key("alice-key-0001"), status: 202})
	rid := first["request_id"].(string)
	soldOut, _ = public.do(t, contractCall{method: "POST", path: grab(s1, p1), token: token("bob"), status: 409, code: "sold_out"})
	for _, c := range []contractCall{
		{method: "POST", path: grab(s1, p1), token: token("alice"), header: key("alice-key-0001"), status: 202},
		// Another user's same key is that user's own grab: the prize's one unit is alice's.
		{method: "POST", path: grab(s1, p1), token: token("mallory"), header: key("alice-key-0001"), status: 409, code: "sold_out"},
		{method: "POST", path: grab(s1, p1), token: token("alice"), header: key("alice-key-0002"), status: 409, code: "limit_reached"},
		{method: "POST", path: grab(s1, p2), token: token("carol"), header: key("carol-key-0001"), status: 503, code: "not_loaded"},
		{method: "POST", path: grab(s2, p1), token: token("carol"), body: "{}", status: 409, code: "not_open"},
		{method: "POST", path: grab(s1, 999999999), token: token("carol"), status: 404, code: "not_found"},
		{method: "POST", path: grab(s1, p2), status: 401, code: "unauthorized", docRefuses: true},
		{method: "POST", path: grab(s1, p2), token: "forged.token.value", status: 401, code: "unauthorized"},
		// A keyless grab of a prize known sold out, or of a session not open, is answered
		// before its token is read.
		{method: "POST", path: grab(s1, p1), status: 409, code: "sold_out", docRefuses: true},
		{method: "POST", path: grab(s2, p1), status: 409, code: "not_open", docRefuses: true},
		{method: "POST", path: grab(s1, p1), header: key("carol-key-0009"), status: 401, code: "unauthorized", docRefuses: true},
		{method: "POST", path: grab(s1, p1), token: token("carol"), header: key("short"), status: 400, code: "invalid_input", docRefuses: true},
		{method: "POST", path: grab(s1, p1), token: token("carol"), body: `{"quantity": 5}`, status: 400, code: "invalid_input", docRefuses: true},
		{method: "POST", path: grab(s1, p1), token: token("carol"), body: `{"a": "` + strings.Repeat("x", 4096) + `"}`,
			status: 413, code: "body_too_large", docRefuses: true},
		{method: "POST", path: "/api/v1/sessions/x/prizes/1/grab", token: token("carol"), status: 400, code: "invalid_input", docRefuses: true},
		{method: "GET", path: "/api/v1/grabs/" + rid, token: token("alice"), status: 200},
		{method: "GET", path: "/api/v1/grabs/" + rid, token: token("bob"), status: 404, code: "not_found"},
		{method: "GET", path: "/api/v1/grabs/nonsense", token: token("alice"), status: 404, code: "not_found", docRefuses: true},
		{method: "GET", path: "/api/v1/grabs/" + rid, status: 401, code: "unauthorized", docRefuses: true},
		{method: "GET", path: "/healthz", status: 200},
		{method: "GET", path: "/readyz", status: 200},
		{method: "GET", path: "/nope", status: 404, code: "not_found", docRefuses: true},
		{method: "DELETE", path: "/api/v1/grabs/" + rid, token: token("alice"), status: 405, code: "method_not_allowed", docRefuses: true},
	} {
		public.do(t, c)
	}
	// Per-user and per-IP token buckets (5/s, burst 10 per user; 20/s, burst 40 on /readyz).
	// (Keyed: a keyless grab of a session not open is answered before any limit.)
	limited = public.until(t, contractCall{method: "POST", path: grab(s2, p1), token: token("dave"), header: key("dave-key-0001")}, http.StatusTooManyRequests, 30)
	public.until(t, contractCall{method: "GET", path: "/api/v1/grabs/" + rid, token: token("frank")}, http.StatusTooManyRequests, 30)
	public.until(t, contractCall{method: "GET", path: "/readyz"}, http.StatusTooManyRequests, 100)

	// The outcomes the consumer records in the gate: a succeeded order and a rejection.
	load(p2, 5)
	_, second := public.do(t, contractCall{method: "POST", path: grab(s1, p2), token: token("erin"), header: key("erin-key-0001"), status: 202})
	rid2 := second["request_id"].(string)
	if _, err := gate.Settle(ctx, []stock.SettleBatch{
		{SessionID: s1, PrizeID: p1, Items: []stock.Settlement{{RequestID: rid, UserID: "alice", OrderID: 42}}},
		{SessionID: s1, PrizeID: p2, Items: []stock.Settlement{{RequestID: rid2, UserID: "erin", Reason: string(seckill.ReasonSoldOut)}}},
	}); err != nil {
		t.Fatal(err)
	}
	_, won := public.do(t, contractCall{method: "GET", path: "/api/v1/grabs/" + rid, token: token("alice"), status: 200})
	_, lost := public.do(t, contractCall{method: "GET", path: "/api/v1/grabs/" + rid2, token: token("erin"), status: 200})
	if won["status"] != "succeeded" || lost["status"] != "rejected" {
		t.Fatalf("settled grabs answer %v and %v", won, lost)
	}
	// ... and a cancellation: alice's order is not paid in time, its unit goes back.
	if _, err := gate.Return(ctx, s1, p1, []stock.UnitReturn{{RequestID: rid, UserID: "alice", OrderID: 42,
		Reason: string(seckill.ReasonPaymentTimeout), Resale: true}}); err != nil {
		t.Fatal(err)
	}
	_, cancelled := public.do(t, contractCall{method: "GET", path: "/api/v1/grabs/" + rid, token: token("alice"), status: 200})
	if cancelled["status"] != "cancelled" || cancelled["reason"] != "payment_timeout" || cancelled["order_id"] != float64(42) {
		t.Fatalf("cancelled grab answers %v", cancelled)
	}
	return []string{rid, rid2}, admitted, soldOut, limited
}

// realAnswers are real exchanges kept to show that the checks are not vacuous.
type realAnswers struct {
	admitted, soldOut, limited, closed contract.Exchange
	overviewDown                       contract.Exchange // the live view while Kafka hangs
	drawn                              contract.Exchange // a drawn draw's public record
	workbench                          workbenchAnswers
}

// refusedByWrongDocuments checks real answers against deliberately wrong documents: each
// must be refused, so a renamed field, a status the code stopped answering, a header it
// stopped sending or an error code it renamed would fail the test.
func (r realAnswers) refusedByWrongDocuments(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		change    func(doc map[string]any)
		x         contract.Exchange
	}{
		{"GrabStatus.request_id renamed", contract.PublicAPI, func(doc map[string]any) {
			s := contract.At(doc, "components", "schemas", "GrabStatus")
			props := s["properties"].(map[string]any)
			props["requestId"] = props["request_id"]
			delete(props, "request_id")
			s["required"] = []any{"requestId", "status"}
		}, r.admitted},
		{"grab answers no 409", contract.PublicAPI, func(doc map[string]any) {
			delete(contract.At(doc, "paths", "/api/v1/sessions/{session}/prizes/{prize}/grab", "post", "responses"), "409")
		}, r.soldOut},
		{"sold_out is not a 409 code", contract.PublicAPI, func(doc map[string]any) {
			contract.At(doc, "paths", "/api/v1/sessions/{session}/prizes/{prize}/grab", "post", "responses", "409",
				"content", "application/json", "schema", "properties", "error")["enum"] = []any{"not_open", "limit_reached"}
		}, r.soldOut},
		{"429 promises another header", contract.PublicAPI, func(doc map[string]any) {
			h := contract.At(doc, "components", "responses", "RateLimited", "headers")
			h["X-RateLimit-Reset"] = h["Retry-After"]
		}, r.limited},
		{"Session has no closed_at", contract.AdminAPI, func(doc map[string]any) {
			delete(contract.At(doc, "components", "schemas", "Session", "properties"), "closed_at")
		}, r.closed},
		{"the case's order in Go's field names", contract.AdminAPI, func(doc map[string]any) {
			o := contract.At(doc, "components", "schemas", "CaseOrder")
			props := o["properties"].(map[string]any)
			props["RequestID"] = props["request_id"]
			delete(props, "request_id")
			o["required"] = []any{"id", "RequestID"}
		}, r.workbench.caseWithOrder},
		{"PrizeLive has no admitted", contract.AdminAPI, func(doc map[string]any) {
			s := contract.At(doc, "components", "schemas", "PrizeLive")
			delete(s["properties"].(map[string]any), "admitted")
			s["required"] = []any{"prize_id"}
		}, r.workbench.overview},
		{"consumer_lag is never null", contract.AdminAPI, func(doc map[string]any) {
			contract.At(doc, "components", "schemas", "Overview", "properties", "consumer_lag")["type"] = "integer"
		}, r.overviewDown},
		{"DrawRecord has no merkle_root", contract.PublicAPI, func(doc map[string]any) {
			delete(contract.At(doc, "components", "schemas", "DrawRecord", "properties"), "merkle_root")
		}, r.drawn},
		{"the console cookie has another name", contract.AdminAPI, func(doc map[string]any) {
			contract.At(doc, "paths", "/console/login", "post", "responses", "204", "headers", "Set-Cookie", "schema")["pattern"] = "^seckill_session="
		}, r.workbench.login},
	} {
		t.Run("wrong document: "+tc.name, func(t *testing.T) {
			api, err := contract.NewAPI(contract.Mutated(t, tc.doc, tc.change))
			if err != nil {
				t.Fatal(err)
			}
			err = api.CheckAnswer(tc.x)
			if err == nil {
				t.Fatalf("the wrong document accepts the real answer %d %.200s", tc.x.Status, tc.x.Answer)
			}
			t.Logf("refused: %.300s", err)
		})
	}
}

// checkLockout: after SECKILL_ADMIN_AUTH_FAILURES (10) wrong bearer tokens from one client,
// every bearer route answers that client 429 rate_limited with Retry-After, the admin's own
// token included, as the document says of each. Every route of the table is asked, so a
// route the document forgot (or documents without the 429) fails here.
func checkLockout(t *testing.T, l contractListener) {
	for i := range 10 {
		l.do(t, contractCall{method: "GET", path: "/admin/v1/activities", token: fmt.Sprintf("wrong-token-%02d-0123456789", i),
			status: 401, code: "unauthorized"})
	}
	var calls []string // "METHOD /path"
	for _, r := range admin.Routes() {
		call := strings.NewReplacer("{id}", "1", "{prize}", "1", "{profile}", "heap").Replace(r.Pattern)
		if strings.Contains(call, "{action}") { // the exception case's actions, each a documented path
			for _, a := range []string{"replay", "resolve", "dismiss"} {
				calls = append(calls, strings.Replace(call, "{action}", a, 1))
			}
			continue
		}
		calls = append(calls, call)
	}
	for _, call := range calls {
		method, path, _ := strings.Cut(call, " ")
		req, err := http.NewRequest(method, l.base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+testAdminToken)
		// The request is not checked against the document: a locked-out client's request
		// is answered before anything of it is read, whatever it is.
		x, err := contract.Do(l.client, req, nil)
		if err != nil {
			t.Fatal(err)
		}
		if x.Status != http.StatusTooManyRequests || !strings.Contains(string(x.Answer), `"rate_limited"`) || x.Header.Get("Retry-After") == "" {
			t.Errorf("%s, locked out: %d %s (Retry-After %q), want 429 rate_limited", call, x.Status, x.Answer, x.Header.Get("Retry-After"))
			continue
		}
		if err := l.api.CheckAnswer(x); err != nil {
			t.Errorf("%s, locked out: the answer breaks the contract: %v", call, err)
		}
	}
}
