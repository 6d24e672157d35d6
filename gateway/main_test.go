package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
)

// The gateway starts against the real stack, answers /healthz and /readyz on both
// listeners, and stops cleanly when its context ends (what SIGTERM does in main).
func TestGatewayStartsAndStops(t *testing.T) {
	stacktest.Redis(t)
	dsn, _ := stacktest.Migrated(t)
	pub, adm := stacktest.FreeAddr(t), stacktest.FreeAddr(t)
	getenv := stacktest.Getenv(map[string]string{
		"SECKILL_MYSQL_DSN":    dsn,
		"SECKILL_GATEWAY_ADDR": pub, "SECKILL_ADMIN_ADDR": adm,
		"SECKILL_ADMIN_TOKEN": "test-admin-token-0123456789",
		"SECKILL_JWT_SECRET":  "test-jwt-secret-0123456789-0123456789",
	})
	ctx, cancel := context.WithCancel(context.Background())
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, getenv, &out) }()
	exitedEarly(t, done, &out)

	for _, addr := range []string{pub, adm} {
		stacktest.WaitHTTP(t, "http://"+addr+"/healthz", 20*time.Second)
		stacktest.WaitHTTP(t, "http://"+addr+"/readyz", 20*time.Second)
	}
	if resp, err := http.Get("http://" + pub + "/metrics"); err != nil || resp.StatusCode == http.StatusOK {
		t.Fatalf("metrics exposed on the public listener: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	req, _ := http.NewRequest("GET", "http://"+adm+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer test-admin-token-0123456789")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("metrics: %v %v", resp, err)
	}
	resp.Body.Close()

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run returned %v; log:\n%s", err, out.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("gateway did not stop within 20s")
	}
}

// exitedEarly fails the test with run's error if it returns during start-up, instead of
// letting a readiness wait time out without saying why.
func exitedEarly(t *testing.T, done chan error, out *bytes.Buffer) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("run returned during start-up: %v\n%s", err, out.String())
	case <-time.After(500 * time.Millisecond):
	}
}

// A database without the schema is refused at start with a clear error (migrations are an
// explicit step, never a side effect of starting).
func TestGatewayRefusesUnmigratedDatabase(t *testing.T) {
	stacktest.Redis(t)
	dsn, _ := stacktest.MySQL(t)
	getenv := stacktest.Getenv(map[string]string{
		"SECKILL_MYSQL_DSN":    dsn,
		"SECKILL_GATEWAY_ADDR": stacktest.FreeAddr(t), "SECKILL_ADMIN_ADDR": stacktest.FreeAddr(t),
		"SECKILL_ADMIN_TOKEN": "test-admin-token-0123456789",
		"SECKILL_JWT_SECRET":  "test-jwt-secret-0123456789-0123456789",
	})
	err := run(context.Background(), getenv, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "schedule") {
		t.Fatalf("run on an unmigrated database: %v", err)
	}
}

func TestGatewayRefusesMissingSecrets(t *testing.T) {
	err := run(context.Background(), func(string) string { return "" }, &bytes.Buffer{})
	if err == nil {
		t.Fatal("gateway started without SECKILL_ADMIN_TOKEN and SECKILL_JWT_SECRET")
	}
}

const testAdminToken = "test-admin-token-0123456789"

// startGateway runs the gateway against the real stack (with extra settings) until the test
// ends, and returns its public and admin addresses once both answer /healthz.
func startGateway(t *testing.T, extra map[string]string) (pub, adm string) {
	t.Helper()
	stacktest.Redis(t)
	dsn, _ := stacktest.Migrated(t)
	pub, adm = stacktest.FreeAddr(t), stacktest.FreeAddr(t)
	vars := map[string]string{
		"SECKILL_MYSQL_DSN":    dsn,
		"SECKILL_GATEWAY_ADDR": pub, "SECKILL_ADMIN_ADDR": adm,
		"SECKILL_ADMIN_TOKEN": testAdminToken,
		"SECKILL_JWT_SECRET":  "test-jwt-secret-0123456789-0123456789",
	}
	for k, v := range extra {
		vars[k] = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, stacktest.Getenv(vars), &out) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("gateway did not stop within 20s")
		}
	})
	exitedEarly(t, done, &out)
	stacktest.WaitHTTP(t, "http://"+pub+"/healthz", 20*time.Second)
	stacktest.WaitHTTP(t, "http://"+adm+"/healthz", 20*time.Second)
	return pub, adm
}

type httpAnswer struct {
	code int
	hdr  http.Header
	raw  string
	body map[string]any
	took time.Duration
}

