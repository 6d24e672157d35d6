package console

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/gateway/operator"
)

// testToken is alice's credential; bobToken bob's.
const (
	testToken = "console-test-admin-token-0123456789"
	bobToken  = "console-test-bob-token-0123456789"
)

// creds is the operators' credentials: name → token.
type creds map[string]string

func (c creds) Authenticate(token string) (string, bool) {
	for name, tok := range c {
		if tok == token && token != "" {
			return name, true
		}
	}
	return "", false
}

func (c creds) Hashes(name string) [][sha256.Size]byte {
	tok, ok := c[name]
	if !ok {
		return nil
	}
	return [][sha256.Size]byte{sha256.Sum256([]byte(tok))}
}

// Role: every credential of creds is an admin's (roledCreds gives some another role).
func (c creds) Role(name string) operator.Role {
	if _, ok := c[name]; !ok {
		return 0
	}
	return operator.RoleAdmin
}

// roledCreds are creds with the roles of some of them set.
type roledCreds struct {
	creds
	roles map[string]operator.Role
}

func (c roledCreds) Role(name string) operator.Role {
	if r, ok := c.roles[name]; ok {
		return r
	}
	return c.creds.Role(name)
}

// memSessions is the server-side session store in memory: each session's absolute end and
// when it was last used.
type memSessions struct {
	mu       sync.Mutex
	end, use map[string]time.Time
}

func (m *memSessions) Create(_ context.Context, id string, now, end time.Time, _ time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.end == nil {
		m.end, m.use = map[string]time.Time{}, map[string]time.Time{}
	}
	m.end[id], m.use[id] = end, now
	return nil
}

func (m *memSessions) Touch(_ context.Context, id string, now time.Time, idle time.Duration) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	end, ok := m.end[id]
	if !ok || !now.Before(end) || now.Sub(m.use[id]) >= idle {
		delete(m.end, id)
		return false, nil
	}
	m.use[id] = now
	return true, nil
}

func (m *memSessions) Revoke(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.end, id)
	return nil
}

// clock is a settable now for session expiry.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

var testSecret = []byte("console-test-secret-0123456789-0123456789")

func newTestConsoleWith(t *testing.T, cr creds, mutate func(*Config)) (*Console, *clock, http.Handler) {
	t.Helper()
	clk := &clock{t: time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)}
	cfg := Config{Credentials: cr, Secret: testSecret, TTL: time.Hour, Now: clk.now, Sessions: &memSessions{}}
	if mutate != nil {
		mutate(&cfg)
	}
	c := New(cfg)
	mux := http.NewServeMux()
	c.Register(mux)
	return c, clk, Secured(mux)
}

func newTestConsole(t *testing.T) (*Console, *clock, http.Handler) {
	t.Helper()
	return newTestConsoleWith(t, creds{"alice": testToken, "bob": bobToken}, nil)
}

