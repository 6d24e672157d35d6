package config

import (
	"strings"
	"testing"
)

// Credentials over plaintext to another host, and TLS that does not verify the server, stop
// the services at start unless SECKILL_INSECURE_DEV=1 says this is a development stack;
// the loopback (the local stack, the cluster profile, a sidecar) stays plaintext-friendly.
func TestTransportSecurity(t *testing.T) {
	const (
		remoteDSN   = "seckill:pw@tcp(mysql.data.svc:3306)/seckill?parseTime=true&clientFoundRows=true"
		remoteNoPW  = "seckill@tcp(mysql.data.svc:3306)/seckill?parseTime=true&clientFoundRows=true"
		loopbackDSN = "seckill:pw@tcp(127.0.0.1:13306)/seckill?parseTime=true&clientFoundRows=true"
		socketDSN   = "seckill:pw@unix(/run/mysqld/mysqld.sock)/seckill?parseTime=true&clientFoundRows=true"
		dev         = "SECKILL_INSECURE_DEV"
	)
	env := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	tests := []struct {
		name    string
		env     map[string]string
		wantErr string // substring; "" means accepted
	}{
		{"the local stack's defaults (loopback, a password, plaintext)", env(), ""},
		{"ipv6 loopback and localhost", env("SECKILL_REDIS_ADDR", "[::1]:6379,localhost:6380", "SECKILL_REDIS_PASSWORD", "pw"), ""},

		{"redis password to another host in plaintext", env("SECKILL_REDIS_ADDR", "redis.data.svc:6379", "SECKILL_REDIS_PASSWORD", "pw"),
			"SECKILL_REDIS_PASSWORD would cross the network in plaintext to Redis redis.data.svc:6379 (not this host): set SECKILL_REDIS_TLS=true"},
		{"redis cluster with one remote seed", env("SECKILL_REDIS_ADDR", "127.0.0.1:7001,10.0.0.3:7002", "SECKILL_REDIS_PASSWORD", "pw"), "SECKILL_INSECURE_DEV=1"},
		{"redis password over tls", env("SECKILL_REDIS_ADDR", "redis.data.svc:6379", "SECKILL_REDIS_PASSWORD", "pw", "SECKILL_REDIS_TLS", "true"), ""},
		{"redis without credentials", env("SECKILL_REDIS_ADDR", "redis.data.svc:6379"), ""},
		{"redis password in plaintext on a dev stack", env("SECKILL_REDIS_ADDR", "redis:6379", "SECKILL_REDIS_PASSWORD", "pw", dev, "1"), ""},

		{"kafka sasl plain to another host in plaintext", env("SECKILL_KAFKA_BROKERS", "kafka-0:9092,kafka-1:9092", "SECKILL_KAFKA_SASL_MECHANISM", "plain",
			"SECKILL_KAFKA_USERNAME", "u", "SECKILL_KAFKA_PASSWORD", "pw"),
			"SECKILL_KAFKA_SASL_MECHANISM=plain credentials would cross the network in plaintext to Kafka kafka-0:9092,kafka-1:9092"},
		{"kafka scram to another host in plaintext", env("SECKILL_KAFKA_BROKERS", "kafka:9092", "SECKILL_KAFKA_SASL_MECHANISM", "scram-sha-512",
			"SECKILL_KAFKA_USERNAME", "u", "SECKILL_KAFKA_PASSWORD", "pw"), "set SECKILL_KAFKA_TLS=true"},
		{"kafka sasl plain over tls", env("SECKILL_KAFKA_BROKERS", "kafka:9093", "SECKILL_KAFKA_SASL_MECHANISM", "plain",
			"SECKILL_KAFKA_USERNAME", "u", "SECKILL_KAFKA_PASSWORD", "pw", "SECKILL_KAFKA_TLS", "true"), ""},
		{"kafka sasl plain on the loopback", env("SECKILL_KAFKA_SASL_MECHANISM", "plain", "SECKILL_KAFKA_USERNAME", "u", "SECKILL_KAFKA_PASSWORD", "pw"), ""},
		{"kafka sasl plain in plaintext on a dev stack", env("SECKILL_KAFKA_BROKERS", "kafka:9092", "SECKILL_KAFKA_SASL_MECHANISM", "plain",
			"SECKILL_KAFKA_USERNAME", "u", "SECKILL_KAFKA_PASSWORD", "pw", dev, "true"), ""},
		{"kafka without sasl to another host", env("SECKILL_KAFKA_BROKERS", "kafka:9092"), ""},

		{"mysql password in the dsn to another host in plaintext", env("SECKILL_MYSQL_DSN", remoteDSN),
			"the MySQL password of SECKILL_MYSQL_DSN would cross the network in plaintext to mysql.data.svc:3306"},
		{"mysql password beside the dsn to another host in plaintext", env("SECKILL_MYSQL_DSN", remoteNoPW, "SECKILL_MYSQL_PASSWORD", "pw"), "set SECKILL_MYSQL_TLS=true"},
		{"mysql over tls", env("SECKILL_MYSQL_DSN", remoteDSN, "SECKILL_MYSQL_TLS", "true"), ""},
		{"mysql dsn with tls=true", env("SECKILL_MYSQL_DSN", remoteDSN+"&tls=true"), ""},
		{"mysql without a password", env("SECKILL_MYSQL_DSN", remoteNoPW), ""},
		{"mysql on the loopback", env("SECKILL_MYSQL_DSN", loopbackDSN), ""},
		{"mysql over a unix socket", env("SECKILL_MYSQL_DSN", socketDSN), ""},
		{"mysql tls=skip-verify", env("SECKILL_MYSQL_DSN", loopbackDSN+"&tls=skip-verify"), "SECKILL_MYSQL_DSN has tls=skip-verify, TLS without verifying the server"},
		{"mysql tls=preferred", env("SECKILL_MYSQL_DSN", remoteDSN+"&tls=preferred"), "has tls=preferred"},
		{"mysql tls=skip-verify on a dev stack", env("SECKILL_MYSQL_DSN", remoteDSN+"&tls=skip-verify", dev, "1"), ""},
		{"mysql migrate dsn to another host in plaintext", env("SECKILL_MYSQL_MIGRATE_DSN", remoteDSN), "the MySQL password of SECKILL_MYSQL_MIGRATE_DSN"},
		{"mysql plaintext on a dev stack", env("SECKILL_MYSQL_DSN", remoteDSN, dev, "1"), ""},
		{"a dev setting that is not a boolean", env(dev, "yes please"), `SECKILL_INSECURE_DEV="yes please": want true or false`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadConsumer(getenv(tc.env))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want it to mention %q", err, tc.wantErr)
			}
		})
	}
	// The reconciler's replica DSN is held to the same rule.
	if _, err := LoadReconciler(getenv(env("SECKILL_MYSQL_REPLICA_DSN", remoteDSN))); err == nil ||
		!strings.Contains(err.Error(), "the MySQL password of SECKILL_MYSQL_REPLICA_DSN") {
		t.Errorf("replica dsn in plaintext to another host: error %v", err)
	}
}