func call(t *testing.T, method, url, token string) httpAnswer {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	start := time.Now()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := httpAnswer{code: resp.StatusCode, hdr: resp.Header, raw: string(raw), took: time.Since(start)}
	_ = json.Unmarshal(raw, &a.body)
	return a
}

// Every error either listener writes, routing errors included, has the one JSON shape
// ({"error", "message"}); /metrics needs the admin token; the public /readyz is rate limited.
func TestGatewayListenersAnswerOneErrorShape(t *testing.T) {
	pub, adm := startGateway(t, nil)
	for _, tc := range []struct {
		name, method, url, token string
		code                     int
		errCode, allow           string
	}{
		{"public unknown route", "GET", "http://" + pub + "/nope", "", 404, "not_found", ""},
		{"public metrics", "GET", "http://" + pub + "/metrics", "", 404, "not_found", ""},
		{"public wrong method", "GET", "http://" + pub + "/api/v1/sessions/1/prizes/1/grab", "", 405, "method_not_allowed", "POST"},
		{"public wrong method on status", "DELETE", "http://" + pub + "/api/v1/grabs/1-1-abcdefgh", "", 405, "method_not_allowed", "GET"},
		{"admin unknown route", "GET", "http://" + adm + "/nope", testAdminToken, 404, "not_found", ""},
		{"admin wrong method", "DELETE", "http://" + adm + "/admin/v1/activities", testAdminToken, 405, "method_not_allowed", "GET"},
		{"admin metrics without the token", "GET", "http://" + adm + "/metrics", "", 401, "unauthorized", ""},
		{"admin metrics with a wrong token", "GET", "http://" + adm + "/metrics", "wrong-token-0123456789", 401, "unauthorized", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := call(t, tc.method, tc.url, tc.token)
			if a.code != tc.code || a.body["error"] != tc.errCode || a.body["message"] == nil ||
				!strings.HasPrefix(a.hdr.Get("Content-Type"), "application/json") {
				t.Fatalf("%d %.200q (%s), want %d with the JSON error %q", a.code, a.raw, a.hdr.Get("Content-Type"), tc.code, tc.errCode)
			}
			if tc.allow != "" && !strings.Contains(a.hdr.Get("Allow"), tc.allow) {
				t.Fatalf("Allow %q, want it to name %s", a.hdr.Get("Allow"), tc.allow)
			}
		})
	}
	if a := call(t, "GET", "http://"+adm+"/metrics", testAdminToken); a.code != 200 || !strings.Contains(a.raw, "seckill_gateway_inflight_requests") {
		t.Fatalf("metrics with the admin token: %d", a.code)
	}

	limited := 0
	for range 100 {
		a := call(t, "GET", "http://"+pub+"/readyz", "")
		switch {
		case a.code == http.StatusTooManyRequests && a.body["error"] == "rate_limited" && a.hdr.Get("Retry-After") != "":
			limited++
		case a.code != http.StatusOK:
			t.Fatalf("public /readyz: %d %s", a.code, a.raw)
		}
	}
	if limited == 0 {
		t.Fatal("100 back-to-back public /readyz calls from one client were never rate limited")
	}
}

// blackhole accepts TCP connections and never answers: a broker that hangs.
func blackhole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// The public /readyz is cheap (a result is reused for about a second, so a probe flood does
// not become a flood of dependency checks) and says nothing about the inside; the admin
// listener's /readyz names the failing dependency and why.
func TestPublicReadyzIsCheapAndQuiet(t *testing.T) {
	hang := blackhole(t)
	pub, adm := startGateway(t, map[string]string{"SECKILL_KAFKA_BROKERS": hang})

	first := call(t, "GET", "http://"+pub+"/readyz", "")
	if first.code != http.StatusServiceUnavailable {
		t.Fatalf("public /readyz with a hung Kafka: %d %s", first.code, first.raw)
	}
	for _, secret := range []string{hang, "kafka metadata", "deadline", "dial", "i/o timeout"} {
		if strings.Contains(first.raw, secret) {
			t.Fatalf("public /readyz leaks %q: %s", secret, first.raw)
		}
	}
	if first.body["error"] == nil {
		t.Fatalf("public /readyz 503 is not the JSON error shape: %s", first.raw)
	}
	second := call(t, "GET", "http://"+pub+"/readyz", "")
	if second.code != http.StatusServiceUnavailable || second.took > 300*time.Millisecond {
		t.Fatalf("second public /readyz within a second: %d after %s, want the cached 503 at once", second.code, second.took)
	}

	detail := call(t, "GET", "http://"+adm+"/readyz", "")
	if reason, _ := detail.body["kafka"].(string); detail.code != http.StatusServiceUnavailable || reason == "" || reason == "ok" {
		t.Fatalf("admin /readyz: %d %s, want the failing dependency named", detail.code, detail.raw)
	}
}
