package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/internal/contract"
	"github.com/seckill-pipeline/seckill/internal/harness"
	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/exception"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// wbClient calls the admin listener with the bearer token (or a console cookie).
type wbClient struct {
	t      *testing.T
	base   string
	header http.Header
}

func (c wbClient) do(method, path, body string) (int, map[string]any) {
	c.t.Helper()
	req, _ := http.NewRequest(method, c.base+path, strings.NewReader(body))
	for k, v := range c.header {
		req.Header[k] = v
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Timeout: 15 * time.Second}).Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		c.t.Fatalf("%s %s: %d %q is not a JSON object", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode, out
}

// The workbench on the real gateway: list and filter, evidence with the order, replay that
// produces once and refuses a case that no longer applies, resolve with a required note and
// an audited actor, the live overview and the reconciler's reports, over the bearer token
// and over a console session.
func TestWorkbenchAPI(t *testing.T) {
	op := stacktest.NewOpenPrize(t, 5, 5, 1)
	brokers, topics := stacktest.Kafka(t)
	ctx := stacktest.Context(t, 2*time.Minute)
	// carol acts with her own credential; the name she claims is ignored.
	_, adm := startGateway(t, map[string]string{"SECKILL_MYSQL_DSN": op.DSN,
		"SECKILL_TOPIC_PREFIX":      strings.TrimSuffix(topics.Grab.Name, ".seckill.grab"),
		"SECKILL_ADMIN_TOKENS_FILE": tokensFile(t, "", map[string]string{"carol": carolToken}, time.Now())})
	api := wbClient{t: t, base: "http://" + adm, header: http.Header{"Authorization": {"Bearer " + carolToken}, "X-Admin-Actor": {"reconciler"}}}

	grab := func(key, user string) (seckill.Grab, kafka.Message) {
		g := seckill.Grab{RequestID: seckill.RequestID(op.SessionID, op.PrizeID, key), UserID: user,
			SessionID: op.SessionID, PrizeID: op.PrizeID, AdmittedAt: time.Now().UTC()}
		m, err := event.EncodeGrab(g)
		if err != nil {
			t.Fatal(err)
		}
		m.Topic, m.Partition, m.Offset = topics.Grab.Name, 0, 3
		return g, m
	}
	lost, lostMsg := grab("key-lost0001", "dora")
	done, doneMsg := grab("key-done0001", "eve")
	// The lost grab was admitted: Redis holds its reservation, which its replay checks.
	if v, err := op.Gate.Reserve(ctx, lost); err != nil || v.Code != stock.Admitted {
		t.Fatalf("admit the lost grab: %v %v", v.Code, err)
	}
	if _, err := store.NewOrders(op.DB).Persist(ctx, op.SessionID, op.PrizeID, []seckill.Grab{done}, time.Now()); err != nil {
		t.Fatal(err)
	}
	cases := store.NewExceptions(op.DB)
	if err := cases.Record(ctx, time.Now(),
		exception.DeadLetterReport(event.Poison{Msg: lostMsg, Cause: fmt.Errorf("no stock row")}),
		exception.DeadLetterReport(event.Poison{Msg: doneMsg, Cause: fmt.Errorf("no stock row")}),
		store.CaseReport{Kind: seckill.CaseDriftUncorrected, Key: "drift", SessionID: op.SessionID, PrizeID: op.PrizeID, Detail: "drifted"},
	); err != nil {
		t.Fatal(err)
	}
	ids := map[string]int64{}
	all, _ := cases.List(ctx, store.CaseFilter{Limit: 10})
	for _, c := range all {
		ids[c.RequestID+c.Kind] = c.ID
	}
	lostID, doneID, driftID := ids[lost.RequestID+seckill.CaseDeadLetter], ids[done.RequestID+seckill.CaseDeadLetter], ids[seckill.CaseDriftUncorrected]

	// List and filter; bad filters are 400s.
	if code, body := api.do("GET", "/admin/v1/exceptions?state=open", ""); code != 200 || len(body["cases"].([]any)) != 3 {
		t.Fatalf("list: %d %v", code, body)
	}
	if code, body := api.do("GET", "/admin/v1/exceptions?kind=drift_uncorrected&session_id="+itoa(op.SessionID), ""); code != 200 || len(body["cases"].([]any)) != 1 {
		t.Fatalf("filtered: %d %v", code, body)
	}
	for _, q := range []string{"state=closed", "session_id=07", "limit=0"} {
		if code, body := api.do("GET", "/admin/v1/exceptions?"+q, ""); code != 400 || body["error"] != "invalid_input" {
			t.Fatalf("?%s: %d %v", q, code, body)
		}
	}
	// Evidence and the order of the request id.
	code, body := api.do("GET", "/admin/v1/exceptions/"+itoa(doneID), "")
	if code != 200 || body["order"] == nil || body["evidence"].(map[string]any)["message"] == nil {
		t.Fatalf("show: %d %v", code, body)
	}
	if code, body := api.do("GET", "/admin/v1/exceptions/999999", ""); code != 404 {
		t.Fatalf("missing case: %d %v", code, body)
	}

	// Replay: refused when the order exists or the kind carries no event, produced once otherwise.
	if code, body := api.do("POST", "/admin/v1/exceptions/"+itoa(doneID)+"/replay", ""); code != 409 || body["error"] != "not_replayable" ||
		!strings.Contains(body["message"].(string), "already exists") {
		t.Fatalf("replay of a settled grab: %d %v", code, body)
	}
	if code, body := api.do("POST", "/admin/v1/exceptions/"+itoa(driftID)+"/replay", ""); code != 409 || body["error"] != "not_replayable" {
		t.Fatalf("replay of a drift case: %d %v", code, body)
	}
	for range 2 {
		if code, body := api.do("POST", "/admin/v1/exceptions/"+itoa(lostID)+"/replay", `{"note":"stock row restored"}`); code != 200 || body["state"] != "replayed" {
			t.Fatalf("replay: %d %v", code, body)
		}
	}
	msgs, err := harness.ReadTopic(ctx, brokers, topics.Grab)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 || string(msgs[0].Value) != string(lostMsg.Value) || header(msgs[0], exception.HeaderReplayedBy) != "case:"+itoa(lostID) {
		t.Fatalf("grab topic after two replay clicks: %d messages %v", len(msgs), msgs)
	}
	// The replayed event keeps its schema header and is a grab event by the contract.
	if err := contract.LoadEvents(t).Check("grab", msgs[0]); err != nil {
		t.Fatalf("replayed grab breaks asyncapi.yaml: %v", err)
	}

	// Resolve needs a note; the actor is audited; a resolved case cannot be dismissed.
	if code, body := api.do("POST", "/admin/v1/exceptions/"+itoa(driftID)+"/resolve", `{"note":"  "}`); code != 400 {
		t.Fatalf("resolve without a note: %d %v", code, body)
	}
	if code, body := api.do("POST", "/admin/v1/exceptions/"+itoa(driftID)+"/resolve", `{"note":"AOF restored"}`); code != 200 ||
		body["state"] != "resolved" || body["state_changed_by"] != "carol" {
		t.Fatalf("resolve: %d %v", code, body)
	}
	if code, body := api.do("POST", "/admin/v1/exceptions/"+itoa(driftID)+"/dismiss", `{"note":"x"}`); code != 409 || body["error"] != "case_closed" {
		t.Fatalf("dismiss a resolved case: %d %v", code, body)
	}
	if code, _ := api.do("POST", "/admin/v1/exceptions/"+itoa(driftID)+"/delete", `{"note":"x"}`); code != 404 {
		t.Fatalf("unknown action: %d", code)
	}
	var audited int64
	if err := op.DB.Raw("SELECT COUNT(*) FROM exception_actions WHERE case_id = ? AND actor = 'carol' AND action = 'resolve' AND note = 'AOF restored'", driftID).Scan(&audited).Error; err != nil || audited != 1 {
		t.Fatalf("audit rows %d %v", audited, err)
	}

	// The live overview: this session with MySQL's and Redis's numbers, the open cases.
	code, body = api.do("GET", "/admin/v1/overview", "")
	if code != 200 || body["consumer_lag"] == nil || body["compensation_backlog"] == nil {
		t.Fatalf("overview: %d %v", code, body)
	}
	if open := body["open_exceptions"].(map[string]any); open[seckill.CaseDeadLetter] != 1.0 {
		t.Fatalf("open exceptions %v", open)
	}
	var prize map[string]any
	for _, s := range body["sessions"].([]any) {
		if s := s.(map[string]any); s["session_id"] == float64(op.SessionID) && s["state"] == "open" {
			prize = s["prizes"].([]any)[0].(map[string]any)
		}
	}
	if prize == nil || prize["mysql_left"] != 4.0 || prize["sold"] != 1.0 || prize["redis"].(map[string]any)["left"] != 4.0 || prize["lag"] == nil {
		t.Fatalf("overview prize %v", prize)
	}

	// The reconciler's reports.
	if err := store.NewRunReports(op.DB).Save(ctx, time.Now(), 7, 3, true, []byte(`{"lease":"held","fence":3,"jobs":[]}`)); err != nil {
		t.Fatal(err)
	}
	code, body = api.do("GET", "/admin/v1/reconciler/reports?limit=5", "")
	if reps, _ := body["reports"].([]any); code != 200 || len(reps) != 1 || reps[0].(map[string]any)["failed"] != true {
		t.Fatalf("reports: %d %v", code, body)
	}

	// A console session reaches the same API with its header, and its credential is the
	// audited actor (the legacy SECKILL_ADMIN_TOKEN is "admin", whatever name is typed).
	resp, err := http.Post("http://"+adm+"/console/login", "application/json", strings.NewReader(`{"token":"`+testAdminToken+`","name":"frank"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 204 || len(resp.Cookies()) != 1 {
		t.Fatalf("console login: %d %v", resp.StatusCode, resp.Cookies())
	}
	cookie := resp.Cookies()[0].String()
	noHeader := wbClient{t: t, base: api.base, header: http.Header{"Cookie": {cookie}}}
	if code, _ := noHeader.do("GET", "/admin/v1/exceptions", ""); code != 401 {
		t.Fatalf("a console cookie without its header: %d, want 401", code)
	}
	con := wbClient{t: t, base: api.base, header: http.Header{"Cookie": {cookie}, "X-Seckill-Console": {"1"}}}
	if code, body := con.do("POST", "/admin/v1/exceptions/"+itoa(doneID)+"/dismiss", `{"note":"settled meanwhile"}`); code != 200 || body["state_changed_by"] != "admin" {
		t.Fatalf("dismiss from the console: %d %v", code, body)
	}
}

func header(m kafka.Message, key string) string {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
