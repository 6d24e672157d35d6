package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

const (
	aliceToken = "alice-admin-token-0123456789"
	bobToken   = "bob-admin-token-0123456789"
	carolToken = "carol-admin-token-0123456789"
)

// tokensFile writes an admin tokens file ("name sha256:<hex>" lines) and returns its path.
func tokensFile(t *testing.T, path string, creds map[string]string, mod time.Time) string {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "admin-tokens")
	}
	var b strings.Builder
	b.WriteString("# name sha256:<hex of the token>\n")
	for name, tok := range creds {
		sum := sha256.Sum256([]byte(tok))
		fmt.Fprintf(&b, "%s sha256:%s\n", name, hex.EncodeToString(sum[:]))
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mod, mod); err != nil {
		t.Fatal(err)
	}
	return path
}

// adminCall is one request to the admin listener.
type adminCall struct {
	method, path, token, body string
	cookie                    *http.Cookie
	header                    map[string]string
	host                      string
}

func (c adminCall) do(t *testing.T, base string) (*http.Response, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(c.method, base+c.path, strings.NewReader(c.body))
	if err != nil {
		t.Fatal(err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.cookie != nil {
		req.AddCookie(c.cookie)
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	if c.host != "" {
		req.Host = c.host
	}
	client := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return resp, out
}

func consoleCookie(t *testing.T, resp *http.Response) *http.Cookie {
	t.Helper()
	for _, c := range resp.Cookies() {
		if c.Name == "seckill_console" && c.Value != "" {
			return c
		}
	}
	t.Fatalf("no console cookie: %d %v", resp.StatusCode, resp.Header)
	return nil
}

// Each operator signs in with a credential of their own, and the audit logs name that
// credential, whatever the caller claims (X-Admin-Actor, the console's name field), with the
// address the action came from. Removing a credential from the file (re-read when it
// changes) ends its bearer use and its console sessions; a credential may not carry the
// automation's names.
func TestOperatorsActUnderTheirOwnNames(t *testing.T) {
	dsn, db := stacktest.Migrated(t)
	t0 := time.Now().Add(-time.Hour)
	file := tokensFile(t, "", map[string]string{"alice": aliceToken, "bob": bobToken}, t0)
	_, adm := startGateway(t, map[string]string{"SECKILL_MYSQL_DSN": dsn, "SECKILL_ADMIN_TOKENS_FILE": file})
	base := "http://" + adm
	ctx := stacktest.Context(t, 30*time.Second)
	ex := store.NewExceptions(db)
	if err := ex.Record(ctx, time.Now().UTC(),
		store.CaseReport{Kind: seckill.CaseDriftUncorrected, Key: "7:1", SessionID: 7, PrizeID: 1, Detail: "drift"},
		store.CaseReport{Kind: seckill.CaseDriftUncorrected, Key: "7:2", SessionID: 7, PrizeID: 2, Detail: "drift"},
		store.CaseReport{Kind: seckill.CaseDriftUncorrected, Key: "7:3", SessionID: 7, PrizeID: 3, Detail: "drift"}); err != nil {
		t.Fatal(err)
	}
	cases, err := ex.List(ctx, store.CaseFilter{Limit: 10})
	if err != nil || len(cases) != 3 {
		t.Fatalf("cases %v %v", cases, err)
	}
	dismiss := func(c adminCall, id int64) map[string]any {
		t.Helper()
		c.method, c.path, c.body = "POST", fmt.Sprintf("/admin/v1/exceptions/%d/dismiss", id), `{"note":"settled"}`
		resp, body := c.do(t, base)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("dismiss %d: %d %v", id, resp.StatusCode, body)
		}
		return body
	}

	// The single SECKILL_ADMIN_TOKEN still works, as "admin".
	if got := dismiss(adminCall{token: testAdminToken, header: map[string]string{"X-Admin-Actor": "bob"}}, cases[0].ID); got["state_changed_by"] != "admin" {
		t.Fatalf("the legacy token's dismissal: %v", got)
	}
	// alice's token, claiming to be the reconciler: alice acted.
	got := dismiss(adminCall{token: aliceToken, header: map[string]string{"X-Admin-Actor": "reconciler"}}, cases[1].ID)
	acts, _ := got["actions"].([]any)
	if got["state_changed_by"] != "alice" || len(acts) != 1 || acts[0].(map[string]any)["actor"] != "alice" ||
		acts[0].(map[string]any)["remote_addr"] != "127.0.0.1" {
		t.Fatalf("alice's dismissal claiming to be the reconciler: %v", got)
	}
	// bob in the console, typing alice's name: bob acted.
	resp, _ := adminCall{method: "POST", path: "/console/login", body: `{"token":"` + bobToken + `","name":"alice"}`}.do(t, base)
	bobSession := consoleCookie(t, resp)
	guard := map[string]string{"X-Seckill-Console": "1"}
	if _, who := (adminCall{method: "GET", path: "/console/session", cookie: bobSession, header: guard}).do(t, base); who["name"] != "bob" {
		t.Fatalf("bob's console session names %v", who)
	}
	if got := dismiss(adminCall{cookie: bobSession, header: guard}, cases[2].ID); got["state_changed_by"] != "bob" {
		t.Fatalf("bob's console dismissal: %v", got)
	}
	var rows []struct{ Actor, RemoteAddr string }
	if err := db.Raw("SELECT actor, remote_addr FROM exception_actions ORDER BY id").Scan(&rows).Error; err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(rows) != "[{admin 127.0.0.1} {alice 127.0.0.1} {bob 127.0.0.1}]" {
		t.Fatalf("exception_actions: %v", rows)
	}

	// The session audit of a catalog change names the credential and the address too.
	start := time.Now().UTC().Add(time.Hour).Truncate(time.Second)
	resp, act := adminCall{method: "POST", path: "/admin/v1/activities", token: aliceToken, body: fmt.Sprintf(`{"name": "test sale", "window_start": %q, "window_end": %q, "interval": "30m", "session_length": "10m", "prizes": [{"name": "phone", "stock": 5}]}`, start.Format(time.RFC3339), start.Add(time.Hour).Format(time.RFC3339)),
		header: map[string]string{"X-Admin-Actor": "system"}}.do(t, base)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %v", resp.StatusCode, act)
	}
	sid := jsonID(act["sessions"].([]any)[0].(map[string]any)["id"])
	if resp, body := (adminCall{method: "POST", path: "/admin/v1/sessions/" + sid + "/close", token: aliceToken,
		header: map[string]string{"X-Admin-Actor": "system"}}).do(t, base); resp.StatusCode != http.StatusOK {
		t.Fatalf("close: %d %v", resp.StatusCode, body)
	}
	_, audit := adminCall{method: "GET", path: "/admin/v1/sessions/" + sid + "/audit", token: bobToken}.do(t, base)
	if entries, _ := audit["entries"].([]any); len(entries) != 1 || entries[0].(map[string]any)["actor"] != "alice" ||
		entries[0].(map[string]any)["remote_addr"] != "127.0.0.1" {
		t.Fatalf("session audit: %v", audit)
	}

	// bob's credential is removed and carol's added: bob is refused on the next request,
	// bearer and console alike; carol is in.
	tokensFile(t, file, map[string]string{"alice": aliceToken, "carol": carolToken}, t0.Add(time.Minute))
	if resp, _ := (adminCall{method: "GET", path: "/admin/v1/activities", token: bobToken}).do(t, base); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("bob's removed token: %d", resp.StatusCode)
	}
	if resp, _ := (adminCall{method: "GET", path: "/console/session", cookie: bobSession, header: guard}).do(t, base); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("bob's session after his credential was removed: %d", resp.StatusCode)
	}
	if resp, _ := (adminCall{method: "GET", path: "/admin/v1/activities", token: carolToken}).do(t, base); resp.StatusCode != http.StatusOK {
		t.Fatalf("carol's new token: %d", resp.StatusCode)
	}
}

