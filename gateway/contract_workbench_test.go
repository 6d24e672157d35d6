package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/segmentio/kafka-go"
	"gorm.io/gorm"

	"github.com/seckill-pipeline/seckill/gateway/console"
	"github.com/seckill-pipeline/seckill/internal/contract"
	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/exception"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// workbenchAnswers are real answers of the workbench routes, kept for refusedByWrongDocuments.
type workbenchAnswers struct {
	caseWithOrder, overview, login contract.Exchange
}

// checkWorkbench drives the exceptions workbench, the live overview and the reconciler's
// reports through every documented answer, on cases recorded straight into the gateway's
// MySQL (as the consumer and the reconciler record them) for the activity checkAdmin left.
// It returns the id of a case still open, which checkConsole dismisses.
func checkWorkbench(t *testing.T, admin contractListener, db *gorm.DB, gate *stock.Gate, topics event.Topics, real *workbenchAnswers) (openCase string) {
	t.Helper()
	const tok, none = testAdminToken, "999999999"
	ctx := stacktest.Context(t, 60*time.Second)
	_, list := admin.do(t, contractCall{method: "GET", path: "/admin/v1/activities", token: tok, status: 200})
	_, act := admin.do(t, contractCall{method: "GET", path: "/admin/v1/activities/" + jsonID(list["activities"].([]any)[0].(map[string]any)["id"]),
		token: tok, status: 200})
	sessions, prizes := act["sessions"].([]any), act["prizes"].([]any)
	s1, s3 := int64(sessions[0].(map[string]any)["id"].(float64)), int64(sessions[2].(map[string]any)["id"].(float64))
	p1, p2 := int64(prizes[0].(map[string]any)["id"].(float64)), int64(prizes[1].(map[string]any)["id"].(float64))

	// The cases: a dead-lettered grab whose order exists meanwhile, one without an order (read
	// from the compensation topic, so its replay does not mix with the grab events this test
	// checks), an undecodable message (no session, no request id), a stale reservation Redis
	// no longer holds, and drift the reconciler left uncorrected.
	grab := func(key, user, topic string) (seckill.Grab, event.Poison) {
		g := seckill.Grab{RequestID: seckill.RequestID(s1, p2, key), UserID: user, SessionID: s1, PrizeID: p2,
			AdmittedAt: time.Now().UTC().Truncate(time.Millisecond)}
		m, err := event.EncodeGrab(g)
		if err != nil {
			t.Fatal(err)
		}
		m.Topic, m.Partition, m.Offset = topic, 0, 11
		return g, event.Poison{Msg: m, Cause: errors.New("no stock row")}
	}
	done, donePoison := grab("wb-done-0001", "ivan", topics.Grab.Name)
	lost, lostPoison := grab("wb-lost-0001", "judy", topics.Compensation.Name)
	if _, err := store.NewOrders(db).Persist(ctx, s1, p2, []seckill.Grab{done}, time.Now()); err != nil {
		t.Fatal(err)
	}
	// The lost grab was admitted: Redis holds its reservation, which its replay checks.
	if v, err := gate.Reserve(ctx, lost); err != nil || v.Code != stock.Admitted {
		t.Fatalf("admit the lost grab: %v %v", v.Code, err)
	}
	staleRID := seckill.RequestID(s1, p2, "wb-stale-0001")
	garbled := event.Poison{Msg: kafka.Message{Topic: topics.Grab.Name, Partition: 1, Offset: 7, Key: []byte("?"),
		Value: []byte{0xff, 0x00, 0x01}}, Cause: errors.New("decode grab: invalid character")}
	cases := store.NewExceptions(db)
	if err := cases.Record(ctx, time.Now(),
		exception.DeadLetterReport(donePoison),
		exception.DeadLetterReport(lostPoison),
		exception.DeadLetterReport(garbled),
		exception.StaleReport(s1, p2, stock.Reservation{RequestID: staleRID, UserID: "mike", AdmittedAt: time.Now().Add(-5 * time.Minute)}, 5*time.Minute),
		store.CaseReport{Kind: seckill.CaseDriftUncorrected, Key: fmt.Sprintf("%d:%d", s1, p1), SessionID: s1, PrizeID: p1,
			Detail: "redis left 3, expected 1, uncorrected for 3 runs", Evidence: map[string]any{"mysql_left": 1, "mysql_total": 1,
				"pending_reservations": 0, "cancelled_not_in_redis": 0, "redis_left": 3, "expected_redis_left": 1, "runs": 3}},
	); err != nil {
		t.Fatal(err)
	}
	all, err := cases.List(ctx, store.CaseFilter{Limit: 10})
	if err != nil || len(all) != 5 {
		t.Fatalf("recorded cases: %v %v", all, err)
	}
	id := map[string]string{}
	for _, c := range all {
		id[c.Kind+":"+c.RequestID] = fmt.Sprint(c.ID)
	}
	doneID, lostID := id[seckill.CaseDeadLetter+":"+done.RequestID], id[seckill.CaseDeadLetter+":"+lost.RequestID]
	garbledID, staleID := id[seckill.CaseDeadLetter+":"], id[seckill.CaseStaleReservation+":"+staleRID]
	driftID := id[seckill.CaseDriftUncorrected+":"]
	wb := "/admin/v1/exceptions/"
	hdr := map[string]string{"X-Admin-Actor": "contract-test"} // ignored: the actor is the credential's name

	// List, filter, show.
	_, open := admin.do(t, contractCall{method: "GET", path: "/admin/v1/exceptions", token: tok, status: 200})
	_, drifts := admin.do(t, contractCall{method: "GET", token: tok, status: 200,
		path: fmt.Sprintf("/admin/v1/exceptions?state=open&kind=drift_uncorrected&session_id=%d&limit=5", s1)})
	if len(open["cases"].([]any)) != 5 || len(drifts["cases"].([]any)) != 1 {
		t.Fatalf("listed %d cases, %d drift cases", len(open["cases"].([]any)), len(drifts["cases"].([]any)))
	}
	x, shown := admin.do(t, contractCall{method: "GET", path: wb + doneID, token: tok, status: 200})
	if order, _ := shown["order"].(map[string]any); order == nil || shown["evidence"].(map[string]any)["message"] == nil {
		t.Fatalf("the case of a grab with an order shows %v", shown)
	}
	real.caseWithOrder = x
	if _, g := admin.do(t, contractCall{method: "GET", path: wb + garbledID, token: tok, status: 200}); g["session_id"] != nil || g["order"] != nil {
		t.Fatalf("an undecodable dead letter shows %v", g)
	}
	long := `{"note": "` + strings.Repeat("x", 70<<10) + `"}`
	for _, c := range []contractCall{
		{method: "GET", path: "/admin/v1/exceptions?state=closed", token: tok, status: 400, code: "invalid_input", docRefuses: true},
		{method: "GET", path: "/admin/v1/exceptions?limit=0", token: tok, status: 400, code: "invalid_input", docRefuses: true},
		{method: "GET", path: "/admin/v1/exceptions?session_id=abc", token: tok, status: 400, code: "invalid_input", docRefuses: true},
		{method: "GET", path: "/admin/v1/exceptions?kind=" + strings.Repeat("k", 65), token: tok, status: 400, code: "invalid_input", docRefuses: true},
		{method: "GET", path: "/admin/v1/exceptions", status: 401, code: "unauthorized", docRefuses: true},
		{method: "GET", path: wb + staleID, token: tok, status: 200},
		{method: "GET", path: wb + "abc", token: tok, status: 400, code: "invalid_input", docRefuses: true},
		{method: "GET", path: wb + none, token: tok, status: 404, code: "not_found"},
		{method: "GET", path: wb + doneID, status: 401, code: "unauthorized", docRefuses: true},

		// Replays refused with their reason: the order exists, the kind has no event, Redis
		// no longer holds the reservation, the message is no grab.
		{method: "POST", path: wb + doneID + "/replay", token: tok, header: hdr, status: 409, code: "not_replayable"},
		{method: "POST", path: wb + driftID + "/replay", token: tok, header: hdr, status: 409, code: "not_replayable"},
		{method: "POST", path: wb + staleID + "/replay", token: tok, header: hdr, status: 409, code: "not_replayable"},
		{method: "POST", path: wb + garbledID + "/replay", token: tok, header: hdr, body: "{}", status: 409, code: "not_replayable"},
		// A replay that applies, twice: the second changes nothing.
		{method: "POST", path: wb + lostID + "/replay", token: tok, header: hdr, body: `{"note": "stock row restored"}`, status: 200},
		{method: "POST", path: wb + lostID + "/replay", token: tok, header: hdr, status: 200},
		// Resolve and dismiss need a note, replay does not (each action has its operation, so
		// the document says so too).
		{method: "POST", path: wb + driftID + "/resolve", token: tok, header: hdr, status: 400, code: "invalid_input", docRefuses: true},
		{method: "POST", path: wb + driftID + "/resolve", token: tok, header: hdr, body: `{"note": "  "}`, status: 400, code: "invalid_input",
			docRefuses: true},
		{method: "POST", path: wb + driftID + "/dismiss", token: tok, header: hdr, body: `{}`, status: 400, code: "invalid_input", docRefuses: true},
		{method: "POST", path: wb + driftID + "/replay", token: tok, header: hdr, body: `{"note": 5}`, status: 400, code: "invalid_input",
			docRefuses: true},
		{method: "POST", path: wb + driftID + "/replay", token: tok, header: hdr, body: long, status: 413, code: "body_too_large", docRefuses: true},
		{method: "POST", path: wb + driftID + "/dismiss", token: tok, header: hdr, body: long, status: 413, code: "body_too_large", docRefuses: true},
		{method: "POST", path: wb + none + "/replay", token: tok, status: 404, code: "not_found"},
		{method: "POST", path: wb + none + "/dismiss", token: tok, body: `{"note": "x"}`, status: 404, code: "not_found"},
		{method: "POST", path: wb + driftID + "/replay", status: 401, code: "unauthorized", docRefuses: true},
		{method: "POST", path: wb + driftID + "/resolve", body: `{"note": "x"}`, status: 401, code: "unauthorized", docRefuses: true},
		{method: "POST", path: wb + driftID + "/resolve", token: tok, header: hdr, body: `{"notes": "AOF restored"}`,
			status: 400, code: "invalid_input", docRefuses: true},
		{method: "POST", path: wb + driftID + "/resolve", token: tok, header: hdr, body: long, status: 413, code: "body_too_large", docRefuses: true},
		{method: "POST", path: wb + driftID + "/resolve", token: tok, header: hdr, body: `{"note": "AOF restored"}`, status: 200},
		{method: "POST", path: wb + driftID + "/dismiss", token: tok, header: hdr, body: `{"note": "noise"}`, status: 409, code: "case_closed"},
		{method: "POST", path: wb + driftID + "/replay", token: tok, header: hdr, status: 409, code: "case_closed"},
		{method: "POST", path: wb + garbledID + "/dismiss", token: tok, header: hdr, body: `{"note": "not ours"}`, status: 200},
		{method: "POST", path: wb + garbledID + "/resolve", token: tok, header: hdr, body: `{"note": "fixed after all"}`, status: 409,
			code: "case_closed"},
		{method: "POST", path: wb + driftID + "/delete", token: tok, body: `{"note": "x"}`, status: 404, code: "not_found", docRefuses: true},
		{method: "POST", path: wb + none + "/resolve", token: tok, body: `{"note": "x"}`, status: 404, code: "not_found"},
		{method: "POST", path: wb + "abc/resolve", token: tok, body: `{"note": "x"}`, status: 400, code: "invalid_input", docRefuses: true},
		{method: "POST", path: wb + garbledID + "/dismiss", body: `{"note": "x"}`, status: 401, code: "unauthorized", docRefuses: true},
	} {
		admin.do(t, c)
	}
	_, lostCase := admin.do(t, contractCall{method: "GET", path: wb + lostID, token: tok, status: 200})
	_, driftCase := admin.do(t, contractCall{method: "GET", path: wb + driftID, token: tok, status: 200})
	if lostCase["state"] != "replayed" || driftCase["state"] != "resolved" || driftCase["state_changed_by"] != "admin" ||
		len(driftCase["actions"].([]any)) != 2 { // the refused replay and the resolution; a case_closed changes nothing
		t.Fatalf("after the actions: lost %v, drift %v", lostCase, driftCase)
	}

	// The live view: the open session with the order persisted above; the closed one among
	// the others.
	x, live := admin.do(t, contractCall{method: "GET", path: "/admin/v1/overview?others_limit=10", token: tok, status: 200})
	real.overview = x
	states := map[int64]string{}
	sold := -1.0
	for _, s := range live["others"].(map[string]any)["sessions"].([]any) {
		s := s.(map[string]any)
		states[int64(s["session_id"].(float64))] = s["state"].(string)
	}
	for _, s := range live["sessions"].([]any) {
		s := s.(map[string]any)
		states[int64(s["session_id"].(float64))] = s["state"].(string)
		for _, p := range s["prizes"].([]any) {
			if p := p.(map[string]any); int64(s["session_id"].(float64)) == s1 && int64(p["prize_id"].(float64)) == p2 {
				sold = p["sold"].(float64)
			}
		}
	}
	if states[s1] != "open" || states[s3] != "closed" || sold != 1 || live["consumer_lag"] == nil ||
		live["open_exceptions"].(map[string]any)[seckill.CaseDeadLetter] == nil {
		t.Fatalf("overview: states %v, sold %v, %v", states, sold, live)
	}
	admin.do(t, contractCall{method: "GET", path: "/admin/v1/overview", status: 401, code: "unauthorized", docRefuses: true})
	admin.do(t, contractCall{method: "GET", path: "/admin/v1/overview?others_limit=501", token: tok, status: 400, code: "invalid_input",
		docRefuses: true})

	// The reconciler's reports: one as it prints them with --json, one that is no JSON any more.
	runs := store.NewRunReports(db)
	started := time.Now().UTC().Add(-time.Minute)
	report := fmt.Sprintf(`{"started_at":%q,"duration_ms":42,"lease":"held","fence":3,"jobs":[`+
		`{"name":"drift","summary":{"checked":2,"corrected":1},"details":[{"session_id":%d,"prize_id":%d}]},`+
		`{"name":"stale","summary":{},"error":"redis: connection refused"}]}`, started.Format(time.RFC3339Nano), s1, p1)
	if err := runs.Save(ctx, started, 42, 3, true, []byte(report)); err != nil {
		t.Fatal(err)
	}
	if err := runs.Save(ctx, started.Add(10*time.Second), 5, 4, false, []byte(`{"started_at":`)); err != nil {
		t.Fatal(err)
	}
	_, reps := admin.do(t, contractCall{method: "GET", path: "/admin/v1/reconciler/reports", token: tok, status: 200})
	if r := reps["reports"].([]any); len(r) != 2 || r[0].(map[string]any)["unreadable"] == nil || r[1].(map[string]any)["failed"] != true {
		t.Fatalf("reports %v", reps)
	}
	for _, c := range []contractCall{
		{method: "GET", path: "/admin/v1/reconciler/reports?limit=1", token: tok, status: 200},
		{method: "GET", path: "/admin/v1/reconciler/reports?limit=0", token: tok, status: 400, code: "invalid_input", docRefuses: true},
		{method: "GET", path: "/admin/v1/reconciler/reports?limit=x", token: tok, status: 400, code: "invalid_input", docRefuses: true},
		{method: "GET", path: "/admin/v1/reconciler/reports", status: 401, code: "unauthorized", docRefuses: true},
	} {
		admin.do(t, c)
	}
	return doneID
}

