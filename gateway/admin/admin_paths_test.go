package admin

import (
	"net/http"
	"testing"
	"time"
)

// Admin path ids are canonical, like the public ones: "07" or "+7" is refused, never read
// as session or prize 7 (one resource, one spelling, in the audit log too).
func TestAdminPathIDsAreCanonical(t *testing.T) {
	e := newAdminEnv(t)
	code, act := e.do(t, "POST", "/admin/v1/activities", adminToken, activityJSON(e.now.Add(time.Hour), nil))
	if code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, act)
	}
	s := act["sessions"].([]any)[0].(map[string]any)
	sid := itoa(int64(s["id"].(float64)))
	pid := itoa(int64(s["stock"].([]any)[0].(map[string]any)["prize_id"].(float64)))
	audits := e.rows(t, "audit_log")
	body := `{"total": 9, "reason": "typo in the path"}`
	for _, tc := range []struct{ name, method, path, body string }{
		{"prize with a leading zero", "PUT", "/admin/v1/sessions/" + sid + "/prizes/0" + pid + "/stock", body},
		{"prize with a plus sign", "PUT", "/admin/v1/sessions/" + sid + "/prizes/+" + pid + "/stock", body},
		{"session with a leading zero", "PUT", "/admin/v1/sessions/0" + sid + "/prizes/" + pid + "/stock", body},
		{"session get with a leading zero", "GET", "/admin/v1/sessions/0" + sid, ""},
		{"activity with a plus sign", "GET", "/admin/v1/activities/+" + itoa(int64(act["id"].(float64))), ""},
		{"zero", "GET", "/admin/v1/sessions/0", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := e.do(t, tc.method, tc.path, adminToken, tc.body)
			if code != http.StatusBadRequest || out["error"] != "invalid_input" {
				t.Fatalf("%s %s: %d %v, want 400 invalid_input", tc.method, tc.path, code, out)
			}
		})
	}
	if n := e.rows(t, "audit_log"); n != audits {
		t.Fatalf("%d audit entries after refused adjustments, want %d", n, audits)
	}
	_, sess := e.do(t, "GET", "/admin/v1/sessions/"+sid, adminToken, "")
	if total := sess["stock"].([]any)[0].(map[string]any)["db"].(map[string]any)["total"]; total != float64(5) {
		t.Fatalf("stock total %v after refused adjustments, want 5", total)
	}
}