func login(t *testing.T, h http.Handler, body string, mutate func(*http.Request)) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest("POST", "/console/login", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	if mutate != nil {
		mutate(r)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func sessionCookie(t *testing.T, w *httptest.ResponseRecorder) *http.Cookie {
	t.Helper()
	for _, c := range w.Result().Cookies() {
		if c.Name == CookieName {
			return c
		}
	}
	t.Fatalf("no %s cookie in %v", CookieName, w.Header().Values("Set-Cookie"))
	return nil
}

// guarded is an admin API request as the page sends it.
func guarded(cookie *http.Cookie) *http.Request {
	r := httptest.NewRequest("GET", "/admin/v1/overview", nil)
	r.Header.Set(GuardHeader, "1")
	if cookie != nil {
		r.AddCookie(cookie)
	}
	return r
}

func decodeError(t *testing.T, w *httptest.ResponseRecorder) apiError {
	t.Helper()
	var e apiError
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil {
		t.Fatalf("error body %q: %v", w.Body.String(), err)
	}
	return e
}

func TestLoginSetsASessionCookieScriptsCannotRead(t *testing.T) {
	c, _, h := newTestConsole(t)
	w := login(t, h, `{"token":"`+testToken+`","name":"alice"}`, nil)
	if w.Code != http.StatusNoContent {
		t.Fatalf("login: %d %s", w.Code, w.Body)
	}
	ck := sessionCookie(t, w)
	if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" || ck.MaxAge != 3600 || ck.Secure {
		t.Fatalf("cookie attributes: %+v", ck)
	}
	if !strings.HasPrefix(ck.Value, "v2.") || strings.Contains(ck.Value, testToken) {
		t.Fatalf("cookie value %q", ck.Value)
	}
	if actor, ok := c.Verify(guarded(ck)); !ok || actor != "alice" {
		t.Fatalf("Verify = %q, %v; want alice, true", actor, ok)
	}
}

func TestCookiesAreSecureBehindHTTPS(t *testing.T) {
	_, _, h := newTestConsole(t)
	for name, https := range map[string]func(*http.Request){
		"tls":             func(r *http.Request) { r.TLS = &tls.ConnectionState{} },
		"forwarded https": func(r *http.Request) { r.Header.Set("X-Forwarded-Proto", "https") },
		"forwarded HTTPS": func(r *http.Request) { r.Header.Set("X-Forwarded-Proto", "HTTPS") },
	} {
		t.Run(name, func(t *testing.T) {
			if ck := sessionCookie(t, login(t, h, `{"token":"`+testToken+`"}`, https)); !ck.Secure {
				t.Fatalf("login cookie not Secure: %+v", ck)
			}
			r := httptest.NewRequest("POST", "/console/logout", nil)
			r.Header.Set(GuardHeader, "1")
			https(r)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if ck := sessionCookie(t, w); !ck.Secure {
				t.Fatalf("logout cookie not Secure: %+v", ck)
			}
		})
	}
}

func TestLoginRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, body, contentType string
		code                    int
		errCode, field          string
	}{
		{"wrong token", `{"token":"nope","name":"alice"}`, "application/json", 401, "unauthorized", ""},
		{"token prefix", `{"token":"` + testToken[:10] + `"}`, "application/json", 401, "unauthorized", ""},
		{"no token", `{"name":"alice"}`, "application/json", 401, "unauthorized", ""},
		{"name with a space", `{"token":"` + testToken + `","name":"al ice"}`, "application/json", 400, "invalid_input", "name"},
		{"name with a bar", `{"token":"` + testToken + `","name":"a|b"}`, "application/json", 400, "invalid_input", "name"},
		{"name too long", `{"token":"` + testToken + `","name":"` + strings.Repeat("a", 65) + `"}`, "application/json", 400, "invalid_input", "name"},
		{"unknown field", `{"token":"` + testToken + `","admin":true}`, "application/json", 400, "invalid_input", ""},
		{"a form post", `token=` + testToken, "application/x-www-form-urlencoded", 400, "invalid_input", ""},
		{"trailing data", `{"token":"` + testToken + `"} {}`, "application/json", 400, "invalid_input", ""},
		{"too large", `{"token":"` + strings.Repeat("a", 5000) + `"}`, "application/json", 400, "invalid_input", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, h := newTestConsole(t)
			w := login(t, h, tc.body, func(r *http.Request) { r.Header.Set("Content-Type", tc.contentType) })
			if w.Code != tc.code {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.code, w.Body)
			}
			if len(w.Result().Cookies()) != 0 {
				t.Fatalf("refused login set a cookie: %v", w.Header().Values("Set-Cookie"))
			}
			e := decodeError(t, w)
			if e.Code != tc.errCode || e.Message == "" {
				t.Fatalf("error body %+v, want code %s with a message", e, tc.errCode)
			}
			if tc.field != "" && (len(e.Fields) != 1 || e.Fields[0].Field != tc.field) {
				t.Fatalf("fields %+v, want one for %s", e.Fields, tc.field)
			}
		})
	}
}

