package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/internal/contract"
	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// The admin document and the gateway agree at the edges a property-based fuzzer driven by
// the document found them disagreeing (issue 21, item 4), each request checked both ways:
// the status the gateway answers and whether the document accepts the request. Empty
// strings the gateway needs non-empty are refused by the document too; integral numbers
// written with a fraction or an exponent (2168.0, 1e1) are integers to the gateway as to
// JSON Schema; a filter given empty is refused by both; lengths are counted in characters,
// as JSON Schema's maxLength counts them; "blank" means the same four characters to both.
func TestAdminContractEdges(t *testing.T) {
	adminAPI := contract.LoadAPI(t, contract.AdminAPI)
	dsn, db := stacktest.Migrated(t)
	stacktest.CleanupKeys(t, stacktest.Redis(t), db)
	_, adm := startGateway(t, map[string]string{"SECKILL_MYSQL_DSN": dsn})
	admin := contractListener{adminAPI, "http://" + adm, &http.Client{Timeout: 10 * time.Second}}
	const tok = testAdminToken
	start := time.Now().UTC().Add(time.Hour).Truncate(time.Second)
	activity := func(mutate func(m map[string]any)) string {
		m := map[string]any{"name": "edge sale", "window_start": start.Format(time.RFC3339),
			"window_end": start.Add(time.Hour).Format(time.RFC3339), "interval": "30m", "session_length": "10m",
			"prizes": []map[string]any{{"name": "phone", "stock": 5}}}
		if mutate != nil {
			mutate(m)
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	_, act := admin.do(t, contractCall{method: "POST", path: "/admin/v1/activities", token: tok, body: activity(nil), status: 201})
	sid := jsonID(act["sessions"].([]any)[0].(map[string]any)["id"])
	pid := jsonID(act["prizes"].([]any)[0].(map[string]any)["id"])
	stockPath := "/admin/v1/sessions/" + sid + "/prizes/" + pid + "/stock"

	ctx := stacktest.Context(t, 10*time.Second)
	cases := store.NewExceptions(db)
	var reports []store.CaseReport
	for i := range 4 {
		reports = append(reports, store.CaseReport{Kind: seckill.CaseDriftUncorrected, Key: fmt.Sprintf("edge:%d", i),
			Detail: "redis left 3, expected 1"})
	}
	if err := cases.Record(ctx, time.Now(), reports...); err != nil {
		t.Fatal(err)
	}
	listed, err := cases.List(ctx, store.CaseFilter{Limit: 10})
	if err != nil || len(listed) != 4 {
		t.Fatalf("recorded cases: %v %v", listed, err)
	}
	caseAction := func(i int, action string) string {
		return fmt.Sprintf("/admin/v1/exceptions/%d/%s", listed[i].ID, action)
	}

	for _, tc := range []struct {
		name string
		call contractCall
	}{
		{"window_start empty", contractCall{method: "POST", path: "/admin/v1/activities", token: tok,
			body: activity(func(m map[string]any) { m["window_start"] = "" }), status: 400, code: "invalid_input", docRefuses: true}},
		{"window_end not RFC 3339", contractCall{method: "POST", path: "/admin/v1/activities", token: tok,
			body: activity(func(m map[string]any) { m["window_end"] = start.Format(time.DateTime) }), status: 400,
			code: "invalid_input", docRefuses: true}},
		{"lower-case t and z", contractCall{method: "POST", path: "/admin/v1/activities", token: tok,
			body: activity(func(m map[string]any) {
				m["window_start"] = strings.ToLower(start.Format(time.RFC3339))
				m["window_end"] = strings.ToLower(start.Add(time.Hour).Format(time.RFC3339))
			}), status: 201}},
		{"offset +24:00 (Go's parser takes it; RFC 3339 does not)", contractCall{method: "POST", path: "/admin/v1/activities", token: tok,
			body: activity(func(m map[string]any) {
				m["window_start"] = start.Format("2006-01-02T15:04:05") + "+24:00"
			}), status: 400, code: "invalid_input", docRefuses: true}},
		{"offset -05:60", contractCall{method: "POST", path: "/admin/v1/activities", token: tok,
			body: activity(func(m map[string]any) {
				m["window_end"] = start.Add(time.Hour).Format("2006-01-02T15:04:05") + "-05:60"
			}), status: 400, code: "invalid_input", docRefuses: true}},
		{"integral numbers with a fraction or an exponent", contractCall{method: "POST", path: "/admin/v1/activities", token: tok,
			body: activity(func(m map[string]any) {
				m["per_user_limit"] = json.RawMessage("2.0")
				m["prizes"] = []map[string]any{{"name": "phone", "stock": json.RawMessage("1e1")}}
			}), status: 201}},
		{"stock with a fraction", contractCall{method: "POST", path: "/admin/v1/activities", token: tok,
			body: activity(func(m map[string]any) {
				m["prizes"] = []map[string]any{{"name": "phone", "stock": json.RawMessage("2.5")}}
			}), status: 400, code: "invalid_input", docRefuses: true}},
		{"total 2168.0", contractCall{method: "PUT", path: stockPath, token: tok,
			body: `{"total": 2168.0, "reason": "a float that is an integer"}`, status: 200}},
		{"total 6.5", contractCall{method: "PUT", path: stockPath, token: tok,
			body: `{"total": 6.5, "reason": "half a unit"}`, status: 400, code: "invalid_input", docRefuses: true}},
		{"reason blank", contractCall{method: "PUT", path: stockPath, token: tok,
			body: `{"total": 6, "reason": " \t\r\n"}`, status: 400, code: "invalid_input", docRefuses: true}},
		{"reason of 512 two-byte characters", contractCall{method: "PUT", path: stockPath, token: tok,
			body: `{"total": 7, "reason": "` + strings.Repeat("é", 512) + `"}`, status: 200}},
		{"reason of 513 characters", contractCall{method: "PUT", path: stockPath, token: tok,
			body: `{"total": 7, "reason": "` + strings.Repeat("x", 513) + `"}`, status: 400, code: "invalid_input", docRefuses: true}},
		{"kind empty", contractCall{method: "GET", path: "/admin/v1/exceptions?kind=", token: tok,
			status: 400, code: "invalid_input", docRefuses: true}},
		{"state empty", contractCall{method: "GET", path: "/admin/v1/exceptions?state=", token: tok,
			status: 400, code: "invalid_input", docRefuses: true}},
		{"session_id empty", contractCall{method: "GET", path: "/admin/v1/exceptions?session_id=", token: tok,
			status: 400, code: "invalid_input", docRefuses: true}},
		{"limit empty", contractCall{method: "GET", path: "/admin/v1/exceptions?state=open&limit=", token: tok,
			status: 400, code: "invalid_input", docRefuses: true}},
		{"reports limit empty", contractCall{method: "GET", path: "/admin/v1/reconciler/reports?limit=", token: tok,
			status: 400, code: "invalid_input", docRefuses: true}},
		{"filters given", contractCall{method: "GET", path: "/admin/v1/exceptions?state=open&kind=drift_uncorrected&limit=2", token: tok,
			status: 200}},
		{"dismiss with an empty note", contractCall{method: "POST", path: caseAction(0, "dismiss"), token: tok,
			body: `{"note": ""}`, status: 400, code: "invalid_input", docRefuses: true}},
		{"resolve without a body", contractCall{method: "POST", path: caseAction(0, "resolve"), token: tok,
			status: 400, code: "invalid_input", docRefuses: true}},
		{"resolve without a note", contractCall{method: "POST", path: caseAction(0, "resolve"), token: tok,
			body: `{}`, status: 400, code: "invalid_input", docRefuses: true}},
		{"resolve with a blank note", contractCall{method: "POST", path: caseAction(0, "resolve"), token: tok,
			body: `{"note": "  \n"}`, status: 400, code: "invalid_input", docRefuses: true}},
		{"replay without a note", contractCall{method: "POST", path: caseAction(0, "replay"), token: tok,
			status: 409, code: "not_replayable"}},
		{"resolve with 1,024 two-byte characters", contractCall{method: "POST", path: caseAction(1, "resolve"), token: tok,
			body: `{"note": "` + strings.Repeat("é", 1024) + `"}`, status: 200}},
		{"dismiss with a no-break space", contractCall{method: "POST", path: caseAction(2, "dismiss"), token: tok,
			body: `{"note": "\u00a0"}`, status: 200}},
		{"resolve with 1,025 characters", contractCall{method: "POST", path: caseAction(3, "resolve"), token: tok,
			body: `{"note": "` + strings.Repeat("x", 1025) + `"}`, status: 400, code: "invalid_input", docRefuses: true}},
		{"an action the document does not have", contractCall{method: "POST", path: caseAction(3, "delete"), token: tok,
			body: `{"note": "x"}`, status: 404, code: "not_found", docRefuses: true}},
	} {
		t.Run(tc.name, func(t *testing.T) { admin.do(t, tc.call) })
	}
}
