package consoletest

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

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/seckill-pipeline/seckill/internal/harness"
	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/auth"
)

// pipeline is a gateway and a consumer as real processes on a test database and topics of
// their own; the reconciler runs on demand (--once).
type pipeline struct {
	t      *testing.T
	db     *gorm.DB
	rdb    redis.UniversalClient
	public string // http://host:port of the grab API
	admin  string // http://host:port of the admin listener (and the console)
	token  string // the admin token (SECKILL_ADMIN_TOKEN, the credential "admin")
	// operatorToken is the operator's own credential (SECKILL_ADMIN_TOKENS_FILE), named
	// operator: the console signs in with it.
	operatorToken string
	signer        *auth.Signer
	env           map[string]string // what every service shares
	gateway       *harness.Proc
	consumer      *harness.Proc
}

func startPipeline(t *testing.T) *pipeline {
	t.Helper()
	rdb := stacktest.Redis(t)
	dsn, db := stacktest.Migrated(t)
	stacktest.CleanupKeys(t, rdb, db)
	_, topics := stacktest.Kafka(t)
	id := stacktest.ID(t)
	jwtSecret := "console-test-jwt-secret-" + id + id
	p := &pipeline{t: t, db: db, rdb: rdb, token: "console-test-admin-token-" + id, operatorToken: "console-test-" + operator + "-token-" + id,
		signer: auth.NewSigner([]byte(jwtSecret), "seckill", "seckill-gateway"),
		env: map[string]string{
			"SECKILL_MYSQL_DSN":        dsn,
			"SECKILL_TOPIC_PREFIX":     strings.TrimSuffix(topics.Grab.Name, ".seckill.grab"),
			"SECKILL_CONSUMER_GROUP":   "t-orders-" + id,
			"SECKILL_FEEDBACK_GROUP":   "t-feedback-" + id,
			"SECKILL_RECONCILER_LEASE": "t-lease-" + id,
			"SECKILL_ADMIN_TOKEN":      "console-test-admin-token-" + id,
			"SECKILL_JWT_SECRET":       jwtSecret,
		}}
	pub, adm := stacktest.FreeAddr(t), stacktest.FreeAddr(t)
	p.public, p.admin = "http://"+pub, "http://"+adm
	sum := sha256.Sum256([]byte(p.operatorToken))
	tokens := filepath.Join(t.TempDir(), "admin-tokens")
	if err := os.WriteFile(tokens, []byte(operator+" sha256:"+hex.EncodeToString(sum[:])+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p.gateway = p.start("gateway", map[string]string{"SECKILL_GATEWAY_ADDR": pub, "SECKILL_ADMIN_ADDR": adm,
		"SECKILL_ADMIN_TOKENS_FILE": tokens}, p.admin+"/readyz")
	caddr := stacktest.FreeAddr(t)
	p.consumer = p.start("consumer", map[string]string{"SECKILL_CONSUMER_ADDR": caddr, "SECKILL_BATCH_WAIT": "2ms"}, "http://"+caddr+"/readyz")
	return p
}

// start runs a deployable with the shared settings plus extra and waits until ready
// answers 200; a process that exits first fails the test with its output.
func (p *pipeline) start(name string, extra map[string]string, ready string) *harness.Proc {
	p.t.Helper()
	env := map[string]string{}
	for k, v := range p.env {
		env[k] = v
	}
	for k, v := range extra {
		env[k] = v
	}
	proc := stacktest.Start(p.t, name, env)
	deadline := time.Now().Add(30 * time.Second)
	client := &http.Client{Timeout: time.Second}
	for {
		if resp, err := client.Get(ready); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return proc
			}
		}
		if proc.Exited() || time.Now().After(deadline) {
			p.t.Fatalf("%s not ready at %s within 30s (exited: %v); output:\n%s", name, ready, proc.Exited(), proc.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// reconcileOnce runs one reconciler pass and returns its output.
func (p *pipeline) reconcileOnce() string {
	p.t.Helper()
	env := map[string]string{"SECKILL_RECONCILER_ADDR": stacktest.FreeAddr(p.t), "SECKILL_CATCHUP_WAIT": "5s"}
	for k, v := range p.env {
		env[k] = v
	}
	rec := stacktest.Start(p.t, "reconciler", env, "--once")
	if err := rec.Wait(90 * time.Second); err != nil {
		p.t.Fatalf("reconciler --once: %v\n%s", err, rec.Output())
	}
	return rec.Output()
}

// adminCall calls the admin API with the bearer token; out (if not nil) receives the body.
func (p *pipeline) adminCall(method, path string, body, out any) int {
	p.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			p.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, p.admin+path, rd)
	if err != nil {
		p.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+p.token)
	req.Header.Set("Content-Type", "application/json")
	return p.do(req, out)
}

func (p *pipeline) do(req *http.Request, out any) int {
	p.t.Helper()
	resp, err := (&http.Client{Timeout: 15 * time.Second}).Do(req)
	if err != nil {
		p.t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			p.t.Fatalf("%s %s: %d %q: %v", req.Method, req.URL.Path, resp.StatusCode, raw, err)
		}
	}
	return resp.StatusCode
}

// mustAdmin is adminCall that fails the test on any status but want.
func (p *pipeline) mustAdmin(method, path string, body, out any, want int) {
	p.t.Helper()
	var raw json.RawMessage
	code := p.adminCall(method, path, body, &raw)
	if code != want {
		p.t.Fatalf("%s %s: %d %s, want %d", method, path, code, raw, want)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			p.t.Fatalf("%s %s: %s: %v", method, path, raw, err)
		}
	}
}

// grab grabs as user through the public API and returns the status and request id.
func (p *pipeline) grab(user string, session, prize int64) (int, string) {
	p.t.Helper()
	tok, err := p.signer.Token(user, time.Now(), time.Hour)
	if err != nil {
		p.t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", fmt.Sprintf("%s/api/v1/sessions/%d/prizes/%d/grab", p.public, session, prize), nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	var out struct {
		RequestID string `json:"request_id"`
	}
	code := p.do(req, &out)
	return code, out.RequestID
}

// mustGrab grabs and fails the test unless the grab was admitted.
func (p *pipeline) mustGrab(user string, session, prize int64) string {
	p.t.Helper()
	code, id := p.grab(user, session, prize)
	if code != http.StatusAccepted || id == "" {
		p.t.Fatalf("grab by %s of %d/%d: %d (request id %q), want 202", user, session, prize, code, id)
	}
	return id
}

// activity is what the tests create: the ids of its first two sessions and of its prizes
// by name.
type activity struct {
	ID            int64
	Session, Next int64
	Prizes        map[string]int64
}

// createActivity creates an activity of two one-hour sessions, the first starting at start,
// with the given stock per prize name.
func (p *pipeline) createActivity(name string, start time.Time, stock map[string]int) activity {
	p.t.Helper()
	type prize struct {
		Name  string `json:"name"`
		Stock int    `json:"stock"`
	}
	var prizes []prize
	for n, s := range stock {
		prizes = append(prizes, prize{n, s})
	}
	var out struct {
		ID     int64 `json:"id"`
		Prizes []struct {
			ID   int64  `json:"id"`
			Name string `json:"name"`
		} `json:"prizes"`
		Sessions []struct {
			ID int64 `json:"id"`
		} `json:"sessions"`
	}
	p.mustAdmin("POST", "/admin/v1/activities", map[string]any{
		"name": name, "window_start": start.UTC().Format(time.RFC3339), "window_end": start.Add(2 * time.Hour).UTC().Format(time.RFC3339),
		"interval": "1h", "session_length": "1h", "per_user_limit": 2, "prizes": prizes,
	}, &out, http.StatusCreated)
	if len(out.Sessions) < 2 {
		p.t.Fatalf("activity %d has %d sessions, want 2", out.ID, len(out.Sessions))
	}
	a := activity{ID: out.ID, Session: out.Sessions[0].ID, Next: out.Sessions[1].ID, Prizes: map[string]int64{}}
	for _, pr := range out.Prizes {
		a.Prizes[pr.Name] = pr.ID
	}
	return a
}

// waitUntil polls cond every 100 ms until it holds, failing with what() after d.
func waitUntil(t testing.TB, d time.Duration, what func() string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("after %s: %s", d, what())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// poisonedGrab makes a grab the consumer must dead-letter: with the consumer stopped, user
// grabs (Redis admits it, the event waits in Kafka), the session×prize's stock row is
// deleted, and the consumer starts again and finds no stock row. Stopping the consumer
// first makes it deterministic: the gateway's schedule, refreshed from the stock rows every
// second, would refuse a grab made after the delete. restore puts the row back as it was.
func (p *pipeline) poisonedGrab(user string, session, prize int64) (requestID string, restore func()) {
	p.t.Helper()
	if err := p.consumer.Stop(20 * time.Second); err != nil {
		p.t.Fatal(err)
	}
	requestID = p.mustGrab(user, session, prize)
	var row map[string]any
	where := p.db.Table("session_stocks").Where("session_id = ? AND prize_id = ?", session, prize)
	if err := where.Take(&row).Error; err != nil {
		p.t.Fatalf("read stock row %d/%d: %v", session, prize, err)
	}
	if err := p.db.Exec("DELETE FROM session_stocks WHERE session_id = ? AND prize_id = ?", session, prize).Error; err != nil {
		p.t.Fatalf("delete stock row %d/%d: %v", session, prize, err)
	}
	caddr := stacktest.FreeAddr(p.t)
	p.consumer = p.start("consumer", map[string]string{"SECKILL_CONSUMER_ADDR": caddr, "SECKILL_BATCH_WAIT": "2ms"}, "http://"+caddr+"/readyz")
	return requestID, func() {
		p.t.Helper()
		if err := p.db.Table("session_stocks").Create(row).Error; err != nil {
			p.t.Fatalf("restore stock row %d/%d: %v", session, prize, err)
		}
	}
}

// waitCase waits for the open case of kind about requestID and returns its id.
func (p *pipeline) waitCase(t testing.TB, kind, requestID string) int64 {
	t.Helper()
	var id int64
	waitUntil(t, 30*time.Second, func() string {
		return fmt.Sprintf("no %s case for %s; consumer output:\n%s", kind, requestID, p.consumer.Output())
	}, func() bool {
		var ids []int64
		p.db.Table("exception_cases").Where("kind = ? AND request_id = ?", kind, requestID).Pluck("id", &ids)
		if len(ids) == 1 {
			id = ids[0]
		}
		return id != 0
	})
	return id
}
