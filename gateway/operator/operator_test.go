package operator

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func line(name, token string) string {
	sum := sha256.Sum256([]byte(token))
	return name + " sha256:" + hex.EncodeToString(sum[:]) + "\n"
}

func TestParse(t *testing.T) {
	good := line("alice", "alice-token-0123456789") + "# bob joined in May\n\n  " + line("bob", "bob-token-0123456789")
	creds, err := Parse(strings.NewReader(good))
	if err != nil || len(creds) != 2 || creds[0].Name != "alice" || creds[1].Name != "bob" {
		t.Fatalf("Parse = %+v, %v", creds, err)
	}
	for _, tc := range []struct{ name, file, want string }{
		{"no hash", "alice\n", "line 1"},
		{"three fields", "alice sha256:00 extra\n", "line 1"},
		{"plain token instead of a hash", "alice alice-token-0123456789\n", "sha256:"},
		{"short hash", "alice sha256:abcd\n", "64 hex digits"},
		{"not hex", "alice sha256:" + strings.Repeat("z", 64) + "\n", "64 hex digits"},
		{"name with a bar", line("a|b", "t1-0123456789abcdef"), "name"},
		{"the reconciler", line("reconciler", "t1-0123456789abcdef"), "reserved"},
		{"the system, capitalised", line("System", "t1-0123456789abcdef"), "reserved"},
		{"the legacy name", line("admin", "t1-0123456789abcdef"), "reserved"},
		{"the consumer", line("consumer", "t1-0123456789abcdef"), "reserved"},
		{"the console's old default", line("console", "t1-0123456789abcdef"), "reserved"},
		{"a name twice in two letter cases", line("alice", "t1-0123456789abcdef") + line("Alice", "t2-0123456789abcdef"), "line 2: name \"Alice\" again"},
		{"an empty token", line("alice", ""), "empty token"},
		{"four fields", "alice sha256:00 viewer extra\n", "line 1"},
		{"an unknown role", strings.TrimSuffix(line("alice", "t1-0123456789abcdef"), "\n") + " root\n", `role "root"`},
		{"a name with two roles", strings.TrimSuffix(line("alice", "t1-0123456789abcdef"), "\n") + " viewer\n" +
			line("alice", "t2-0123456789abcdef"), "line 2: alice with role admin, but viewer on line 1"},
		{"a token twice", line("alice", "t1-0123456789abcdef") + line("bob", "t1-0123456789abcdef"), "same token as line 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Parse(strings.NewReader(tc.file)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse error %v, want it to mention %q", err, tc.want)
			}
		})
	}
	// The error never repeats a token or a whole line (it could be a mistyped token).
	if _, err := Parse(strings.NewReader("alice s3cr3t-token-value\n")); err == nil || strings.Contains(err.Error(), "s3cr3t") {
		t.Fatalf("error %v", err)
	}
}

// A line may name its role; one that names none is an admin, as every credential was before
// roles existed, so older files keep working.
func TestParseRoles(t *testing.T) {
	withRole := func(name, token, role string) string {
		return strings.TrimSuffix(line(name, token), "\n") + " " + role + "\n"
	}
	file := line("alice", "a-0123456789abcdef") + withRole("bob", "b-0123456789abcdef", "viewer") +
		withRole("prom", "p-0123456789abcdef", "scrape") + withRole("carol", "c-0123456789abcdef", "operator") +
		withRole("carol", "c2-0123456789abcdef", "operator")
	creds, err := Parse(strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Role{}
	for _, c := range creds {
		got[c.Name] = c.Role
	}
	want := map[string]Role{"alice": RoleAdmin, "bob": RoleViewer, "prom": RoleScrape, "carol": RoleOperator}
	for name, r := range want {
		if got[name] != r {
			t.Errorf("%s: role %s, want %s", name, got[name], r)
		}
	}
	for _, tc := range []struct {
		have, need Role
		ok         bool
	}{
		{RoleScrape, RoleScrape, true}, {RoleScrape, RoleViewer, false}, {RoleScrape, RoleAdmin, false},
		{RoleViewer, RoleScrape, true}, {RoleViewer, RoleViewer, true}, {RoleViewer, RoleOperator, false},
		{RoleOperator, RoleOperator, true}, {RoleOperator, RoleAdmin, false},
		{RoleAdmin, RoleAdmin, true}, {0, RoleScrape, false}, {RoleAdmin, 0, false},
	} {
		if got := tc.have.Allows(tc.need); got != tc.ok {
			t.Errorf("%s.Allows(%s) = %v, want %v", tc.have, tc.need, got, tc.ok)
		}
	}
}

func writeFile(t *testing.T, path, body string, mod time.Time) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mod, mod); err != nil {
		t.Fatal(err)
	}
}

