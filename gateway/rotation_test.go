package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/auth"
)

// The rotations of docs/operators.md (Rotating secrets), on a real gateway while a crowd
// grabs and an operator's script polls the admin API:
//
//   - the JWT secret: the old secret becomes the previous one and a new one the current one
//     (files re-read while the gateway runs); the identity provider switches to the new secret
//     once the gateway accepts it; clients holding old tokens keep working through the
//     overlap; the previous secret is taken away and its tokens are refused from then on,
//     cached or not;
//   - an operator's admin token: the new line beside the old one under the same name, the
//     script switches, the old line goes.
//
// No grab with a token valid at that moment is refused (every one answers 202) and no admin
// call with a token in the file at that moment gets a 401.
func TestSecretRotationDuringACrowd(t *testing.T) {
	op := stacktest.NewOpenPrize(t, 1_000_000, 1_000_000, 1)
	_, topics := stacktest.Kafka(t)
	dir := t.TempDir()
	secretA := []byte("rotation-secret-A-" + stacktest.ID(t) + "-0123456789abcdef")
	secretB := []byte("rotation-secret-B-" + stacktest.ID(t) + "-0123456789abcdef")
	jwtFile, prevFile, tokens := filepath.Join(dir, "jwt-secret"), filepath.Join(dir, "jwt-secret-previous"), filepath.Join(dir, "admin-tokens")
	write := func(path string, body []byte) {
		t.Helper()
		// A new file renamed into place, as Kubernetes swaps a mounted Secret: a reader never
		// sees half a secret.
		tmp := path + ".new"
		if err := os.WriteFile(tmp, body, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	mtime := time.Now().Add(-time.Hour)
	writeTokens := func(lines map[string][]string) {
		t.Helper()
		var b strings.Builder
		for name, toks := range lines {
			for _, tok := range toks {
				sum := sha256.Sum256([]byte(tok))
				fmt.Fprintf(&b, "%s sha256:%s\n", name, hex.EncodeToString(sum[:]))
			}
		}
		write(tokens, []byte(b.String()))
		// The credentials file is re-read when its modification time or size changes: move
		// the time on explicitly, a coarse file system clock could keep it.
		mtime = mtime.Add(time.Second)
		if err := os.Chtimes(tokens, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	oldAdmin, newAdmin := "ops-script-old-"+stacktest.ID(t), "ops-script-new-"+stacktest.ID(t)
	write(jwtFile, append(secretA, '\n'))
	writeTokens(map[string][]string{"opsbot": {oldAdmin}})

	pub, adm := startGateway(t, map[string]string{"SECKILL_MYSQL_DSN": op.DSN,
		"SECKILL_TOPIC_PREFIX":             strings.TrimSuffix(topics.Grab.Name, ".seckill.grab"),
		"SECKILL_JWT_SECRET":               "",
		"SECKILL_JWT_SECRET_FILE":          jwtFile,
		"SECKILL_JWT_SECRET_PREVIOUS_FILE": prevFile, // absent: no previous secret yet
		"SECKILL_ADMIN_TOKENS_FILE":        tokens,
		"SECKILL_RATE_PER_USER":            "0", "SECKILL_RATE_PER_IP": "0",
	})
	signerA := auth.NewSigner(secretA, "seckill", "seckill-gateway")
	signerB := auth.NewSigner(secretB, "seckill", "seckill-gateway")
	token := func(s *auth.Signer, user string) string {
		tok, err := s.Token(user, time.Now(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	client := &http.Client{Timeout: 10 * time.Second}
	do := func(method, url, tok string) (int, error) {
		req, _ := http.NewRequest(method, url, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		if method == http.MethodPost {
			req.Header.Set("Idempotency-Key", fmt.Sprintf("k%012d", seq.Add(1)))
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	grabURL := fmt.Sprintf("http://%s/api/v1/sessions/%d/prizes/%d/grab", pub, op.SessionID, op.PrizeID)
	// accepted tells whether the gateway takes tok: a status poll of a grab nobody made is a
	// 404 for a valid token and a 401 for any other.
	accepted := func(tok string) bool {
		code, err := do(http.MethodGet, "http://"+pub+"/api/v1/grabs/"+fmt.Sprintf("%d-%d-nosuchgrab", op.SessionID, op.PrizeID), tok)
		if err != nil {
			t.Fatal(err)
		}
		if code != http.StatusNotFound && code != http.StatusUnauthorized {
			t.Fatalf("probe answered %d", code)
		}
		return code == http.StatusNotFound
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); !cond(); {
			if time.Now().After(deadline) {
				t.Fatalf("the gateway did not %s within 15 s", what)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// The crowd: each click a new user with a token from the identity provider's signer in
	// force; a few holders of old tokens (issued before the switch) keep clicking through
	// the overlap. The ops script polls the admin API with its token in force.
	var idp atomic.Pointer[auth.Signer]
	idp.Store(signerA)
	var adminTok atomic.Pointer[string]
	adminTok.Store(&oldAdmin)
	var oldHolders atomic.Bool
	oldHolders.Store(true)
	oldTokens := make([]string, 8)
	for i := range oldTokens {
		oldTokens[i] = token(signerA, fmt.Sprintf("holder-%d", i))
	}
	var mu sync.Mutex
	var failures []string
	var grabsA, grabsB, oldGrabs, adminCalls atomic.Int64
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(failures) < 20 {
			failures = append(failures, fmt.Sprintf(format, args...))
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var users atomic.Int64
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if w < 2 && oldHolders.Load() {
					// A holder of an old token polls its grabs (the same token, so cached).
					code, err := do(http.MethodGet, "http://"+pub+"/api/v1/grabs/"+fmt.Sprintf("%d-%d-nosuchgrab", op.SessionID, op.PrizeID), oldTokens[(w*7+n)%len(oldTokens)])
					if err != nil || code != http.StatusNotFound {
						fail("old token holder: %d %v", code, err)
					}
					oldGrabs.Add(1)
					continue
				}
				s := idp.Load()
				code, err := do(http.MethodPost, grabURL, token(s, fmt.Sprintf("u%d", users.Add(1))))
				if err != nil || code != http.StatusAccepted {
					fail("grab with a token of secret %s: %d %v", map[bool]string{true: "A", false: "B"}[s == signerA], code, err)
				}
				if s == signerA {
					grabsA.Add(1)
				} else {
					grabsB.Add(1)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			tok := *adminTok.Load()
			code, err := do(http.MethodGet, "http://"+adm+"/admin/v1/activities", tok)
			if err != nil || code != http.StatusOK {
				fail("admin call with the token in force: %d %v", code, err)
			}
			adminCalls.Add(1)
		}
	}()
	progress := func(c *atomic.Int64, n int64) {
		t.Helper()
		waitFor(fmt.Sprintf("serve %d more requests", n), func() bool { return c.Load() >= n })
	}
	progress(&grabsA, 200)

	// 1. The JWT rotation starts: previous = A, then current = B (in Kubernetes one Secret
	// update writes both at once).
	write(prevFile, secretA)
	write(jwtFile, secretB)
	probeB := token(signerB, "probe")
	waitFor("accept the new secret", func() bool { return accepted(probeB) })
	// 2. The identity provider switches to B; holders of A tokens go on.
	idp.Store(signerB)
	progress(&grabsB, 200)
	atOverlap := oldGrabs.Load()
	progress(&oldGrabs, atOverlap+50)

	// 3. The ops script's admin token: the new line beside the old one, then the switch,
	// then the old line goes, and is refused from then on.
	writeTokens(map[string][]string{"opsbot": {oldAdmin, newAdmin}})
	adminTok.Store(&newAdmin)
	calls := adminCalls.Load()
	progress(&adminCalls, calls+20)
	writeTokens(map[string][]string{"opsbot": {newAdmin}})
	if code, err := do(http.MethodGet, "http://"+adm+"/admin/v1/activities", oldAdmin); err != nil || code != http.StatusUnauthorized {
		t.Fatalf("the removed admin token answered %d %v, want 401", code, err)
	}
	calls = adminCalls.Load()
	progress(&adminCalls, calls+20)

	// 4. The overlap ends: the old tokens' holders are gone (expired), the previous secret is
	// taken away, and an A token is refused, even one the gateway had cached.
	oldHolders.Store(false)
	write(prevFile, nil) // an empty file: no previous secret (so is a removed one)
	waitFor("refuse the previous secret's tokens", func() bool { return !accepted(oldTokens[0]) })
	if err := os.Remove(prevFile); err != nil {
		t.Fatal(err)
	}
	b := grabsB.Load()
	progress(&grabsB, b+200)
	close(stop)
	wg.Wait()

	if len(failures) > 0 {
		t.Fatalf("refused during the rotations:\n%s", strings.Join(failures, "\n"))
	}
	if accepted(oldTokens[1]) || !accepted(probeB) {
		t.Fatal("after the rotation: an A token accepted or the B token refused")
	}
	metrics := call(t, "GET", "http://"+adm+"/metrics", newAdmin).raw
	for _, want := range []string{"seckill_gateway_jwt_previous_secret 0", "seckill_gateway_secret_reload_errors_total 0"} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(metrics, "seckill_gateway_jwt_previous_verified_total 0\n") {
		t.Error("seckill_gateway_jwt_previous_verified_total is 0: no token was verified with the previous secret")
	}
	t.Logf("grabs with A tokens %d, with B tokens %d, old-token polls %d, admin calls %d", grabsA.Load(), grabsB.Load(), oldGrabs.Load(), adminCalls.Load())
}

var seq atomic.Int64