// A scrape credential (Prometheus's) reads /metrics only: its sign-in is refused with a
// message saying why, instead of a session on which every call of the page is a 403. A
// viewer signs in (the console's pages read the admin API).
func TestLoginRefusesAScrapeCredential(t *testing.T) {
	cr := roledCreds{creds{"prometheus": "console-test-scrape-token-0123456789", "vera": "console-test-viewer-token-0123456789"},
		map[string]operator.Role{"prometheus": operator.RoleScrape, "vera": operator.RoleViewer}}
	clk := &clock{t: time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)}
	var logs bytes.Buffer
	c := New(Config{Credentials: cr, Secret: testSecret, TTL: time.Hour, Now: clk.now, Sessions: &memSessions{},
		Log: slog.New(slog.NewJSONHandler(&logs, nil))})
	mux := http.NewServeMux()
	c.Register(mux)
	h := Secured(mux)

	w := login(t, h, `{"token":"console-test-scrape-token-0123456789"}`, nil)
	if w.Code != http.StatusForbidden {
		t.Fatalf("scrape credential: status %d, want 403: %s", w.Code, w.Body)
	}
	if len(w.Result().Cookies()) != 0 {
		t.Fatalf("refused sign-in set a cookie: %v", w.Header().Values("Set-Cookie"))
	}
	if e := decodeError(t, w); e.Code != "forbidden" || !strings.Contains(e.Message, "scrape") || !strings.Contains(e.Message, "/metrics") {
		t.Fatalf("error body %+v, want forbidden naming the scrape role and /metrics", e)
	}
	if !strings.Contains(logs.String(), `"reason":"role scrape"`) || !strings.Contains(logs.String(), `"actor":"prometheus"`) {
		t.Fatalf("refusal not logged with actor and reason: %s", logs.String())
	}

	w = login(t, h, `{"token":"console-test-viewer-token-0123456789"}`, nil)
	if w.Code != http.StatusNoContent {
		t.Fatalf("viewer credential: status %d, want 204: %s", w.Code, w.Body)
	}
}

// The session is the credential's: whatever name the operator types (or leaves out), the
// actor is the name of the credential whose token signed in, so one operator's token
// cannot act as another operator or as the automation.
func TestSessionNamesTheCredentialNotTheTypedName(t *testing.T) {
	c, _, h := newTestConsole(t)
	for _, tc := range []struct{ body, want string }{
		{`{"token":"` + testToken + `"}`, "alice"},
		{`{"token":"` + testToken + `","name":"  "}`, "alice"},
		{`{"token":"` + testToken + `","name":"bob"}`, "alice"},
		{`{"token":"` + testToken + `","name":"reconciler"}`, "alice"},
		{`{"token":"` + bobToken + `","name":"alice"}`, "bob"},
	} {
		ck := sessionCookie(t, login(t, h, tc.body, nil))
		if actor, ok := c.Verify(guarded(ck)); !ok || actor != tc.want {
			t.Fatalf("login %s: Verify = %q, %v; want %q", tc.body, actor, ok, tc.want)
		}
	}
}

// A credential's name may hold characters a cookie value may not (';', '"', ','); it must
// survive intact.
func TestNameWithCookieUnsafeCharacters(t *testing.T) {
	name := `o"brien;x,y.z`
	c, _, h := newTestConsoleWith(t, creds{name: testToken}, nil)
	ck := sessionCookie(t, login(t, h, `{"token":"`+testToken+`"}`, nil))
	if actor, ok := c.Verify(guarded(ck)); !ok || actor != name {
		t.Fatalf("Verify = %q, %v; want %q, true", actor, ok, name)
	}
}