// checkConsole drives the console's page, assets and sign-in, and the admin API over a
// console session: with its CSRF guard header it is an audited actor, without it a 401.
func checkConsole(t *testing.T, admin contractListener, openCase string, real *workbenchAnswers) {
	t.Helper()
	noRedirect := admin
	noRedirect.client = &http.Client{Timeout: admin.client.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	x, _ := noRedirect.do(t, contractCall{method: "GET", path: "/console", status: 302})
	if x.Header.Get("Location") != "/console/" {
		t.Fatalf("GET /console redirects to %q", x.Header.Get("Location"))
	}
	for path, want := range map[string]string{"/console/": "<title>seckill console</title>", "/console/app.js": "/admin/v1/",
		"/console/app.css": "{"} {
		x, _ := admin.do(t, contractCall{method: "GET", path: path, status: 200})
		if !strings.Contains(string(x.Answer), want) {
			t.Fatalf("GET %s: %.200q does not hold %q", path, x.Answer, want)
		}
		y, _ := admin.do(t, contractCall{method: "GET", path: path, header: map[string]string{"If-None-Match": x.Header.Get("ETag")}, status: 304})
		if len(y.Answer) != 0 {
			t.Fatalf("GET %s: a 304 with a body", path)
		}
		// kin-openapi lets every 304 (and 301, 307, 308) through unvalidated, documented or
		// not: check that this one is.
		if item := admin.api.Doc.Paths.Find(path); item == nil || item.Get == nil || item.Get.Responses.Status(304) == nil {
			t.Fatalf("GET %s answered 304, which the document does not list", path)
		}
	}

	login := func(body string, status int, code string, docRefuses bool) contract.Exchange {
		x, _ := admin.do(t, contractCall{method: "POST", path: "/console/login", body: body, status: status, code: code, docRefuses: docRefuses})
		return x
	}
	x = login(`{"token": "`+testAdminToken+`", "name": "frank"}`, 204, "", false)
	real.login = x
	var cookie string
	for _, c := range (&http.Response{Header: x.Header}).Cookies() {
		if c.Name == console.CookieName {
			cookie = c.Value
		}
	}
	if cookie == "" {
		t.Fatalf("login set no %s cookie: %v", console.CookieName, x.Header)
	}
	login(`{"token": "wrong-token-0123456789", "name": "frank"}`, 401, "unauthorized", false)
	login(`{"token": "`+testAdminToken+`", "name": "frank smith"}`, 400, "invalid_input", true)
	login(`{"token": "`+testAdminToken+`", "role": "admin"}`, 400, "invalid_input", true)

	guard := map[string]string{console.GuardHeader: "1"}
	// The session is the credential's (SECKILL_ADMIN_TOKEN: "admin"), whatever name was typed.
	_, who := admin.do(t, contractCall{method: "GET", path: "/console/session", cookie: cookie, header: guard, status: 200})
	if who["name"] != "admin" {
		t.Fatalf("console session names %v", who)
	}
	for _, c := range []contractCall{
		{method: "GET", path: "/console/session", cookie: cookie, status: 401, code: "unauthorized", docRefuses: true},
		{method: "GET", path: "/console/session", cookie: "v1.1.Zm9v.forged", header: guard, status: 401, code: "unauthorized"},
		{method: "GET", path: "/console/session", token: testAdminToken, status: 401, code: "unauthorized", docRefuses: true},
		{method: "GET", path: "/admin/v1/exceptions?state=open", cookie: cookie, header: guard, status: 200},
		{method: "GET", path: "/admin/v1/exceptions?state=open", cookie: cookie, status: 401, code: "unauthorized", docRefuses: true},
	} {
		admin.do(t, c)
	}
	_, dismissed := admin.do(t, contractCall{method: "POST", path: "/admin/v1/exceptions/" + openCase + "/dismiss", cookie: cookie, header: guard,
		body: `{"note": "settled meanwhile"}`, status: 200})
	if dismissed["state"] != "dismissed" || dismissed["state_changed_by"] != "admin" {
		t.Fatalf("dismissed from the console: %v", dismissed)
	}
	admin.do(t, contractCall{method: "POST", path: "/console/logout", cookie: cookie, status: 401, code: "unauthorized", docRefuses: true})
	admin.do(t, contractCall{method: "POST", path: "/console/logout", cookie: cookie, header: guard, status: 204})
	// Sign-in attempts are limited per address (SECKILL_CONSOLE_LOGIN_RATE, 10 a minute).
	admin.until(t, contractCall{method: "POST", path: "/console/login", body: `{"token": "wrong-token-0123456789"}`},
		http.StatusTooManyRequests, 20)
}

// checkMisdirected sends every operation of the admin document with a Host the listener
// does not serve (a DNS-rebound page's): each answers 421 before anything else, as the
// document says. The requests are not checked against the document (they carry no
// credential or body), only the answers.
func checkMisdirected(t *testing.T, admin contractListener) {
	t.Helper()
	for path, item := range admin.api.Doc.Paths.Map() {
		concrete := path
		for _, name := range []string{"{id}", "{prize}", "{action}"} {
			concrete = strings.ReplaceAll(concrete, name, "1")
		}
		concrete = strings.ReplaceAll(concrete, "{profile}", "heap")
		for method := range item.Operations() {
			req, err := http.NewRequest(method, admin.base+concrete, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = "rebound.example"
			req.Header.Set("Authorization", "Bearer "+testAdminToken)
			x, err := contract.Do(admin.client, req, nil)
			if err != nil {
				t.Fatal(err)
			}
			if x.Status != http.StatusMisdirectedRequest {
				t.Fatalf("%s %s with Host rebound.example: %d %.200s, want 421", method, concrete, x.Status, x.Answer)
			}
			if err := admin.api.CheckAnswer(x); err != nil {
				t.Fatalf("answer breaks the contract: %v", err)
			}
		}
	}
}

// checkRequestWithCookies validates a request like contract.API.CheckRequest, with one
// difference: every credential the document declares counts as given when it is present,
// the console's cookie and its guard header (apiKey schemes) as well as the bearer token.
// contract.API.CheckRequest knows bearer credentials only.
func checkRequestWithCookies(api *contract.API, x contract.Exchange) error {
	doc := *api.Doc
	doc.Servers = nil // routes match on method and path only
	router, err := gorillamux.NewRouter(&doc)
	if err != nil {
		return err
	}
	req := x.Request.Clone(context.Background())
	req.Body = io.NopCloser(bytes.NewReader(x.Body))
	req.ContentLength = int64(len(x.Body))
	route, params, err := router.FindRoute(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, err)
	}
	return openapi3filter.ValidateRequest(context.Background(), &openapi3filter.RequestValidationInput{Request: req,
		PathParams: params, Route: route, Options: &openapi3filter.Options{MultiError: true, AuthenticationFunc: credentialPresent}})
}

func credentialPresent(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	s, r := in.SecurityScheme, in.RequestValidationInput.Request
	switch {
	case s.Type == "http" && strings.EqualFold(s.Scheme, "bearer"):
		if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && tok != "" {
			return nil
		}
	case s.Type == "apiKey" && s.In == "header":
		if r.Header.Get(s.Name) != "" {
			return nil
		}
	case s.Type == "apiKey" && s.In == "cookie":
		if c, err := r.Cookie(s.Name); err == nil && c.Value != "" {
			return nil
		}
	default:
		return fmt.Errorf("security scheme %s (%s) is not checked here", in.SecuritySchemeName, s.Type)
	}
	return fmt.Errorf("no %s credential", in.SecuritySchemeName)
}
