package contractfuzz

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/internal/harness"
	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/auth"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

var (
	schemathesis = flag.String("schemathesis", "", "the Schemathesis CLI to run (make test passes the lint venv's); "+
		"empty: the test is skipped")
	seed = flag.Int("seed", 0, "Schemathesis' random seed (--seed); 0: a fresh one each run, printed with the command "+
		"that replays it (a failure reproduces with the same seed)")
	examples = flag.Int("examples", defaultExamples, "test cases per API operation and phase (--max-examples)")
)

const defaultExamples = 25

// runSeed is the seed of this run: the one given, or else a fresh one from draw. A fixed
// default would replay the same cases every run and never look further (it never drew the
// 0000-00-00T00:00:00Z the admin document once admitted and the gateway refuses).
func runSeed(given int, draw func() uint32) int {
	if given != 0 {
		return given
	}
	// Never 0, which would mean "draw one" again when replayed.
	return int(draw()%(1<<31-1)) + 1
}

// replay is the command that runs the fuzzer again with seed and examples, the make target
// first and then the go test command it runs (for a stack already up).
func replay(seed, examples int) string {
	mk, flags := fmt.Sprintf("make contract-fuzz SEED=%d", seed), fmt.Sprintf("-seed %d", seed)
	if examples != defaultExamples {
		mk += fmt.Sprintf(" EXAMPLES=%d", examples)
		flags += fmt.Sprintf(" -examples %d", examples)
	}
	return mk + " (or, with the stack up: set -a && source .state/env && set +a && go test -count=1 -timeout 15m " +
		"-run '^TestContractFuzz$' ./internal/contractfuzz -schemathesis ~/.cache/seckill/lint-venv/bin/schemathesis " + flags + ")"
}

// TestContractFuzz runs Schemathesis with every check against both listeners of a real
// gateway that has an activity to show: an open session with stock in Redis, upcoming
// sessions (one preheated), a closed one, and exception cases. Any failure fails the test.
// Each run draws a fresh seed unless -seed names one; the seed and the command that replays
// the run are printed at the start and again with a failure (Schemathesis adds a curl
// command per failing case).
func TestContractFuzz(t *testing.T) {
	if *schemathesis == "" {
		t.Skip("no -schemathesis: make test runs this test as its own step with the lint venv's Schemathesis")
	}
	bin, err := exec.LookPath(*schemathesis)
	if err != nil {
		t.Fatalf("schemathesis %q: %v (make lint installs it into its venv)", *schemathesis, err)
	}
	seed := runSeed(*seed, rand.Uint32)
	t.Logf("schemathesis seed %d; replay: %s", seed, replay(seed, *examples))
	g := startGateway(t)
	known := g.seed(t)
	cookie := g.consoleLogin(t)

	root := harness.Root()
	adminSettings, err := os.ReadFile(filepath.Join(root, "internal", "contractfuzz", "schemathesis-admin.toml"))
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{"openapi-admin.yaml": string(adminSettings)}
	for _, run := range []struct {
		name, doc, url string
		auth           string // TOML: the credentials, by security scheme of the document
		rateLimit      string // the public listener limits each user to 5 grabs or polls a second
	}{
		{"public", "openapi-public.yaml", g.public, fmt.Sprintf("[auth.openapi.user]\nbearer = %q\n", g.userToken(t, "fuzz-user")), "4/s"},
		{"admin with the bearer token", "openapi-admin.yaml", g.admin, fmt.Sprintf("[auth.openapi.admin]\nbearer = %q\n", g.token), ""},
		{"admin as the console", "openapi-admin.yaml", g.admin,
			fmt.Sprintf("[auth.openapi.console]\napi_key = %q\n[auth.openapi.consoleGuard]\napi_key = \"1\"\n", cookie), ""},
	} {
		t.Run(run.name, func(t *testing.T) {
			// Schemathesis writes its reports and caches under the working directory.
			dir := t.TempDir()
			config := filepath.Join(dir, "schemathesis.toml")
			if err := os.WriteFile(config, []byte(run.auth+"\n"+settings[run.doc]+known[run.doc]), 0o600); err != nil {
				t.Fatal(err)
			}
			args := []string{"--config-file", config, "--no-color", "run", filepath.Join(root, "docs", "api", run.doc),
				"--url", run.url, "--checks", "all", "--seed", fmt.Sprint(seed), "--max-examples", fmt.Sprint(*examples),
				"--workers", "1", "--request-timeout", "10", "--generation-database", "none"}
			if run.rateLimit != "" {
				args = append(args, "--rate-limit", run.rateLimit)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, args...)
			cmd.Dir = dir
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			start := time.Now()
			err := cmd.Run()
			t.Logf("schemathesis %s (%s, %s):\n%s", run.doc, run.name, time.Since(start).Round(time.Second), out.String())
			if err != nil {
				t.Fatalf("schemathesis against %s (%s) found failures or could not run: %v (seed %d; replay: %s)",
					run.doc, run.name, err, seed, replay(seed, *examples))
			}
		})
	}
	if t.Failed() {
		t.Logf("gateway output:\n%s", g.proc.Output())
	}
}

