package main

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/stacktest"
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
	resp, err := http.Get("http://" + adm + "/metrics")
	if err == nil && resp.StatusCode == http.StatusOK {
		resp.Body.Close()
		resp, err = http.Get("http://" + pub + "/metrics")
		if err == nil && resp.StatusCode == http.StatusOK {
			t.Fatal("metrics exposed on the public listener")
		}
		resp, err = http.Get("http://" + adm + "/metrics")
	}
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
