package config

import (
	"strings"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/memlimit"
)

func getenv(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestLoadGateway(t *testing.T) {
	secrets := map[string]string{
		"SECKILL_ADMIN_TOKEN": "0123456789abcdef",
		"SECKILL_JWT_SECRET":  "0123456789abcdef0123456789abcdef",
	}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range secrets {
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
		wantErr string // substring; "" means success
	}{
		{"defaults with secrets", with(), ""},
		{"no admin credential", map[string]string{"SECKILL_JWT_SECRET": secrets["SECKILL_JWT_SECRET"]},
			"SECKILL_ADMIN_TOKEN (or SECKILL_ADMIN_TOKEN_FILE) or SECKILL_ADMIN_TOKENS_FILE is required"},
		{"admin tokens file only", map[string]string{"SECKILL_JWT_SECRET": secrets["SECKILL_JWT_SECRET"],
			"SECKILL_ADMIN_TOKENS_FILE": "/etc/seckill/admin-tokens"}, ""},
		{"short admin token", with("SECKILL_ADMIN_TOKEN", "short"), "SECKILL_ADMIN_TOKEN must be at least 16 bytes"},
		{"short console secret", with("SECKILL_CONSOLE_SECRET", "short"), "SECKILL_CONSOLE_SECRET must be at least 32 bytes"},
		{"admin hosts", with("SECKILL_ADMIN_HOSTS", "admin.example, Ops.Example:8443"), ""},
		{"admin host with a path", with("SECKILL_ADMIN_HOSTS", "admin.example/x"), "not a host name"},
		{"admin host with a bad port", with("SECKILL_ADMIN_HOSTS", "admin.example:99999"), "bad port"},
		{"login rate 0", with("SECKILL_CONSOLE_LOGIN_RATE", "0"), "SECKILL_CONSOLE_LOGIN_RATE"},
		{"short jwt secret", with("SECKILL_JWT_SECRET", "short"), "SECKILL_JWT_SECRET must be at least 32 bytes"},
		{"key set file, no secret", with("SECKILL_JWT_SECRET", "", "SECKILL_JWT_JWKS_FILE", "/etc/seckill/jwks.json"), ""},
		{"key set URL, no secret", with("SECKILL_JWT_SECRET", "", "SECKILL_JWT_JWKS_URL", "https://idp.example/.well-known/jwks.json"), ""},
		{"neither key set nor secret", with("SECKILL_JWT_SECRET", ""), "SECKILL_JWT_SECRET is required"},
		{"key set file and URL", with("SECKILL_JWT_JWKS_FILE", "/k.json", "SECKILL_JWT_JWKS_URL", "https://idp.example/k"), "both set"},
		{"key set over http from another host", with("SECKILL_JWT_JWKS_URL", "http://idp.example/k"), "in plaintext from another host"},
		{"key set over http on this host", with("SECKILL_JWT_JWKS_URL", "http://127.0.0.1:9/k"), ""},
		{"key set over http, development", with("SECKILL_JWT_JWKS_URL", "http://idp.example/k", "SECKILL_INSECURE_DEV", "1"), ""},
		{"key set URL not a URL", with("SECKILL_JWT_JWKS_URL", "idp.example/k"), "want an https:// URL"},
		{"key set refresh too short", with("SECKILL_JWT_JWKS_URL", "https://idp.example/k", "SECKILL_JWT_JWKS_REFRESH", "10ms"), "SECKILL_JWT_JWKS_REFRESH"},
		{"dsn without clientFoundRows", with("SECKILL_MYSQL_DSN", "u:p@tcp(h:1)/d?parseTime=true"), "clientFoundRows=true"},
		{"bad duration", with("SECKILL_SHUTDOWN_TIMEOUT", "soon"), "SECKILL_SHUTDOWN_TIMEOUT"},
		{"bad log level", with("SECKILL_LOG_LEVEL", "loud"), "SECKILL_LOG_LEVEL"},
		{"empty broker list", with("SECKILL_KAFKA_BROKERS", " , "), "SECKILL_KAFKA_BROKERS"},
		{"redis cluster seeds", with("SECKILL_REDIS_ADDR", "127.0.0.1:17001, 127.0.0.1:17002"), ""},
		{"redis address without a port", with("SECKILL_REDIS_ADDR", "127.0.0.1:17001,localhost"), `"localhost" is not a host:port`},
		{"redis address with a bad port", with("SECKILL_REDIS_ADDR", "127.0.0.1:0"), "SECKILL_REDIS_ADDR"},
		{"trusted proxies", with("SECKILL_TRUSTED_PROXIES", "10.0.0.0/8, 127.0.0.2,::1"), ""},
		{"bad trusted proxy", with("SECKILL_TRUSTED_PROXIES", "10.0.0.0/8,proxy.local"), `"proxy.local" is neither`},
		// A user header believed from any peer lets anyone who reaches the gateway name the user.
		{"user header without its proxies", with("SECKILL_TRUST_USER_HEADER", "X-User-Id"),
			"SECKILL_TRUST_USER_HEADER is set but SECKILL_USER_HEADER_PROXIES is empty"},
		// The migration: a deployment that named its auth proxy in SECKILL_TRUSTED_PROXIES is
		// refused, naming the new variable, rather than trusting every X-Forwarded-For proxy
		// with the user header (or silently answering its users 401).
		{"user header from the X-Forwarded-For proxies only", with("SECKILL_TRUST_USER_HEADER", "X-User-Id", "SECKILL_TRUSTED_PROXIES", "10.0.0.5"),
			"name the auth proxy that sets X-User-Id in SECKILL_USER_HEADER_PROXIES"},
		{"user header from its proxies", with("SECKILL_TRUST_USER_HEADER", "X-User-Id", "SECKILL_USER_HEADER_PROXIES", "10.0.0.5"), ""},
		{"user header and both lists", with("SECKILL_TRUST_USER_HEADER", "X-User-Id", "SECKILL_USER_HEADER_PROXIES", "10.0.0.5",
			"SECKILL_TRUSTED_PROXIES", "10.0.0.0/8"), ""},
		{"user header proxies without the header", with("SECKILL_USER_HEADER_PROXIES", "10.0.0.5"),
			"SECKILL_USER_HEADER_PROXIES is set but SECKILL_TRUST_USER_HEADER is empty"},
		{"bad user header proxy", with("SECKILL_TRUST_USER_HEADER", "X-User-Id", "SECKILL_USER_HEADER_PROXIES", "auth.local"), `"auth.local" is neither`},
		{"bucket units", with("SECKILL_BUCKET_UNITS", "500", "SECKILL_BUCKET_MAX", "8"), ""},
		{"negative bucket units", with("SECKILL_BUCKET_UNITS", "-1"), "SECKILL_BUCKET_UNITS"},
		{"bucket cap 0", with("SECKILL_BUCKET_MAX", "0"), "SECKILL_BUCKET_MAX"},
		{"bucket cap beyond 1024", with("SECKILL_BUCKET_MAX", "1025"), "SECKILL_BUCKET_MAX"},
		{"wanted flag too short", with("SECKILL_BUCKET_WANTED_TTL", "1ms"), "SECKILL_BUCKET_WANTED_TTL"},
		{"others cache too long", with("SECKILL_BUCKET_OTHERS_CACHE", "1m"), "SECKILL_BUCKET_OTHERS_CACHE"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadGateway(getenv(tc.env))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want it to mention %q", err, tc.wantErr)
			}
		})
	}
}