// A credentials file that gives an operator one of the automation's names, or that does not
// parse, stops the gateway at start-up, naming the problem.
func TestGatewayRefusesBadAdminTokensFile(t *testing.T) {
	dsn, _ := stacktest.Migrated(t)
	stacktest.Redis(t)
	for name, tc := range map[string]struct{ file, want string }{
		"reserved name": {tokensFile(t, "", map[string]string{"reconciler": aliceToken}, time.Now()), "reserved"},
		"not a hash":    {writeRaw(t, "alice "+aliceToken+"\n"), "sha256:"},
		"missing":       {filepath.Join(t.TempDir(), "nope"), "no such file"},
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := run(ctx, stacktest.Getenv(map[string]string{"SECKILL_MYSQL_DSN": dsn, "SECKILL_JWT_SECRET": "test-jwt-secret-0123456789-0123456789",
				"SECKILL_ADMIN_TOKENS_FILE": tc.file, "SECKILL_GATEWAY_ADDR": stacktest.FreeAddr(t), "SECKILL_ADMIN_ADDR": stacktest.FreeAddr(t)}), &out)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), aliceToken) {
				t.Fatalf("run: %v, want a refusal mentioning %q (and never the token)", err, tc.want)
			}
		})
	}
}

func writeRaw(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "admin-tokens")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const wantCSP = "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// The admin listener: every answer carries the CSP (errors, redirects, probes, refusals);
// a Host it does not serve is refused (DNS rebinding); sign-out needs the console's guard
// header; sign-in attempts are limited per address.
func TestAdminListenerGuards(t *testing.T) {
	_, adm := startGateway(t, map[string]string{"SECKILL_ADMIN_HOSTS": "ops.example, console.example:9443",
		"SECKILL_CONSOLE_LOGIN_RATE": "3"})
	base := "http://" + adm
	port := adm[strings.LastIndex(adm, ":")+1:]

	t.Run("host", func(t *testing.T) {
		for _, tc := range []struct {
			host string
			want int
		}{
			{adm, 200},
			{"localhost:" + port, 200},
			{"LOCALHOST:" + port, 200},
			{"[::1]:" + port, 200},
			{"127.0.0.1:18081", 200}, // a published port
			{"ops.example", 200},
			{"ops.example.:8443", 200},
			{"console.example:9443", 200},
			{"console.example:9444", 421},
			{"evil.example:" + port, 421},
			{"evil.example", 421},
			{"localhost.evil.example:" + port, 421},
			{"127.0.0.1.nip.io:" + port, 421},
		} {
			resp, body := adminCall{method: "GET", path: "/healthz", host: tc.host}.do(t, base)
			if resp.StatusCode != tc.want {
				t.Errorf("Host %s: %d, want %d", tc.host, resp.StatusCode, tc.want)
			}
			if tc.want == 421 && (body["error"] != "misdirected_request" || body["message"] == nil) {
				t.Errorf("Host %s: body %v", tc.host, body)
			}
		}
		// A rebound page cannot sign in either (nor learn whether a token is right).
		resp, _ := adminCall{method: "POST", path: "/console/login", host: "evil.example:" + port,
			body: `{"token":"` + testAdminToken + `"}`}.do(t, base)
		if resp.StatusCode != 421 || len(resp.Cookies()) != 0 {
			t.Fatalf("login from a rebound page: %d %v", resp.StatusCode, resp.Cookies())
		}
	})

	t.Run("csp on every answer", func(t *testing.T) {
		for _, c := range []adminCall{
			{method: "GET", path: "/healthz"},
			{method: "GET", path: "/readyz"},
			{method: "GET", path: "/nope"},
			{method: "DELETE", path: "/admin/v1/activities", token: testAdminToken},
			{method: "GET", path: "/admin/v1/activities"},
			{method: "GET", path: "/admin/v1/activities", token: testAdminToken},
			{method: "GET", path: "/admin/v1/activities/abc", token: testAdminToken},
			{method: "GET", path: "/metrics"},
			{method: "GET", path: "/console"},
			{method: "GET", path: "/debug/pprof", token: testAdminToken},
			{method: "GET", path: "/console/session"},
			{method: "GET", path: "/healthz", host: "evil.example"},
		} {
			resp, _ := c.do(t, base)
			if got := resp.Header.Get("Content-Security-Policy"); got != wantCSP {
				t.Errorf("%s %s (Host %q): %d with CSP %q", c.method, c.path, c.host, resp.StatusCode, got)
			}
			if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
				t.Errorf("%s %s: %d without nosniff", c.method, c.path, resp.StatusCode)
			}
		}
	})

	t.Run("logout needs the guard header", func(t *testing.T) {
		resp, body := adminCall{method: "POST", path: "/console/logout"}.do(t, base)
		if resp.StatusCode != http.StatusUnauthorized || body["error"] != "unauthorized" || len(resp.Cookies()) != 0 {
			t.Fatalf("logout without the guard: %d %v %v", resp.StatusCode, body, resp.Cookies())
		}
		resp, _ = adminCall{method: "POST", path: "/console/logout", header: map[string]string{"X-Seckill-Console": "1"}}.do(t, base)
		if resp.StatusCode != http.StatusNoContent || len(resp.Cookies()) != 1 || resp.Cookies()[0].MaxAge >= 0 {
			t.Fatalf("logout with the guard: %d %v", resp.StatusCode, resp.Cookies())
		}
	})

	t.Run("login is rate limited", func(t *testing.T) { // 3 a minute from one address
		var codes []int
		for i := range 4 {
			resp, _ := adminCall{method: "POST", path: "/console/login", body: fmt.Sprintf(`{"token":"guess-%02d-0123456789"}`, i)}.do(t, base)
			codes = append(codes, resp.StatusCode)
		}
		resp, body := adminCall{method: "POST", path: "/console/login", body: `{"token":"` + testAdminToken + `"}`}.do(t, base)
		if fmt.Sprint(codes) != "[401 401 401 429]" || resp.StatusCode != http.StatusTooManyRequests ||
			body["error"] != "rate_limited" || resp.Header.Get("Retry-After") == "" || len(resp.Cookies()) != 0 {
			t.Fatalf("guesses answered %v, then the right token %d %v %v", codes, resp.StatusCode, body, resp.Header)
		}
	})
}
