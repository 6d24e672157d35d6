package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seckill-pipeline/seckill/internal/certtest"
)

// writeFile writes content to a file in a test directory and returns its path.
func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Every secret can come from NAME_FILE (a mounted Kubernetes secret, trailing newline
// trimmed); both set is refused naming both; a file that cannot be read is refused naming
// the variable and the path, never the content.
func TestSecretsFromFiles(t *testing.T) {
	base := map[string]string{
		"SECKILL_ADMIN_TOKEN": "0123456789abcdef",
		"SECKILL_JWT_SECRET":  "0123456789abcdef0123456789abcdef",
	}
	env := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				delete(m, kv[i])
				continue
			}
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	const content = "s3cret-from-a-file-0123456789abcdef"
	file := writeFile(t, content+"\n")
	unreadable := filepath.Join(t.TempDir(), "missing")
	tests := []struct {
		name    string
		env     map[string]string
		check   func(Gateway) string // a problem, or ""
		wantErr []string             // substrings of the error; nil means success
	}{
		{"admin token from a file", env("SECKILL_ADMIN_TOKEN", "", "SECKILL_ADMIN_TOKEN_FILE", file),
			func(g Gateway) string { return want(g.AdminToken, content) }, nil},
		{"jwt secret from a file", env("SECKILL_JWT_SECRET", "", "SECKILL_JWT_SECRET_FILE", file),
			func(g Gateway) string { return want(g.JWTSecret, content) }, nil},
		{"redis password from a file", env("SECKILL_REDIS_PASSWORD_FILE", file),
			func(g Gateway) string { return want(g.RedisPassword, content) }, nil},
		{"mysql password from a file", env("SECKILL_MYSQL_PASSWORD_FILE", file),
			func(g Gateway) string { return want(g.MySQL().Password, content) }, nil},
		{"mysql dsn from a file", env("SECKILL_MYSQL_DSN_FILE", writeFile(t, DefaultMySQLDSN+"\r\n")),
			func(g Gateway) string { return want(g.MySQLDSN, DefaultMySQLDSN) }, nil},
		{"migrate password from a file", env("SECKILL_MYSQL_MIGRATE_DSN", "ddl@tcp(127.0.0.1:1)/d?parseTime=true", "SECKILL_MYSQL_MIGRATE_PASSWORD_FILE", file),
			func(g Gateway) string { return want(g.MySQLMigrate().Password, content) }, nil},
		{"kafka password from a file", env("SECKILL_KAFKA_SASL_MECHANISM", "scram-sha-512", "SECKILL_KAFKA_USERNAME", "gateway", "SECKILL_KAFKA_PASSWORD_FILE", file),
			func(g Gateway) string { return want(g.Kafka.Principal(), "User:gateway") }, nil},
		{"both set", env("SECKILL_JWT_SECRET_FILE", file),
			nil, []string{"SECKILL_JWT_SECRET and SECKILL_JWT_SECRET_FILE are both set"}},
		{"unreadable file", env("SECKILL_REDIS_PASSWORD_FILE", unreadable),
			nil, []string{"SECKILL_REDIS_PASSWORD_FILE=" + unreadable, "no such file"}},
		{"empty file", env("SECKILL_ADMIN_TOKEN", "", "SECKILL_ADMIN_TOKEN_FILE", writeFile(t, "\n")),
			nil, []string{"SECKILL_ADMIN_TOKEN_FILE=", "empty"}},
		{"short secret from a file", env("SECKILL_JWT_SECRET", "", "SECKILL_JWT_SECRET_FILE", writeFile(t, "short\n")),
			nil, []string{"SECKILL_JWT_SECRET must be at least 32 bytes"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, err := LoadGateway(getenv(tc.env))
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if p := tc.check(g); p != "" {
					t.Fatal(p)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if strings.Contains(err.Error(), content) || strings.Contains(err.Error(), "short") && !strings.Contains(err.Error(), "at least") {
				t.Errorf("error shows a secret: %q", err)
			}
		})
	}
}

func want(got, want string) string {
	if got != want {
		return "got " + got + ", want " + want
	}
	return ""
}

// TLS, SASL and the MySQL users: what a team sets is read and checked at start-up, and
// the open local stack's defaults need nothing.
func TestConnectionSettings(t *testing.T) {
	ca := certtest.NewCA(t).CAFile(t)
	base := map[string]string{
		"SECKILL_ADMIN_TOKEN": "0123456789abcdef",
		"SECKILL_JWT_SECRET":  "0123456789abcdef0123456789abcdef",
	}
	env := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	tests := []struct {
		name    string
		env     map[string]string
		check   func(Gateway) string
		wantErr string
	}{
		{"defaults: plaintext, no auth, migrate as the service user", env(), func(g Gateway) string {
			if g.RedisTLS != nil || g.MySQLTLS != nil || g.Kafka.Transport() != nil || g.Kafka.Dialer() != nil {
				return "TLS or SASL on by default"
			}
			return want(g.MySQLMigrate().DSN, DefaultMySQLDSN)
		}, ""},
		{"redis acl user over tls", env("SECKILL_REDIS_USERNAME", "gateway", "SECKILL_REDIS_TLS", "true", "SECKILL_REDIS_CA_FILE", ca, "SECKILL_REDIS_TLS_SERVER_NAME", "redis.internal"),
			func(g Gateway) string {
				o := g.Redis()
				if o.TLS == nil || o.TLS.RootCAs == nil || o.TLS.ServerName != "redis.internal" || o.Username != "gateway" {
					return "redis options not as set"
				}
				return ""
			}, ""},
		{"redis ca without tls", env("SECKILL_REDIS_CA_FILE", ca), nil, "without SECKILL_REDIS_TLS=true"},
		{"redis ca file missing", env("SECKILL_REDIS_TLS", "true", "SECKILL_REDIS_CA_FILE", "/nonexistent/ca.pem"), nil, "/nonexistent/ca.pem"},
		{"redis ca file not pem", env("SECKILL_REDIS_TLS", "true", "SECKILL_REDIS_CA_FILE", writeFile(t, "not a certificate")), nil, "no PEM certificate"},
		{"client cert without key", env("SECKILL_KAFKA_TLS", "true", "SECKILL_KAFKA_CERT_FILE", ca), nil, "both its certificate file and its key file"},
		{"kafka scram over tls", env("SECKILL_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512", "SECKILL_KAFKA_USERNAME", "gateway", "SECKILL_KAFKA_PASSWORD", "pw",
			"SECKILL_KAFKA_TLS", "true", "SECKILL_KAFKA_CA_FILE", ca), func(g Gateway) string {
			if g.Kafka.Transport() == nil || g.Kafka.Transport().SASL == nil || g.Kafka.Transport().TLS == nil || g.Kafka.Dialer().SASLMechanism == nil {
				return "kafka transport without SASL or TLS"
			}
			return ""
		}, ""},
		{"kafka plain", env("SECKILL_KAFKA_SASL_MECHANISM", "plain", "SECKILL_KAFKA_USERNAME", "u", "SECKILL_KAFKA_PASSWORD", "pw"), nil, ""},
		{"kafka scram-sha-256", env("SECKILL_KAFKA_SASL_MECHANISM", "scram-sha-256", "SECKILL_KAFKA_USERNAME", "u", "SECKILL_KAFKA_PASSWORD", "pw"), nil, ""},
		{"kafka unknown mechanism", env("SECKILL_KAFKA_SASL_MECHANISM", "gssapi"), nil, `"gssapi": want none, plain`},
		{"kafka scram without password", env("SECKILL_KAFKA_SASL_MECHANISM", "scram-sha-512", "SECKILL_KAFKA_USERNAME", "u"), nil, "needs a user and a password"},
		{"kafka password without mechanism", env("SECKILL_KAFKA_PASSWORD", "pw"), nil, "mechanism is none"},
		{"mysql tls and a tls= in the dsn", env("SECKILL_MYSQL_TLS", "true", "SECKILL_MYSQL_CA_FILE", ca,
			"SECKILL_MYSQL_DSN", "u@tcp(h:1)/d?parseTime=true&clientFoundRows=true&tls=skip-verify"), nil, "remove it from the DSN"},
		{"mysql password kept out of the dsn", env("SECKILL_MYSQL_DSN", "svc@tcp(h:1)/d?parseTime=true&clientFoundRows=true", "SECKILL_MYSQL_PASSWORD", "pw",
			"SECKILL_MYSQL_TLS", "true", "SECKILL_MYSQL_CA_FILE", ca, "SECKILL_MYSQL_MIGRATE_DSN", "ddl@tcp(h:1)/d?parseTime=true", "SECKILL_MYSQL_MIGRATE_PASSWORD", "ddlpw"),
			func(g Gateway) string {
				if c := g.MySQL(); c.Password != "pw" || c.TLS == nil {
					return "service connection not as set"
				}
				if c := g.MySQLMigrate(); c.Password != "ddlpw" || c.TLS == nil || !strings.HasPrefix(c.DSN, "ddl@") {
					return "migrate connection not as set"
				}
				return ""
			}, ""},
		{"unparsable migrate dsn", env("SECKILL_MYSQL_MIGRATE_DSN", "nonsense"), nil, "SECKILL_MYSQL_MIGRATE_DSN"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, err := LoadGateway(getenv(tc.env))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want it to mention %q", err, tc.wantErr)
			case tc.wantErr == "" && tc.check != nil:
				if p := tc.check(g); p != "" {
					t.Fatal(p)
				}
			}
		})
	}
}
