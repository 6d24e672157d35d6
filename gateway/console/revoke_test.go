package console

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func signOut(t *testing.T, h http.Handler, ck *http.Cookie) {
	t.Helper()
	r := httptest.NewRequest("POST", "/console/logout", nil)
	r.Header.Set(GuardHeader, "1")
	r.AddCookie(ck)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusNoContent {
		t.Fatalf("sign-out: %d %s", w.Code, w.Body)
	}
}

// Signing out ends the session on the server: the cookie, replayed afterwards (copied
// before, or kept by a browser that ignored the deletion), is refused.
func TestSignOutRevokesTheSession(t *testing.T) {
	c, _, h := newTestConsole(t)
	ck := sessionCookie(t, login(t, h, `{"token":"`+testToken+`"}`, nil))
	other := sessionCookie(t, login(t, h, `{"token":"`+testToken+`"}`, nil))
	if _, ok := c.Verify(guarded(ck)); !ok {
		t.Fatal("the new session is refused")
	}
	signOut(t, h, ck)
	if _, ok := c.Verify(guarded(ck)); ok {
		t.Fatal("the session's cookie, replayed after sign-out, is still accepted")
	}
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/console/session", nil)
	r.Header.Set(GuardHeader, "1")
	r.AddCookie(ck)
	h.ServeHTTP(w, r)
	if w.Code != http.StatusUnauthorized {
		t.Fatalf("GET /console/session with the replayed cookie: %d, want 401", w.Code)
	}
	// The same operator's other session (another browser) is not signed out.
	if actor, ok := c.Verify(guarded(other)); !ok || actor != "alice" {
		t.Fatal("signing out of one session ended another")
	}
}

// A session unused for the idle timeout ends, however long its absolute lifetime; one in use
// lives until its absolute end and not beyond.
func TestSessionsHaveIdleAndAbsoluteLifetimes(t *testing.T) {
	c, clk, h := newTestConsoleWith(t, creds{"alice": testToken}, func(cfg *Config) {
		cfg.TTL, cfg.Idle = time.Hour, 20*time.Minute
	})
	idle := sessionCookie(t, login(t, h, `{"token":"`+testToken+`"}`, nil))
	busy := sessionCookie(t, login(t, h, `{"token":"`+testToken+`"}`, nil))
	for range 5 { // 50 minutes, the busy one used every 10
		clk.t = clk.t.Add(10 * time.Minute)
		if _, ok := c.Verify(guarded(busy)); !ok {
			t.Fatalf("a session in use ended at %s", clk.t)
		}
	}
	if _, ok := c.Verify(guarded(idle)); ok {
		t.Fatal("a session idle for 50 minutes (idle timeout 20m) is accepted")
	}
	clk.t = clk.t.Add(10 * time.Minute)
	if _, ok := c.Verify(guarded(busy)); ok {
		t.Fatal("a session in use outlived its absolute lifetime")
	}
}
