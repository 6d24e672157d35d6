package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
)

// No secret reaches the log or an error: the gateway started with every secret it can be
// given (from files, as Kubernetes mounts them) logs its settings without them, and each
// refused credential (Redis, MySQL, Kafka) is reported without the password.
func TestNoSecretInLogsOrErrors(t *testing.T) {
	stacktest.Redis(t)
	stacktest.Kafka(t)
	dsn, _ := stacktest.Migrated(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	mysqlPassword := cfg.Passwd
	if mysqlPassword == "" {
		mysqlPassword = stacktest.MySQLConn(t, dsn).Password // the secure profile keeps it beside the DSN
	}
	cfg.Passwd = "" // the password comes from its own file, not the DSN
	id := stacktest.ID(t)
	secrets := map[string]string{
		"SECKILL_ADMIN_TOKEN":    "admin-token-" + id + "-0123456789",
		"SECKILL_JWT_SECRET":     "jwt-secret-" + id + "-0123456789abcdef0123456789",
		"SECKILL_REDIS_PASSWORD": "redis-password-" + id, // Redis's default user takes any password
	}
	if p := stacktest.RedisOptions(t, stacktest.RedisAddr()).Password; p != "" {
		secrets["SECKILL_REDIS_PASSWORD"] = p // the secure profile's user takes only its own
	}
	dir := t.TempDir()
	file := func(name, v string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pub, adm := stacktest.FreeAddr(t), stacktest.FreeAddr(t)
	vars := map[string]string{
		"SECKILL_MYSQL_DSN":           cfg.FormatDSN(),
		"SECKILL_MYSQL_PASSWORD_FILE": file("mysql", mysqlPassword),
		"SECKILL_GATEWAY_ADDR":        pub, "SECKILL_ADMIN_ADDR": adm,
		"SECKILL_LOG_LEVEL": "debug",
	}
	for k, v := range secrets {
		vars[k+"_FILE"] = file(k, v)
	}
	check := func(t *testing.T, what, text string, secrets map[string]string) {
		t.Helper()
		for name, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s shows %s:\n%s", what, name, text)
			}
		}
	}

	t.Run("start-up log", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var out bytes.Buffer
		done := make(chan error, 1)
		go func() { done <- run(ctx, stacktest.Getenv(vars), &out) }()
		exitedEarly(t, done, &out)
		stacktest.WaitHTTP(t, "http://"+adm+"/readyz", 20*time.Second)
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("run: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("gateway did not stop within 20s")
		}
		if !strings.Contains(out.String(), "gateway starting") {
			t.Fatalf("no start-up line in the log:\n%s", out.String())
		}
		check(t, "the log", out.String(), secrets)
	})

	// Each refusal: the error and the log, with a password that must not show.
	refusals := []struct {
		name   string
		extra  map[string]string
		secret string
		want   string
	}{
		{"redis", map[string]string{"SECKILL_REDIS_USERNAME": "nobody-" + id}, secrets["SECKILL_REDIS_PASSWORD"], "WRONGPASS"},
		{"mysql", map[string]string{"SECKILL_MYSQL_PASSWORD_FILE": file("wrong-mysql", "wrong-mysql-"+id)}, "wrong-mysql-" + id, "Access denied"},
		{"kafka", map[string]string{"SECKILL_KAFKA_SASL_MECHANISM": "scram-sha-512", "SECKILL_KAFKA_USERNAME": "gateway",
			"SECKILL_KAFKA_PASSWORD_FILE": file("kafka", "kafka-password-"+id)}, "kafka-password-" + id, "SASL scram-sha-512"},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range vars {
				env[k] = v
			}
			for k, v := range tc.extra {
				env[k] = v
			}
			var out bytes.Buffer
			err := run(stacktest.Context(t, 30*time.Second), stacktest.Getenv(env), &out)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run: %v, want a refusal saying %q", err, tc.want)
			}
			all := map[string]string{"the refused password": tc.secret}
			for k, v := range secrets {
				all[k] = v
			}
			all["the MySQL password"] = mysqlPassword + "@" // as a DSN would show it
			check(t, "the error", err.Error(), all)
			check(t, "the log", out.String(), all)
		})
	}
}
