package console

import (
	"crypto/tls"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

const testToken = "console-test-admin-token-0123456789"

// clock is a settable now for session expiry.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newTestConsole(t *testing.T) (*Console, *clock, http.Handler) {
	t.Helper()
	clk := &clock{t: time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)}
	c := New(testToken, time.Hour, clk.now)
	mux := http.NewServeMux()
	c.Register(mux)
	return c, clk, mux
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
	if !strings.HasPrefix(ck.Value, "v1.") || strings.Contains(ck.Value, testToken) {
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

func TestEmptyNameSignsInAsConsole(t *testing.T) {
	c, _, h := newTestConsole(t)
	ck := sessionCookie(t, login(t, h, `{"token":"`+testToken+`","name":"  "}`, nil))
	if actor, ok := c.Verify(guarded(ck)); !ok || actor != "console" {
		t.Fatalf("Verify = %q, %v; want console, true", actor, ok)
	}
}

// A name may hold characters a cookie value may not (';', '"', ','); it must survive intact.
func TestNameWithCookieUnsafeCharacters(t *testing.T) {
	c, _, h := newTestConsole(t)
	name := `o"brien;x,y.z`
	body, _ := json.Marshal(map[string]string{"token": testToken, "name": name})
	ck := sessionCookie(t, login(t, h, string(body), nil))
	if actor, ok := c.Verify(guarded(ck)); !ok || actor != name {
		t.Fatalf("Verify = %q, %v; want %q, true", actor, ok, name)
	}
}

func TestVerifyRefuses(t *testing.T) {
	c, clk, h := newTestConsole(t)
	ck := sessionCookie(t, login(t, h, `{"token":"`+testToken+`","name":"alice"}`, nil))
	other := New("another-admin-token-0123456789", time.Hour, clk.now)
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
		{"other version", c, func() *http.Request { return guarded(tampered(func(p []string) { p[0] = "v2" })) }, 0},
		{"truncated", c, func() *http.Request {
			return guarded(&http.Cookie{Name: CookieName, Value: ck.Value[:len(ck.Value)-3]})
		}, 0},
		{"garbage", c, func() *http.Request { return guarded(&http.Cookie{Name: CookieName, Value: "x.y.z"}) }, 0},
		{"signed for another admin token", other, func() *http.Request { return guarded(ck) }, 0},
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
	h.ServeHTTP(w, httptest.NewRequest("POST", "/console/logout", nil))
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
			if got := w.Header().Get("Content-Security-Policy"); got != "default-src 'self'; frame-ancestors 'none'" {
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