// Removing or rotating an operator's credential ends that operator's sessions, and only
// theirs.
func TestSessionEndsWithItsCredential(t *testing.T) {
	cr := creds{"alice": testToken, "bob": bobToken}
	c, _, h := newTestConsoleWith(t, cr, nil)
	alice := sessionCookie(t, login(t, h, `{"token":"`+testToken+`"}`, nil))
	bob := sessionCookie(t, login(t, h, `{"token":"`+bobToken+`"}`, nil))
	cr["alice"] = "alice-rotated-token-0123456789"
	if _, ok := c.Verify(guarded(alice)); ok {
		t.Fatal("a session outlived its credential's rotation")
	}
	delete(cr, "bob")
	if _, ok := c.Verify(guarded(bob)); ok {
		t.Fatal("a session outlived its credential's removal")
	}
	cr["bob"] = bobToken
	if actor, ok := c.Verify(guarded(bob)); !ok || actor != "bob" {
		t.Fatalf("bob's unchanged credential: %q, %v", actor, ok)
	}
}

// Sign-ins are limited per remote address, refused before the token is looked at, and a
// refused sign-in is logged with the address but never with what was submitted.
func TestLoginIsRateLimitedAndFailuresLogged(t *testing.T) {
	var logged bytes.Buffer
	lim := &countingLimiter{allow: 2}
	_, _, h := newTestConsoleWith(t, creds{"alice": testToken}, func(c *Config) {
		c.Logins = lim
		c.Remote = func(r *http.Request) string { return "203.0.113.9" }
		c.Log = slog.New(slog.NewJSONHandler(&logged, nil))
	})
	if w := login(t, h, `{"token":"mistyped-`+testToken+`"}`, nil); w.Code != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d", w.Code)
	}
	if w := login(t, h, `{"token":"`+testToken+`"}`, nil); w.Code != http.StatusNoContent {
		t.Fatalf("right token: %d", w.Code)
	}
	w := login(t, h, `{"token":"`+testToken+`"}`, nil)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" || decodeError(t, w).Code != "rate_limited" ||
		len(w.Result().Cookies()) != 0 {
		t.Fatalf("over the limit: %d %v %s", w.Code, w.Header(), w.Body)
	}
	if w.Header().Get("Content-Security-Policy") == "" {
		t.Fatal("the 429 has no CSP")
	}
	if strings.Join(lim.keys, ",") != "203.0.113.9,203.0.113.9,203.0.113.9" {
		t.Fatalf("limited by %q, want the remote address each time", lim.keys)
	}
	out := logged.String()
	if !strings.Contains(out, `"msg":"console sign-in refused"`) || !strings.Contains(out, `"remote_addr":"203.0.113.9"`) {
		t.Fatalf("log %s: want the refused sign-in with its remote address", out)
	}
	if strings.Contains(out, "mistyped") || strings.Contains(out, testToken) {
		t.Fatalf("the log holds the submitted token: %s", out)
	}
}

type countingLimiter struct {
	allow int
	keys  []string
}

func (l *countingLimiter) Allow(key string) (bool, time.Duration) {
	l.keys = append(l.keys, key)
	if len(l.keys) > l.allow {
		return false, 30 * time.Second
	}
	return true, 0
}