// Each operator's token names that operator; the legacy SECKILL_ADMIN_TOKEN is "admin".
func TestAuthenticateNamesTheCredential(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	writeFile(t, path, line("alice", "alice-token-0123456789")+line("bob", "bob-token-0123456789"), time.Now())
	c, err := Load(path, "legacy-admin-token-0123456789", nil)
	if err != nil {
		t.Fatal(err)
	}
	for token, want := range map[string]string{
		"alice-token-0123456789": "alice", "bob-token-0123456789": "bob", "legacy-admin-token-0123456789": "admin",
		"alice-token-012345678": "", "": "", "mallory": "",
	} {
		if name, ok := c.Authenticate(token); name != want || ok != (want != "") {
			t.Errorf("Authenticate(%q) = %q, %v; want %q", token, name, ok, want)
		}
	}
	if len(c.Hashes("alice")) != 1 {
		t.Error("no hash for alice")
	}
	if len(c.Hashes("mallory")) != 0 {
		t.Error("a hash for a name with no credential")
	}
	// The legacy token alone still works, as "admin".
	only, err := Load("", "legacy-admin-token-0123456789", nil)
	if err != nil {
		t.Fatal(err)
	}
	if name, ok := only.Authenticate("legacy-admin-token-0123456789"); !ok || name != "admin" {
		t.Fatalf("legacy token alone: %q, %v", name, ok)
	}
}

// A rotation's overlap: the same name on two lines, both tokens act as it; once the old
// line is removed, only the new token does.
func TestRotatingATokenKeepsItsName(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	t0 := time.Now().Add(-time.Hour)
	writeFile(t, path, line("alice", "alice-old-0123456789")+line("bob", "bob-token-0123456789"), t0)
	c, err := Load(path, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	name := func(token string) string { n, _ := c.Authenticate(token); return n }
	writeFile(t, path, line("alice", "alice-old-0123456789")+line("bob", "bob-token-0123456789")+line("alice", "alice-new-0123456789"), t0.Add(time.Second))
	if name("alice-old-0123456789") != "alice" || name("alice-new-0123456789") != "alice" || len(c.Hashes("alice")) != 2 {
		t.Fatalf("overlap: old %q, new %q, %d hashes", name("alice-old-0123456789"), name("alice-new-0123456789"), len(c.Hashes("alice")))
	}
	writeFile(t, path, line("bob", "bob-token-0123456789")+line("alice", "alice-new-0123456789"), t0.Add(2*time.Second))
	if name("alice-old-0123456789") != "" || name("alice-new-0123456789") != "alice" || len(c.Hashes("alice")) != 1 {
		t.Fatalf("after: old %q, new %q", name("alice-old-0123456789"), name("alice-new-0123456789"))
	}
}

// The shared token's rotation: SECKILL_ADMIN_TOKEN_PREVIOUS acts as "admin" beside the new
// one; a file credential with it is refused.
func TestPreviousLegacyToken(t *testing.T) {
	c, err := Load("", "legacy-new-0123456789", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AcceptPrevious("legacy-old-0123456789"); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"legacy-new-0123456789", "legacy-old-0123456789"} {
		if name, ok := c.Authenticate(tok); !ok || name != LegacyName {
			t.Fatalf("%s: %q %v", tok, name, ok)
		}
	}
	if len(c.Hashes(LegacyName)) != 2 {
		t.Fatalf("hashes of admin: %d", len(c.Hashes(LegacyName)))
	}
	path := filepath.Join(t.TempDir(), "tokens")
	writeFile(t, path, line("alice", "legacy-old-0123456789"), time.Now())
	f, err := Load(path, "legacy-new-0123456789", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.AcceptPrevious("legacy-old-0123456789"); err == nil {
		t.Fatal("a previous token that is also alice's accepted")
	}
	if _, err := Load("", "", nil); err == nil {
		t.Fatal("no credential at all accepted")
	}
}

// The file is re-read when it changes: a removed credential stops working on the next
// request, a new one works; a file that no longer parses keeps the last good set and is
// reported once.
func TestCredentialsFollowTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	t0 := time.Now().Add(-time.Hour)
	writeFile(t, path, line("alice", "alice-token-0123456789")+line("bob", "bob-token-0123456789"), t0)
	var reported []error
	c, err := Load(path, "", func(err error) { reported = append(reported, err) })
	if err != nil {
		t.Fatal(err)
	}
	authenticates := func(token string) string { name, _ := c.Authenticate(token); return name }
	if authenticates("bob-token-0123456789") != "bob" {
		t.Fatal("bob refused")
	}
	writeFile(t, path, line("alice", "alice-token-0123456789")+line("carol", "carol-token-0123456789"), t0.Add(time.Second))
	if got := authenticates("bob-token-0123456789"); got != "" {
		t.Fatalf("bob's removed token still names %q", got)
	}
	if got := authenticates("carol-token-0123456789"); got != "carol" {
		t.Fatalf("carol's new token names %q", got)
	}
	writeFile(t, path, line("alice", "alice-token-0123456789")+"reconciler sha256:00\n", t0.Add(2*time.Second))
	for range 3 {
		if got := authenticates("carol-token-0123456789"); got != "carol" {
			t.Fatalf("after a bad edit carol's token names %q, want the last good set", got)
		}
	}
	if len(reported) != 1 || !strings.Contains(reported[0].Error(), "line 2") {
		t.Fatalf("reported %v, want the bad file once", reported)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if got := authenticates("alice-token-0123456789"); got != "alice" || len(reported) != 2 {
		t.Fatalf("after removal: %q, reported %v", got, reported)
	}
}

func TestLoadRefuses(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	writeFile(t, empty, "# nobody yet\n", time.Now())
	clash := filepath.Join(dir, "clash")
	writeFile(t, clash, line("alice", "legacy-admin-token-0123456789"), time.Now())
	for _, tc := range []struct{ name, path, legacy, want string }{
		{"no credential at all", empty, "", "holds no credential"},
		{"missing file", filepath.Join(dir, "nope"), "legacy-admin-token-0123456789", "no such file"},
		{"a file credential with the legacy token", clash, "legacy-admin-token-0123456789", "token of SECKILL_ADMIN_TOKEN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.path, tc.legacy, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load error %v, want it to mention %q", err, tc.want)
			}
		})
	}
	if _, err := Load(empty, "legacy-admin-token-0123456789", nil); err != nil {
		t.Fatalf("an empty file beside the legacy token: %v", err)
	}
	var pathErr *os.PathError
	if _, err := Load(filepath.Join(dir, "nope"), "x", nil); !errors.As(err, &pathErr) {
		t.Fatalf("missing file error %v is not a path error", err)
	}
}

