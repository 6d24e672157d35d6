package securetest

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/seckill-pipeline/seckill/internal/harness"
	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/config"
	"github.com/seckill-pipeline/seckill/pkg/event"
)

// profile is the secure profile's state folder, from its env file; the test is skipped
// without SECKILL_SECURE=1 and fails when it is set but a file the profile makes is missing.
func profile(t *testing.T) string {
	t.Helper()
	if os.Getenv("SECKILL_SECURE") != "1" {
		t.Skip("the secure profile's variables are not loaded (deploy/local/stack up --profile secure; source .state/secure/env)")
	}
	dir := os.Getenv("SECKILL_SECURE_DIR")
	for _, f := range []string{"certs/ca.pem", "certs/other-ca.pem", "secrets/redis-gateway", "secrets/kafka-gateway",
		"secrets/kafka-consumer", "secrets/mysql-app", "secrets/mysql-migrate"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatalf("SECKILL_SECURE=1 but the secure profile's %s is missing: %v", f, err)
		}
	}
	return dir
}

// The topics' metadata (kafkainit's check of partitions and replication after creating
// them) goes through the admin's SASL and TLS transport, not kafka-go's plaintext default.
func TestAdminDescribesTopicsOnSecuredBrokers(t *testing.T) {
	dir := profile(t)
	// As the admin principal, which kafkainit runs as (the pipeline's topics are not the
	// tests' user's).
	sec, err := config.LoadKafkaSecurity(stacktest.Getenv(map[string]string{
		"SECKILL_KAFKA_USERNAME": "admin", "SECKILL_KAFKA_PASSWORD_FILE": filepath.Join(dir, "secrets", "kafka-admin")}))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := event.NewAdmin(stacktest.KafkaBrokers(), event.AdminSecurity(sec))
	if err != nil {
		t.Fatal(err)
	}
	states, err := admin.Describe(stacktest.Context(t, 30*time.Second), event.DefaultTopics("").All()...)
	if err != nil {
		t.Fatalf("describe the pipeline's topics as %s: %v", sec.Principal(), err)
	}
	for _, s := range states {
		if len(s.Partitions) == 0 || !strings.HasPrefix(s.Name, "seckill.") {
			t.Errorf("topic %+v: want its partitions", s)
		}
	}
}

// serviceEnv is how service runs on the secure profile in production: as its own Redis
// user, Kafka principal and the DML MySQL user, on the pipeline's own topics and groups, over
// TLS with the profile's CA (from the env file).
func serviceEnv(t *testing.T, dir, service string) map[string]string {
	t.Helper()
	cfg, err := mysql.ParseDSN(os.Getenv("SECKILL_MYSQL_DSN"))
	if err != nil {
		t.Fatalf("SECKILL_MYSQL_DSN: %v", err)
	}
	cfg.User, cfg.Passwd, cfg.DBName = "seckill_app", "", "seckill"
	secret := func(name string) string { return filepath.Join(dir, "secrets", name) }
	env := map[string]string{
		"SECKILL_REDIS_USERNAME":      service,
		"SECKILL_REDIS_PASSWORD_FILE": secret("redis-" + service),
		"SECKILL_MYSQL_DSN":           cfg.FormatDSN(),
		"SECKILL_MYSQL_PASSWORD_FILE": secret("mysql-app"),
		"SECKILL_KAFKA_USERNAME":      service,
		"SECKILL_KAFKA_PASSWORD_FILE": secret("kafka-" + service),
		"SECKILL_TOPIC_PREFIX":        "",
		"SECKILL_CONSUMER_GROUP":      "seckill-orders",
		"SECKILL_FEEDBACK_GROUP":      "seckill-order-feedback",
		"SECKILL_LOG_LEVEL":           "info",
	}
	switch service {
	case "gateway":
		env["SECKILL_GATEWAY_ADDR"], env["SECKILL_ADMIN_ADDR"] = stacktest.FreeAddr(t), stacktest.FreeAddr(t)
		env["SECKILL_ADMIN_TOKEN"] = "admin-token-" + stacktest.ID(t)
		env["SECKILL_JWT_SECRET"] = "jwt-secret-" + stacktest.ID(t) + "-0123456789abcdef"
	case "consumer":
		env["SECKILL_CONSUMER_ADDR"] = stacktest.FreeAddr(t)
	case "reconciler":
		env["SECKILL_RECONCILER_ADDR"] = stacktest.FreeAddr(t)
	}
	return env
}

// migrate applies the schema to the pipeline's database as the DDL user (gateway migrate).
func migrate(t *testing.T, dir string) {
	t.Helper()
	env := serviceEnv(t, dir, "gateway")
	env["SECKILL_MYSQL_MIGRATE_DSN"] = strings.Replace(env["SECKILL_MYSQL_DSN"], "seckill_app@", "seckill_migrate@", 1)
	env["SECKILL_MYSQL_MIGRATE_PASSWORD_FILE"] = filepath.Join(dir, "secrets", "mysql-migrate")
	p := start(t, "gateway", env, "migrate")
	if err := p.Wait(2 * time.Minute); err != nil {
		t.Fatalf("gateway migrate as seckill_migrate: %v\n%s", err, p.Output())
	}
}