func TestVerifyRefuses(t *testing.T) {
	// An idle timeout beyond the lifetime: this test is about the cookie, the absolute end.
	c, clk, h := newTestConsoleWith(t, creds{"alice": testToken, "bob": bobToken}, func(cfg *Config) { cfg.Idle = 2 * time.Hour })
	ck := sessionCookie(t, login(t, h, `{"token":"`+testToken+`","name":"alice"}`, nil))
	other := New(Config{Credentials: creds{"alice": testToken}, Secret: []byte("another-console-secret-0123456789-01234"), TTL: time.Hour, Now: clk.now,
		Sessions: c.sessions, Idle: 2 * time.Hour})
	rotated := New(Config{Credentials: creds{"alice": "alice-new-token-0123456789"}, Secret: testSecret, TTL: time.Hour, Now: clk.now,
		Sessions: c.sessions, Idle: 2 * time.Hour})
	another := sessionCookie(t, login(t, h, `{"token":"`+testToken+`"}`, nil))
	tampered := func(f func(parts []string)) *http.Cookie {
		parts := strings.Split(ck.Value, ".")
		f(parts)
		return &http.Cookie{Name: CookieName, Value: strings.Join(parts, ".")}
	}
	for _, tc := range []struct {
		name    string
		console *Console
		req     func() *http.Request
		advance time.Duration
	}{
		{"no cookie", c, func() *http.Request { return guarded(nil) }, 0},
		{"missing guard header", c, func() *http.Request {
			r := guarded(ck)
			r.Header.Del(GuardHeader)
			return r
		}, 0},
		{"guard header not 1", c, func() *http.Request {
			r := guarded(ck)
			r.Header.Set(GuardHeader, "true")
			return r
		}, 0},
		{"expired", c, func() *http.Request { return guarded(ck) }, time.Hour},
		{"later expiry, old signature", c, func() *http.Request {
			return guarded(tampered(func(p []string) { p[1] = "9999999999" }))
		}, 0},
		{"other actor, old signature", c, func() *http.Request {
			return guarded(tampered(func(p []string) { p[2] = "Ym9i" })) // "bob"
		}, 0},
		{"other version", c, func() *http.Request { return guarded(tampered(func(p []string) { p[0] = "v1" })) }, 0},
		{"v1 cookie without its session id, old signature", c, func() *http.Request {
			return guarded(tampered(func(p []string) { p[0] = "v1"; copy(p[3:], p[4:]); p[4] = "" }))
		}, 0},
		{"another live session's id, old signature", c, func() *http.Request {
			return guarded(tampered(func(p []string) { p[3] = strings.Split(another.Value, ".")[3] }))
		}, 0},
		{"truncated", c, func() *http.Request {
			return guarded(&http.Cookie{Name: CookieName, Value: ck.Value[:len(ck.Value)-3]})
		}, 0},
		{"garbage", c, func() *http.Request { return guarded(&http.Cookie{Name: CookieName, Value: "x.y.z"}) }, 0},
		{"signed with another console secret", other, func() *http.Request { return guarded(ck) }, 0},
		{"signed for alice's old token", rotated, func() *http.Request { return guarded(ck) }, 0},
		{"bob's name on alice's signature", c, func() *http.Request {
			return guarded(tampered(func(p []string) { p[2] = "Ym9i" })) // "bob", who has a credential
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			saved := clk.t
			defer func() { clk.t = saved }()
			clk.t = clk.t.Add(tc.advance)
			if actor, ok := tc.console.Verify(tc.req()); ok || actor != "" {
				t.Fatalf("Verify = %q, %v; want refusal", actor, ok)
			}
		})
	}
	// The same cookie a moment before its expiry still works (the refusals above are not
	// refusals of everything).
	clk.t = clk.t.Add(time.Hour - time.Second)
	if _, ok := c.Verify(guarded(ck)); !ok {
		t.Fatal("a session one second before its expiry was refused")
	}
}

func TestLogoutExpiresTheCookie(t *testing.T) {
	_, _, h := newTestConsole(t)
	w := httptest.NewRecorder()
	r := httptest.NewRequest("POST", "/console/logout", nil)
	r.Header.Set(GuardHeader, "1")
	h.ServeHTTP(w, r)
	if w.Code != http.StatusNoContent {
		t.Fatalf("logout: %d %s", w.Code, w.Body)
	}
	ck := sessionCookie(t, w)
	if ck.MaxAge >= 0 || ck.Value != "" || !ck.HttpOnly || ck.Path != "/" {
		t.Fatalf("logout cookie: %+v (raw %q)", ck, w.Header().Get("Set-Cookie"))
	}
	if !strings.Contains(w.Header().Get("Set-Cookie"), "Max-Age=0") {
		t.Fatalf("Set-Cookie %q does not expire the cookie", w.Header().Get("Set-Cookie"))
	}
}