// A reload is held to the rules of the start: a file that leaves no credential at all (an
// emptied file, a half-written one cut before its first line) is refused like one that does
// not parse, the last good set stays in force, and both show in the metrics the alert
// SeckillGatewayAdminTokensReloadFailing watches, read on the scrape itself (an admin
// request is not needed to notice the file changed).
func TestReloadFailsClosed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	t0 := time.Now().Add(-time.Hour)
	writeFile(t, path, line("alice", "alice-token-0123456789"), t0)
	var reported []error
	c, err := Load(path, "", func(err error) { reported = append(reported, err) })
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	c.Register(reg)
	metric := func(name string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				m := mf.GetMetric()[0]
				if m.GetGauge() != nil {
					return m.GetGauge().GetValue()
				}
				return m.GetCounter().GetValue()
			}
		}
		t.Fatalf("no metric %s", name)
		return 0
	}
	const ok, failures = "seckill_gateway_admin_tokens_reload_ok", "seckill_gateway_admin_tokens_reload_failures_total"
	if metric(ok) != 1 || metric(failures) != 0 {
		t.Fatalf("after a good load: ok %v, failures %v", metric(ok), metric(failures))
	}
	writeFile(t, path, "", t0.Add(time.Second))
	// The scrape sees the change first: no admin request has come.
	if metric(ok) != 0 || metric(failures) != 1 {
		t.Fatalf("after the file was emptied: ok %v, failures %v, want 0 and 1", metric(ok), metric(failures))
	}
	if name, _ := c.Authenticate("alice-token-0123456789"); name != "alice" {
		t.Fatalf("an emptied file took effect: alice's token names %q, want the last good set", name)
	}
	if len(reported) != 1 || !strings.Contains(reported[0].Error(), "holds no credential") {
		t.Fatalf("reported %v, want the emptied file once", reported)
	}
	writeFile(t, path, "alice sha256:0123\n", t0.Add(2*time.Second))
	c.Authenticate("alice-token-0123456789")
	if metric(ok) != 0 || metric(failures) != 2 || len(reported) != 2 {
		t.Fatalf("after an unparsable file: ok %v, failures %v, reported %v", metric(ok), metric(failures), reported)
	}
	writeFile(t, path, line("bob", "bob-token-0123456789"), t0.Add(3*time.Second))
	if metric(ok) != 1 || metric(failures) != 2 {
		t.Fatalf("after a good file again: ok %v, failures %v", metric(ok), metric(failures))
	}
	if name, _ := c.Authenticate("bob-token-0123456789"); name != "bob" {
		t.Fatalf("bob's token names %q after the good file", name)
	}

	// Beside the legacy token an emptied file is a valid one (start accepts it too): the file's
	// operators are gone, admin stays.
	writeFile(t, path, line("alice", "alice-token-0123456789"), t0)
	l, err := Load(path, "legacy-admin-token-0123456789", nil)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, "", t0.Add(time.Second))
	if name, _ := l.Authenticate("alice-token-0123456789"); name != "" {
		t.Fatalf("alice's removed token still names %q", name)
	}
}
