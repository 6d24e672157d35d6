package main

import (
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/auth"
)

// The open step's short form, CI-safe: the bench's own gateway-row code (a sale created
// and preheated through the admin API, opening a second after vegeta starts, the whole
// pipeline on its shipped settings) at a low rate, 1,500/s for 3 s over 200 connections
// with a stock of 300, then the sold-out prize's answers, unkeyed and keyed, for a second
// each. It asserts the invariants only, never a timing: every request answered, no 5xx but
// 503 and each 503 with Retry-After, the stock sold out exactly, every 202 an order in
// MySQL and the orders exactly the admitted grabs.
func TestOpenShortFormKeepsTheInvariants(t *testing.T) {
	requireStackEnv(t)
	b := shortBench(t) // builds first: the test's time limit is for the run
	ctx := stacktest.Context(t, 2*time.Minute)
	env, done, err := b.openPipeline(ctx, 200)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	r := openRate{label: "short", name: "the short form", rate: 1500, stock: 300, sellOut: true}
	spec := attackSpec{rate: r.rate, duration: 3 * time.Second, conns: env.conns}
	if spec.tokens, err = env.users(spec.targets()); err != nil {
		t.Fatal(err)
	}
	var k broken
	s, sale, err := b.gatewayRun(ctx, env, spec, r, "the short form", &k)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("open: %d requests, %s, admitted %v, orders %v", s.Extra["requests"], mixOfSample(s), s.Extra["admitted"], s.Extra["orders"])
	for _, key := range []string{"", "short-keyed"} {
		so := attackSpec{rate: r.rate, duration: time.Second, conns: env.conns, keyPrefix: key,
			url: grabURL(env.c.GatewayAddr, sale.Session, sale.Prize), procs: env.procs, rssPid: env.c.Gateway.Pid()}
		if so.tokens, err = env.users(so.targets()); err != nil {
			t.Fatal(err)
		}
		s, err := b.soldOutRun(ctx, env, so, sale, r, fmt.Sprintf("sold-out answers, key %q", key), &k)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("sold out, key %q: %d requests, %s", key, s.Extra["requests"], mixOfSample(s))
	}
	if err := k.err(); err != nil {
		t.Fatal(err)
	}
}

// requireStackEnv skips the test when the stack's variables are not loaded; under CI,
// where make test loads them, their absence fails it (a CI run that skipped its
// integration tests proved nothing, as stacktest says).
func requireStackEnv(t *testing.T) {
	t.Helper()
	var missing []string
	for _, k := range []string{"SECKILL_REDIS_ADDR", "SECKILL_MYSQL_DSN", "SECKILL_KAFKA_BROKERS"} {
		if os.Getenv(k) == "" {
			missing = append(missing, k)
		}
	}
	if len(missing) == 0 {
		return
	}
	msg := fmt.Sprintf("the local stack's variables are not loaded (%s unset): deploy/local/stack up, then "+
		"set -a && source .state/env && set +a", strings.Join(missing, ", "))
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// shortBench is a bench for one test: the stack tests' deployables and vegeta built, a
// JWT secret of its own, the log to t.
func shortBench(t *testing.T) *bench {
	t.Helper()
	raw := make([]byte, 32)
	if _, err := crand.Read(raw); err != nil {
		t.Fatal(err)
	}
	secret := hex.EncodeToString(raw)
	b := &bench{out: testLog{t}, bin: stacktest.Binaries(t), secret: secret,
		signer: auth.NewSigner([]byte(secret), "seckill", "seckill-gateway"),
		client: &http.Client{Timeout: 30 * time.Second}}
	if _, err := b.buildVegeta(); err != nil {
		t.Fatal(err)
	}
	return b
}

// testLog writes the bench's log lines to the test's log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func mixOfSample(s *sample) string {
	var parts []string
	for _, k := range sortedKeys(s.Extra) {
		if kind, ok := strings.CutPrefix(k, "answers_"); ok {
			parts = append(parts, fmt.Sprintf("%s: %v", kind, s.Extra[k]))
		}
	}
	return strings.Join(parts, ", ")
}