// Buckets are off unless an operator asks: no setting makes a prize of an unchanged
// deployment bucketed.
func TestBucketDefaults(t *testing.T) {
	g, err := LoadGateway(getenv(map[string]string{
		"SECKILL_ADMIN_TOKEN": "0123456789abcdef", "SECKILL_JWT_SECRET": "0123456789abcdef0123456789abcdef"}))
	if err != nil {
		t.Fatal(err)
	}
	if g.BucketUnits != 0 || g.BucketMax != 16 || g.BucketWantedTTL != 2*time.Second || g.BucketOthersCache != 100*time.Millisecond {
		t.Errorf("bucket settings = %d, %d, %s, %s; want 0, 16, 2s, 100ms", g.BucketUnits, g.BucketMax, g.BucketWantedTTL, g.BucketOthersCache)
	}
}

func TestListsAreNormalised(t *testing.T) {
	g, err := LoadGateway(getenv(map[string]string{
		"SECKILL_ADMIN_TOKEN": "0123456789abcdef", "SECKILL_JWT_SECRET": "0123456789abcdef0123456789abcdef",
		"SECKILL_REDIS_ADDR": " 127.0.0.1:17001 ,127.0.0.1:17002,", "SECKILL_TRUSTED_PROXIES": "10.1.2.3/8, 127.0.0.2, ::ffff:192.0.2.1",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if g.RedisAddr != "127.0.0.1:17001,127.0.0.1:17002" {
		t.Errorf("redis addr = %q", g.RedisAddr)
	}
	var got []string
	for _, p := range g.TrustedProxies {
		got = append(got, p.String())
	}
	if strings.Join(got, " ") != "10.0.0.0/8 127.0.0.2/32 192.0.2.1/32" {
		t.Errorf("trusted proxies = %v", got)
	}
	if g, _ := LoadGateway(getenv(map[string]string{})); len(g.TrustedProxies) != 0 {
		t.Errorf("trusted proxies by default: %v, want none", g.TrustedProxies)
	}
}

func TestDefaultsAndOverrides(t *testing.T) {
	c, err := LoadConsumer(getenv(map[string]string{
		"SECKILL_BATCH_SIZE": "50", "SECKILL_BATCH_WAIT": "20ms", "SECKILL_TOPIC_PREFIX": "x",
		"SECKILL_KAFKA_BROKERS": "a:1, b:2",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.BatchSize != 50 || c.BatchWait != 20*time.Millisecond {
		t.Errorf("batch = %d/%s", c.BatchSize, c.BatchWait)
	}
	if c.Topics.Grab.Name != "x.seckill.grab" {
		t.Errorf("grab topic = %q", c.Topics.Grab.Name)
	}
	if len(c.KafkaBrokers) != 2 || c.KafkaBrokers[1] != "b:2" {
		t.Errorf("brokers = %q", c.KafkaBrokers)
	}
	if c.RedisAddr != DefaultRedisAddr || c.MySQLDSN != DefaultMySQLDSN {
		t.Errorf("defaults not applied: %+v", c.Common)
	}
	if _, err := LoadConsumer(getenv(map[string]string{"SECKILL_BATCH_SIZE": "0"})); err == nil {
		t.Error("batch size 0 accepted")
	}
}

// The key rebuild waits for a gateway's unpublished grabs until its heartbeat is
// SECKILL_GATEWAY_DEAD_AFTER old: by default well past a MySQL blip, and never within a
// live gateway's own heartbeat (one interval plus one report's timeout).
func TestGatewayDeadAfter(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		want        time.Duration
		wantErr     string
	}{
		{"default", "", 30 * time.Second, ""},
		{"set", "10s", 10 * time.Second, ""},
		{"within the heartbeat", "1500ms", 0, "SECKILL_GATEWAY_DEAD_AFTER=1.5s: must exceed twice the gateways' heartbeat interval (1s)"},
		{"equal to two heartbeats", "2s", 0, "must exceed twice"},
		{"not a duration", "soon", 0, "SECKILL_GATEWAY_DEAD_AFTER"},
		{"too long", "2h", 0, "SECKILL_GATEWAY_DEAD_AFTER"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := LoadReconciler(getenv(map[string]string{"SECKILL_GATEWAY_DEAD_AFTER": tc.value}))
			switch {
			case tc.wantErr == "" && (err != nil || c.GatewayDeadAfter != tc.want):
				t.Fatalf("got %s, %v; want %s", c.GatewayDeadAfter, err, tc.want)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want it to mention %q", err, tc.wantErr)
			}
		})
	}
}

// The lifecycle job keeps the keys of a prize with pending reservations one key grace at a
// time: a reconciler that runs less often would let them expire between runs.
func TestReconcileIntervalShorterThanKeyGrace(t *testing.T) {
	for _, tc := range []struct {
		name, interval, grace string
		ok                    bool
	}{
		{"defaults", "", "", true},
		{"shorter", "30m", "1h", true},
		{"equal", "1h", "1h", false},
		{"longer", "10m", "5m", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{}
			if tc.interval != "" {
				env["SECKILL_RECONCILE_INTERVAL"], env["SECKILL_KEY_GRACE"] = tc.interval, tc.grace
			}
			_, err := LoadReconciler(getenv(env))
			if (err == nil) != tc.ok {
				t.Fatalf("interval %q, grace %q: %v, want ok=%v", tc.interval, tc.grace, err, tc.ok)
			}
		})
	}
}

// The grab writer's batch timeout: 1 ms unless set, and only within what
// event.CheckWriter accepts (a few milliseconds at most, never 0, which kafka-go reads
// as a second).
func TestKafkaBatchTimeout(t *testing.T) {
	env := func(v string) func(string) string {
		m := map[string]string{"SECKILL_ADMIN_TOKEN": "0123456789abcdef", "SECKILL_JWT_SECRET": "0123456789abcdef0123456789abcdef"}
		if v != "" {
			m["SECKILL_KAFKA_BATCH_TIMEOUT"] = v
		}
		return getenv(m)
	}
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{{"", time.Millisecond, true}, {"200us", 200 * time.Microsecond, true}, {"5ms", 5 * time.Millisecond, true},
		{"0", 0, false}, {"100ms", 0, false}} {
		c, err := LoadGateway(env(tc.in))
		if (err == nil) != tc.ok || (tc.ok && c.KafkaBatchTimeout != tc.want) {
			t.Errorf("SECKILL_KAFKA_BATCH_TIMEOUT=%q: %v, want %v (ok %v)", tc.in, err, tc.want, tc.ok)
		}
		if tc.ok && c.KafkaWriters != 1 {
			t.Errorf("SECKILL_KAFKA_WRITERS default = %d, want 1", c.KafkaWriters)
		}
	}
	m := map[string]string{"SECKILL_ADMIN_TOKEN": "0123456789abcdef", "SECKILL_JWT_SECRET": "0123456789abcdef0123456789abcdef"}
	for v, ok := range map[string]bool{"4": true, "0": false, "17": false} {
		m["SECKILL_KAFKA_WRITERS"] = v
		if c, err := LoadGateway(getenv(m)); (err == nil) != ok || (ok && c.KafkaWriters != 4) {
			t.Errorf("SECKILL_KAFKA_WRITERS=%s: %v (want ok %v)", v, err, ok)
		}
	}
}

// The soft memory limit's settings reach memlimit.Config as given; a ratio outside (0, 1]
// stops the service at start, named.
func TestMemLimit(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    memlimit.Config
		wantErr string // substring; "" means success
	}{
		{"defaults", nil, memlimit.Config{Ratio: 0.9}, ""},
		{"ratio", map[string]string{"SECKILL_MEMLIMIT_RATIO": " 0.75 "}, memlimit.Config{Ratio: 0.75}, ""},
		{"ratio 1", map[string]string{"SECKILL_MEMLIMIT_RATIO": "1"}, memlimit.Config{Ratio: 1}, ""},
		{"GOMEMLIMIT", map[string]string{"GOMEMLIMIT": "450MiB"}, memlimit.Config{GOMEMLIMIT: "450MiB", Ratio: 0.9}, ""},
		{"GOMEMLIMIT off", map[string]string{"GOMEMLIMIT": "off"}, memlimit.Config{GOMEMLIMIT: "off", Ratio: 0.9}, ""},
		{"ratio 0", map[string]string{"SECKILL_MEMLIMIT_RATIO": "0"}, memlimit.Config{}, `SECKILL_MEMLIMIT_RATIO="0": want a number in (0, 1]`},
		{"ratio above 1", map[string]string{"SECKILL_MEMLIMIT_RATIO": "1.5"}, memlimit.Config{}, `SECKILL_MEMLIMIT_RATIO="1.5"`},
		{"negative ratio", map[string]string{"SECKILL_MEMLIMIT_RATIO": "-0.9"}, memlimit.Config{}, `SECKILL_MEMLIMIT_RATIO="-0.9"`},
		{"ratio as a percentage", map[string]string{"SECKILL_MEMLIMIT_RATIO": "90%"}, memlimit.Config{}, `SECKILL_MEMLIMIT_RATIO="90%"`},
		{"ratio NaN", map[string]string{"SECKILL_MEMLIMIT_RATIO": "NaN"}, memlimit.Config{}, `SECKILL_MEMLIMIT_RATIO="NaN"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := LoadConsumer(getenv(tc.env))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want it to mention %q", err, tc.wantErr)
			case tc.wantErr == "" && c.MemLimit != tc.want:
				t.Fatalf("MemLimit = %+v, want %+v", c.MemLimit, tc.want)
			}
		})
	}
}