// Sign-out needs the CSRF guard like every other console call: another site must not be
// able to sign an operator out (and so into a sign-in form it may have framed or mimicked).
func TestLogoutNeedsTheGuardHeader(t *testing.T) {
	_, _, h := newTestConsole(t)
	for _, guard := range []string{"", "true"} {
		r := httptest.NewRequest("POST", "/console/logout", nil)
		if guard != "" {
			r.Header.Set(GuardHeader, guard)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusUnauthorized || decodeError(t, w).Code != "unauthorized" || len(w.Result().Cookies()) != 0 {
			t.Fatalf("logout with guard %q: %d %v %s", guard, w.Code, w.Header().Values("Set-Cookie"), w.Body)
		}
	}
}

func TestSessionEndpointNamesTheSignedInOperator(t *testing.T) {
	_, _, h := newTestConsole(t)
	ck := sessionCookie(t, login(t, h, `{"token":"`+testToken+`","name":"alice"}`, nil))
	r := httptest.NewRequest("GET", "/console/session", nil)
	r.Header.Set(GuardHeader, "1")
	r.AddCookie(ck)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"name":"alice"`) {
		t.Fatalf("session: %d %s", w.Code, w.Body)
	}
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/console/session", nil))
	if w.Code != 401 || decodeError(t, w).Code != "unauthorized" {
		t.Fatalf("session without a cookie: %d %s", w.Code, w.Body)
	}
}

func TestPageIsServedWithAStrictPolicy(t *testing.T) {
	_, _, h := newTestConsole(t)
	for _, tc := range []struct{ path, contentType, contains string }{
		{"/console/", "text/html", `<script src="/console/app.js" defer></script>`},
		{"/console/app.js", "javascript", "X-Seckill-Console"},
		{"/console/app.css", "text/css", ":focus-visible"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", tc.path, nil))
			if w.Code != 200 || !strings.Contains(w.Header().Get("Content-Type"), tc.contentType) || !strings.Contains(w.Body.String(), tc.contains) {
				t.Fatalf("%s: %d %q, body contains %q: %v", tc.path, w.Code, w.Header().Get("Content-Type"), tc.contains, strings.Contains(w.Body.String(), tc.contains))
			}
			if got := w.Header().Get("Content-Security-Policy"); got != "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'" {
				t.Fatalf("CSP %q", got)
			}
			if w.Header().Get("X-Content-Type-Options") != "nosniff" {
				t.Fatal("no nosniff")
			}
			etag := w.Header().Get("ETag")
			r := httptest.NewRequest("GET", tc.path, nil)
			r.Header.Set("If-None-Match", etag)
			w = httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if etag == "" || w.Code != http.StatusNotModified {
				t.Fatalf("revalidation with ETag %q: %d", etag, w.Code)
			}
		})
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/console", nil))
	if w.Code != http.StatusFound || w.Header().Get("Location") != "/console/" {
		t.Fatalf("/console: %d %q", w.Code, w.Header().Get("Location"))
	}
}

// The page must work under the CSP it is served with: no inline handlers, scripts or
// styles in the markup, and the script never builds HTML from strings.
func TestPageNeedsNothingTheCSPForbids(t *testing.T) {
	html, _ := static.ReadFile("static/index.html")
	js, _ := static.ReadFile("static/app.js")
	for _, bad := range []string{" onclick=", " onsubmit=", " onload=", " style=", "<style", "javascript:", "<script>"} {
		if strings.Contains(strings.ToLower(string(html)), bad) {
			t.Errorf("index.html contains %q", bad)
		}
	}
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "setAttribute('style'", "http://", "https://"} {
		if strings.Contains(string(js), bad) {
			t.Errorf("app.js contains %q", bad)
		}
	}
}
