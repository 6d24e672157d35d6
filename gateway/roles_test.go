package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seckill-pipeline/seckill/gateway/admin"
	"github.com/seckill-pipeline/seckill/gateway/operator"
)

// roleTokens are one credential per role, as a tokens file names them.
var roleTokens = map[operator.Role]string{
	operator.RoleScrape:   "prometheus-scrape-token-0123456789",
	operator.RoleViewer:   "vera-viewer-token-0123456789",
	operator.RoleOperator: "otto-operator-token-0123456789",
	operator.RoleAdmin:    "ada-admin-token-0123456789",
}

// roleTokensFile writes a tokens file with a credential of each role in roleTokens.
func roleTokensFile(t *testing.T) string {
	t.Helper()
	names := map[operator.Role]string{operator.RoleScrape: "prometheus", operator.RoleViewer: "vera",
		operator.RoleOperator: "otto", operator.RoleAdmin: "ada"}
	var b strings.Builder
	for role, tok := range roleTokens {
		sum := sha256.Sum256([]byte(tok))
		fmt.Fprintf(&b, "%s sha256:%s %s\n", names[role], hex.EncodeToString(sum[:]), role)
	}
	path := filepath.Join(t.TempDir(), "admin-tokens")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// concrete turns a route table pattern into a request: method and a path with its wildcards
// filled (ids of nothing, so an allowed change finds nothing to change).
func concrete(pattern string) (method, path string) {
	method, path, _ = strings.Cut(pattern, " ")
	path = strings.NewReplacer("{id}", "999999999", "{prize}", "999999999", "{action}", "dismiss").Replace(path)
	if strings.HasSuffix(path, "/profile") || strings.HasSuffix(path, "/trace") {
		path += "?seconds=1"
	}
	return method, path
}

// Every route of the admin route table, called with a credential of each role (bearer, and a
// console session for the viewer): allowed as the table says, 403 otherwise, 401 without a
// credential. The scrape credential reads /metrics and nothing else: no stock adjustment, no
// profile. The gateway itself refuses to start when a mounted route is missing from the
// table (admin.API.Register), so walking the table walks every route.
func TestAdminRoutesByRole(t *testing.T) {
	_, adm := startGateway(t, map[string]string{"SECKILL_ADMIN_TOKENS_FILE": roleTokensFile(t)})
	base := "http://" + adm
	resp, _ := adminCall{method: "POST", path: "/console/login", body: `{"token":"` + roleTokens[operator.RoleViewer] + `"}`}.do(t, base)
	viewerSession := consoleCookie(t, resp)
	guard := map[string]string{"X-Seckill-Console": "1"}

	body := func(method string) string {
		if method == "GET" {
			return ""
		}
		return "{}"
	}
	for _, rt := range admin.Routes() {
		method, path := concrete(rt.Pattern)
		t.Run(rt.Pattern, func(t *testing.T) {
			if resp, _ := (adminCall{method: method, path: path, body: body(method)}).do(t, base); resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("no credential: %d, want 401", resp.StatusCode)
			}
			calls := map[string]adminCall{}
			for role, tok := range roleTokens {
				calls[role.String()] = adminCall{method: method, path: path, body: body(method), token: tok}
			}
			calls["admin (SECKILL_ADMIN_TOKEN)"] = adminCall{method: method, path: path, body: body(method), token: testAdminToken}
			calls["viewer (console)"] = adminCall{method: method, path: path, body: body(method), cookie: viewerSession, header: guard}
			for who, c := range calls {
				role, _ := operator.ParseRole(strings.Fields(who)[0])
				resp, out := c.do(t, base)
				switch allowed := role.Allows(rt.Role); {
				case allowed && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden):
					t.Errorf("%s: %d %v, want it let through (the route needs %s)", who, resp.StatusCode, out, rt.Role)
				case !allowed && (resp.StatusCode != http.StatusForbidden || out["error"] != "forbidden"):
					t.Errorf("%s: %d %v, want 403 forbidden (the route needs %s)", who, resp.StatusCode, out, rt.Role)
				}
			}
		})
	}
	if resp, _ := (adminCall{method: "GET", path: "/metrics", token: roleTokens[operator.RoleScrape]}).do(t, base); resp.StatusCode != http.StatusOK {
		t.Fatalf("the scrape credential reads /metrics: %d, want 200", resp.StatusCode)
	}
}
