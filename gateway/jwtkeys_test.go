package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seckill-pipeline/seckill/pkg/auth"
	"github.com/seckill-pipeline/seckill/pkg/config"
)

// The secret files' re-reads: a change is taken at the next read; a current file that is
// missing or too short keeps the secrets in force, reported once per problem and never with
// the secret; a previous file that is absent or empty means no previous secret.
func TestJWTSecretFilesReload(t *testing.T) {
	dir := t.TempDir()
	cur, prev := filepath.Join(dir, "jwt"), filepath.Join(dir, "jwt-previous")
	a, b := "secret-A-0123456789abcdef0123456789", "secret-B-0123456789abcdef0123456789"
	write := func(p, v string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(cur, a+"\n")
	v, err := auth.NewVerifier([]byte(a), "seckill", "seckill-gateway", time.Now)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	s := newJWTSecrets(config.Gateway{JWTSecret: a, JWTSecretFile: cur, JWTSecretPreviousFile: prev}, v, nil, nil, reg,
		slog.New(slog.NewJSONHandler(&logs, nil)))
	tokenOf := func(secret string) string {
		tok, err := auth.NewSigner([]byte(secret), "seckill", "seckill-gateway").Token("alice", time.Now(), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	accepts := func(step, secret string, want bool) {
		t.Helper()
		if _, err := v.User(tokenOf(secret)); (err == nil) != want {
			t.Fatalf("%s: token of %.8s accepted=%v, want %v", step, secret, err == nil, want)
		}
	}

	s.reload(context.Background()) // nothing changed
	accepts("start", a, true)
	write(prev, a)
	write(cur, b)
	s.reload(context.Background())
	accepts("overlap", a, true)
	accepts("overlap", b, true)
	for _, bad := range []func(){
		func() { write(cur, "short") },
		func() { os.Remove(cur) },
	} {
		bad()
		s.reload(context.Background())
		s.reload(context.Background()) // the same problem again: reported once
		accepts("after a bad current file", a, true)
		accepts("after a bad current file", b, true)
	}
	if n := testutil.ToFloat64(s.failures); n != 2 {
		t.Fatalf("reload errors counted %v, want 2 (two problems, each once)", n)
	}
	if strings.Contains(logs.String(), "short") || strings.Contains(logs.String(), "secret-") {
		t.Fatalf("a secret reached the log:\n%s", logs.String())
	}
	write(cur, b)
	write(prev, "")
	s.reload(context.Background())
	accepts("previous emptied", a, false)
	accepts("previous emptied", b, true)
	if err := os.Remove(prev); err != nil {
		t.Fatal(err)
	}
	s.reload(context.Background())
	accepts("previous removed", b, true)
	if n := testutil.ToFloat64(s.failures); n != 2 {
		t.Fatalf("a removed previous file counted as an error: %v", n)
	}
}