// gateway is a real gateway process on a test database and topics of its own.
type gateway struct {
	public, admin string // http://host:port
	token         string // the admin token
	signer        *auth.Signer
	proc          *harness.Proc
	db            *store.Exceptions
	gate          *stock.Gate
	client        *http.Client
}

func startGateway(t *testing.T) *gateway {
	t.Helper()
	rdb := stacktest.Redis(t)
	dsn, db := stacktest.Migrated(t)
	stacktest.CleanupKeys(t, rdb, db)
	_, topics := stacktest.Kafka(t)
	id := stacktest.ID(t)
	jwtSecret := "contract-fuzz-jwt-secret-" + id + id
	pub, adm := stacktest.FreeAddr(t), stacktest.FreeAddr(t)
	g := &gateway{public: "http://" + pub, admin: "http://" + adm, token: "contract-fuzz-admin-token-" + id,
		signer: auth.NewSigner([]byte(jwtSecret), "seckill", "seckill-gateway"), db: store.NewExceptions(db),
		client: &http.Client{Timeout: 15 * time.Second}}
	gate, err := stock.NewGate(stacktest.Context(t, 10*time.Second), rdb)
	if err != nil {
		t.Fatal(err)
	}
	g.gate = gate
	g.proc = stacktest.Start(t, "gateway", map[string]string{
		"SECKILL_MYSQL_DSN":    dsn,
		"SECKILL_TOPIC_PREFIX": strings.TrimSuffix(topics.Grab.Name, ".seckill.grab"),
		"SECKILL_ADMIN_TOKEN":  g.token,
		"SECKILL_JWT_SECRET":   jwtSecret,
		"SECKILL_GATEWAY_ADDR": pub,
		"SECKILL_ADMIN_ADDR":   adm,
		// Console sign-ins are limited per address (10 a minute by default, a documented
		// 429): the fuzzer signs in far more often, and should reach the sign-in's own
		// answers rather than the limit's.
		"SECKILL_CONSOLE_LOGIN_RATE": "1000000",
		// Wrong bearer tokens lock a client out (a documented 429 on every bearer route):
		// the fuzzer sends wrong ones on purpose, and after ten every answer would be the
		// lockout's, not the routes'.
		"SECKILL_ADMIN_AUTH_FAILURES": "0",
	})
	deadline := time.Now().Add(30 * time.Second)
	for _, ready := range []string{g.public + "/readyz", g.admin + "/readyz"} {
		for {
			resp, err := g.client.Get(ready)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if g.proc.Exited() || time.Now().After(deadline) {
				t.Fatalf("gateway not ready at %s within 30s (exited: %v); output:\n%s", ready, g.proc.Exited(), g.proc.Output())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return g
}

func (g *gateway) userToken(t *testing.T, user string) string {
	t.Helper()
	tok, err := g.signer.Token(user, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// call sends one admin request with the bearer token and decodes the answer into out.
func (g *gateway) call(t *testing.T, method, path string, body any, want int, out any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, g.admin+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+g.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, raw, want)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
	}
}

// seed gives the fuzzer something to find: an activity whose first session is open with
// its stock loaded, the next preheated, the third closed, the rest upcoming, and open
// exception cases about it. It returns Schemathesis settings (TOML), by document, that point
// the operations no other answer links to at these ids, so their fuzzing reaches past the 404.
func (g *gateway) seed(t *testing.T) map[string]string {
	t.Helper()
	ctx := stacktest.Context(t, 30*time.Second)
	start := time.Now().UTC().Add(-time.Minute).Truncate(time.Second)
	var act struct {
		ID     int64 `json:"id"`
		Prizes []struct {
			ID int64 `json:"id"`
		} `json:"prizes"`
		Sessions []struct {
			ID int64 `json:"id"`
		} `json:"sessions"`
	}
	g.call(t, "POST", "/admin/v1/activities", map[string]any{"name": "fuzzed sale",
		"window_start": start.Format(time.RFC3339), "window_end": start.Add(4 * time.Hour).Format(time.RFC3339),
		"interval": "30m", "session_length": "20m", "per_user_limit": 2, "payment_timeout": "15m",
		"prizes": []map[string]any{{"name": "phone", "stock": 1000}, {"name": "case", "stock": 1000}}}, http.StatusCreated, &act)
	open, next, closed := act.Sessions[0].ID, act.Sessions[1].ID, act.Sessions[2].ID
	var loads []seckill.Stock
	for _, p := range act.Prizes {
		loads = append(loads, seckill.Stock{SessionID: open, PrizeID: p.ID, Total: 1000, Left: 1000, PerUserLimit: 2})
	}
	if _, err := g.gate.Load(ctx, loads, start.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	g.call(t, "POST", fmt.Sprintf("/admin/v1/sessions/%d/preheat", next), nil, http.StatusOK, nil)
	g.call(t, "POST", fmt.Sprintf("/admin/v1/sessions/%d/close", closed), nil, http.StatusOK, nil)
	p := act.Prizes[0].ID
	if err := g.db.Record(ctx, time.Now(),
		store.CaseReport{Kind: seckill.CaseDriftUncorrected, Key: fmt.Sprintf("%d:%d", open, p), SessionID: open, PrizeID: p,
			Detail: "redis left 3, expected 1, uncorrected for 3 runs"},
		store.CaseReport{Kind: seckill.CaseAdmittedRejected, Key: seckill.RequestID(open, p, "fuzz-key-0001"), SessionID: open,
			PrizeID: p, RequestID: seckill.RequestID(open, p, "fuzz-key-0001"), UserID: "fuzz-user", Detail: "sold out in MySQL"},
	); err != nil {
		t.Fatal(err)
	}
	cases, err := g.db.List(ctx, store.CaseFilter{Limit: 10})
	if err != nil || len(cases) != 2 {
		t.Fatalf("seeded cases: %v %v", cases, err)
	}
	var admin strings.Builder
	for i, op := range []string{"replayCase", "resolveCase", "dismissCase"} {
		fmt.Fprintf(&admin, "\n[[operations]]\ninclude-operation-id = %q\nparameters = { \"path.id\" = %d }\n", op, cases[i%2].ID)
	}
	fmt.Fprintf(&admin, "\n[[operations]]\ninclude-operation-id = \"adjustStock\"\nparameters = { \"path.id\" = %d, \"path.prize\" = %d }\n",
		act.Sessions[3].ID, act.Prizes[1].ID)
	fmt.Fprintf(&admin, "\n[[operations]]\ninclude-operation-id = \"getPrize\"\nparameters = { \"path.id\" = %d, \"path.prize\" = %d }\n",
		open, act.Prizes[0].ID)
	// Grabs on the open session: admitted, then the per-user limit, sold out never (1,000).
	public := fmt.Sprintf("\n[[operations]]\ninclude-operation-id = \"grab\"\nparameters = { \"path.session\" = %d, \"path.prize\" = %d }\n",
		open, act.Prizes[0].ID)
	return map[string]string{"openapi-admin.yaml": admin.String(), "openapi-public.yaml": public}
}

// consoleLogin signs in to the console as an operator would and returns the session
// cookie's value.
func (g *gateway) consoleLogin(t *testing.T) string {
	t.Helper()
	req, err := http.NewRequest("POST", g.admin+"/console/login",
		strings.NewReader(fmt.Sprintf(`{"token": %q, "name": "fuzzer"}`, g.token)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	for _, c := range resp.Cookies() {
		if c.Name == "seckill_console" && c.Value != "" {
			return c.Value
		}
	}
	raw, _ := io.ReadAll(resp.Body)
	t.Fatalf("console login: %d %s, no session cookie", resp.StatusCode, raw)
	return ""
}
