package main

import (
	"net/http"
	"testing"
)

// Console sessions are kept in Redis, which the gateways share: a sign-in on one gateway
// holds on another, and signing out on that other one ends the session on both, so the
// cookie replayed after sign-out is a 401 everywhere.
func TestConsoleSignOutRevokesOnEveryGateway(t *testing.T) {
	_, a := startGateway(t, nil)
	_, b := startGateway(t, nil)
	resp, _ := adminCall{method: "POST", path: "/console/login", body: `{"token":"` + testAdminToken + `"}`}.do(t, "http://"+a)
	session := consoleCookie(t, resp)
	guard := map[string]string{"X-Seckill-Console": "1"}
	overview := adminCall{method: "GET", path: "/admin/v1/activities", cookie: session, header: guard}
	for _, gw := range []string{a, b} {
		if resp, body := overview.do(t, "http://"+gw); resp.StatusCode != http.StatusOK {
			t.Fatalf("signed in, on %s: %d %v", gw, resp.StatusCode, body)
		}
	}
	if resp, body := (adminCall{method: "POST", path: "/console/logout", cookie: session, header: guard}).do(t, "http://"+b); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("sign-out: %d %v", resp.StatusCode, body)
	}
	for _, gw := range []string{a, b} {
		if resp, _ := overview.do(t, "http://"+gw); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("the cookie replayed after sign-out, on %s: %d, want 401", gw, resp.StatusCode)
		}
	}
}