func start(t *testing.T, name string, env map[string]string, args ...string) *harness.Proc {
	t.Helper()
	p, err := harness.Start(name, filepath.Join(stacktest.Binaries(t), name), env, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return p
}

// Each service starts as its own users: the Redis ACLs, Kafka ACLs and MySQL GRANTs of the
// profile are enough for its start-up checks, and the migration runs as the DDL user.
func TestServicesStartAsTheirOwnUsers(t *testing.T) {
	dir := profile(t)
	migrate(t, dir)
	for _, s := range []struct{ name, addrVar string }{
		{"gateway", "SECKILL_ADMIN_ADDR"}, {"consumer", "SECKILL_CONSUMER_ADDR"}, {"reconciler", "SECKILL_RECONCILER_ADDR"},
	} {
		t.Run(s.name, func(t *testing.T) {
			env := serviceEnv(t, dir, s.name)
			p := start(t, s.name, env)
			deadline := time.Now().Add(60 * time.Second)
			for !ready("http://" + env[s.addrVar] + "/readyz") {
				if p.Exited() || time.Now().After(deadline) {
					t.Fatalf("%s as its own users not ready (exited: %t):\n%s", s.name, p.Exited(), p.Output())
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}

// A wrong password, an unknown CA, a missing right and a plaintext attempt are each refused
// at start-up, on every server, with the server, the user and the reason in the error the
// service exits with.
func TestRefusedAtStartUp(t *testing.T) {
	dir := profile(t)
	migrate(t, dir)
	wrong := filepath.Join(t.TempDir(), "wrong-password")
	if err := os.WriteFile(wrong, []byte("not-the-password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	otherCA := filepath.Join(dir, "certs", "other-ca.pem")
	redisAddr, kafkaAddr := os.Getenv("SECKILL_REDIS_ADDR"), stacktest.KafkaBrokers()[0]
	mysqlCfg, err := mysql.ParseDSN(os.Getenv("SECKILL_MYSQL_DSN"))
	if err != nil {
		t.Fatal(err)
	}
	noRedisTLS := map[string]string{"SECKILL_REDIS_TLS": "false", "SECKILL_REDIS_CA_FILE": ""}
	cases := []struct {
		name    string
		service string
		args    []string
		change  map[string]string
		want    []string // every one in the exit error
	}{
		{"redis wrong password", "gateway", nil, map[string]string{"SECKILL_REDIS_PASSWORD_FILE": wrong},
			[]string{"redis " + redisAddr + " as user gateway", "WRONGPASS"}},
		{"redis unknown CA", "gateway", nil, map[string]string{"SECKILL_REDIS_CA_FILE": otherCA},
			[]string{"redis " + redisAddr + " as user gateway", "not signed by the configured CA"}},
		// The gateway run as the consumer's Redis user is allowed every command it needs;
		// a user without INFO (the eviction-policy check) is not: made per test below.
		{"redis missing ACL", "gateway", nil, map[string]string{"SECKILL_REDIS_USERNAME": "NOINFO"},
			[]string{"as user NOINFO", "NOPERM", "info"}},
		{"redis plaintext", "gateway", nil, noRedisTLS,
			[]string{"redis " + redisAddr + " as user gateway", "may require TLS (set SECKILL_REDIS_TLS=true)"}},
		{"mysql wrong password", "gateway", nil, map[string]string{"SECKILL_MYSQL_PASSWORD_FILE": wrong},
			[]string{"mysql " + mysqlCfg.Addr + " as user seckill_app", "Access denied for user 'seckill_app'"}},
		{"mysql unknown CA", "gateway", nil, map[string]string{"SECKILL_MYSQL_CA_FILE": otherCA},
			[]string{"mysql " + mysqlCfg.Addr + " as user seckill_app", "not signed by the configured CA"}},
		// The services' DML user may not migrate: its missing GRANT stops gateway migrate at
		// its first statement, named.
		{"mysql missing grant", "gateway", []string{"migrate"}, nil,
			[]string{"seckill_app", "command denied to user 'seckill_app'"}},
		{"mysql plaintext", "gateway", nil, map[string]string{"SECKILL_MYSQL_TLS": "false", "SECKILL_MYSQL_CA_FILE": ""},
			[]string{"mysql " + mysqlCfg.Addr + " as user seckill_app", "Access denied", "the server requires TLS", "set SECKILL_MYSQL_TLS=true"}},
		{"kafka wrong password", "gateway", nil, map[string]string{"SECKILL_KAFKA_PASSWORD_FILE": wrong},
			[]string{"User:gateway", "SASL scram-sha-512 authentication", "refused"}},
		{"kafka unknown CA", "gateway", nil, map[string]string{"SECKILL_KAFKA_CA_FILE": otherCA},
			[]string{"kafka " + kafkaAddr, "User:gateway", "not signed by the configured CA"}},
		// The consumer started with the gateway's Kafka credentials: the gateway's principal
		// may not consume order feedback.
		{"kafka missing ACL", "consumer", nil, map[string]string{"SECKILL_KAFKA_USERNAME": "gateway",
			"SECKILL_KAFKA_PASSWORD_FILE": filepath.Join(dir, "secrets", "kafka-gateway")},
			[]string{"principal User:gateway is not allowed to READ group seckill-order-feedback (ACL)"}},
		// The consumer started with the reconciler's Kafka credentials: the reconciler's
		// principal has no ACL on the order topic, which the brokers then answer as unknown.
		{"kafka missing topic ACL", "consumer", nil, map[string]string{"SECKILL_KAFKA_USERNAME": "reconciler",
			"SECKILL_KAFKA_PASSWORD_FILE": filepath.Join(dir, "secrets", "kafka-reconciler")},
			[]string{"principal User:reconciler cannot WRITE topic seckill.order", "no ACL allows it to DESCRIBE the topic"}},
		{"kafka plaintext", "gateway", nil, map[string]string{"SECKILL_KAFKA_TLS": "false", "SECKILL_KAFKA_CA_FILE": ""},
			[]string{"User:gateway", "may require TLS (set SECKILL_KAFKA_TLS=true)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := serviceEnv(t, dir, c.service)
			for k, v := range c.change {
				env[k] = v
			}
			if env["SECKILL_REDIS_USERNAME"] == "NOINFO" {
				env["SECKILL_REDIS_USERNAME"], env["SECKILL_REDIS_PASSWORD_FILE"] = redisUserWithout(t, dir, "info")
			}
			for i, w := range c.want {
				if strings.Contains(w, "NOINFO") {
					c.want[i] = strings.Replace(w, "NOINFO", env["SECKILL_REDIS_USERNAME"], 1)
				}
			}
			p := start(t, c.service, env, c.args...)
			err := p.Wait(60 * time.Second)
			if err == nil || !p.Exited() {
				t.Fatalf("%s with %s: want it to exit with an error at start-up, got %v:\n%s", c.service, c.name, err, p.Output())
			}
			out := p.Output()
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("%s with %s: the exit error does not say %q:\n%s", c.service, c.name, w, out)
				}
			}
			for _, f := range []string{"redis-gateway", "mysql-app", "kafka-gateway"} {
				if b, err := os.ReadFile(filepath.Join(dir, "secrets", f)); err == nil && strings.Contains(out, strings.TrimSpace(string(b))) {
					t.Errorf("%s with %s: the output shows the secret %s", c.service, c.name, f)
				}
			}
		})
	}
}

func ready(url string) bool {
	c := &http.Client{Timeout: time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// redisUserWithout makes a Redis user with the gateway's rights less one command (as the
// tests' user, which may run ACL SETUSER), deleted when the test ends; it returns its name
// and a file with its password.
func redisUserWithout(t *testing.T, dir, command string) (string, string) {
	t.Helper()
	rdb := stacktest.Redis(t)
	ctx := stacktest.Context(t, 10*time.Second)
	commands := gatewayRedisCommands(t)
	if !strings.Contains(commands, "+"+command) {
		t.Fatalf("the gateway's Redis user has no +%s to take away: %q", command, commands)
	}
	name, password := "t-"+stacktest.ID(t), "pw-"+stacktest.ID(t)
	args := []any{"ACL", "SETUSER", name, "on", ">" + password, "resetkeys", "~sk:*", "resetchannels"}
	for _, r := range strings.Fields(commands) {
		args = append(args, r)
	}
	args = append(args, "-"+command)
	if err := rdb.Do(ctx, args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rdb.Do(ctx, "ACL", "DELUSER", name)
	})
	f := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(f, []byte(password), 0o600); err != nil {
		t.Fatal(err)
	}
	return name, f
}

// gatewayRedisCommands are the command rules of the profile's gateway user (ACL GETUSER), to
// make users with the same rights.
func gatewayRedisCommands(t *testing.T) string {
	t.Helper()
	rules, err := stacktest.Redis(t).Do(stacktest.Context(t, 10*time.Second), "ACL", "GETUSER", "gateway").Result()
	if err != nil {
		t.Fatalf("ACL GETUSER gateway: %v", err)
	}
	var commands string
	switch r := rules.(type) {
	case map[any]any: // RESP3
		commands, _ = r["commands"].(string)
	case []any: // RESP2: name, value, ...
		for i := 0; i+1 < len(r); i += 2 {
			if r[i] == "commands" {
				commands, _ = r[i+1].(string)
			}
		}
	}
	return commands
}
