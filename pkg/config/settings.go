package config

import (
	"fmt"
	"io"
	"slices"
)

// Setting describes one environment variable for a service's --help. docs/operators.md
// ("Configuration") is the long form; TestSettingsNameEveryVariableRead keeps this table and
// the Load functions in step, so --help cannot leave out a variable a service reads.
type Setting struct {
	Name     string
	File     bool     // Name_FILE may name a file holding the value instead (a mounted secret)
	Default  string   // what applies when the variable is unset
	Services []string // the deployables that read it ("gateway", "consumer", "reconciler"); nil: all
	Meaning  string   // one line
}

// Settings returns every variable the deployables read, in the order of docs/operators.md.
func Settings() []Setting {
	gw, cons, recon := []string{"gateway"}, []string{"consumer"}, []string{"reconciler"}
	return []Setting{
		{"SECKILL_REDIS_ADDR", false, DefaultRedisAddr, nil, "Redis address, or comma-separated seed addresses of a Redis Cluster"},
		{"SECKILL_REDIS_USERNAME", false, "(empty: Redis's default user)", nil, "Redis ACL user (the same on every node)"},
		{"SECKILL_REDIS_PASSWORD", true, "(empty)", nil, "Redis password"},
		{"SECKILL_REDIS_TLS", false, "false", nil, "connect to Redis over TLS"},
		{"SECKILL_REDIS_CA_FILE", false, "(empty: system roots)", nil, "PEM file of the CA that signed the Redis servers' certificates"},
		{"SECKILL_REDIS_CERT_FILE", false, "(empty)", nil, "client certificate for Redis (mutual TLS)"},
		{"SECKILL_REDIS_KEY_FILE", false, "(empty)", nil, "client key for Redis (mutual TLS)"},
		{"SECKILL_REDIS_TLS_SERVER_NAME", false, "(empty: the host of the address)", nil, "name the Redis certificates carry"},
		{"SECKILL_REDIS_TIMEOUT", false, "1s", nil, "read timeout of one Redis call"},
		{"SECKILL_MYSQL_DSN", true, DefaultMySQLDSN, nil, "the services' (DML) user; must contain parseTime=true and clientFoundRows=true"},
		{"SECKILL_MYSQL_PASSWORD", true, "(empty: the DSN's)", nil, "password of the DSN's user, overriding the DSN's"},
		{"SECKILL_MYSQL_MIGRATE_DSN", true, "SECKILL_MYSQL_DSN", nil, "DSN of the user gateway migrate runs as (DDL)"},
		{"SECKILL_MYSQL_MIGRATE_PASSWORD", true, "SECKILL_MYSQL_PASSWORD when the migrate DSN defaults", nil, "password of the migrating user"},
		{"SECKILL_MYSQL_TLS", false, "false", nil, "TLS to MySQL (the DSN must then carry no tls= parameter)"},
		{"SECKILL_MYSQL_CA_FILE", false, "(empty: system roots)", nil, "PEM file of the CA that signed the MySQL server's certificate"},
		{"SECKILL_MYSQL_CERT_FILE", false, "(empty)", nil, "client certificate for MySQL (REQUIRE X509 accounts)"},
		{"SECKILL_MYSQL_KEY_FILE", false, "(empty)", nil, "client key for MySQL"},
		{"SECKILL_MYSQL_TLS_SERVER_NAME", false, "(empty: the DSN's host)", nil, "name the MySQL server's certificate carries"},
		{"SECKILL_KAFKA_BROKERS", false, DefaultKafkaBrokers, nil, "comma-separated bootstrap brokers"},
		{"SECKILL_KAFKA_SASL_MECHANISM", false, "none", nil, "none, plain, scram-sha-256 or scram-sha-512"},
		{"SECKILL_KAFKA_USERNAME", false, "(empty)", nil, "SASL user"},
		{"SECKILL_KAFKA_PASSWORD", true, "(empty)", nil, "SASL password"},
		{"SECKILL_KAFKA_TLS", false, "false", nil, "connect to the brokers over TLS"},
		{"SECKILL_KAFKA_CA_FILE", false, "(empty: system roots)", nil, "PEM file of the CA that signed the brokers' certificates"},
		{"SECKILL_KAFKA_CERT_FILE", false, "(empty)", nil, "client certificate for Kafka (mutual TLS)"},
		{"SECKILL_KAFKA_KEY_FILE", false, "(empty)", nil, "client key for Kafka"},
		{"SECKILL_KAFKA_TLS_SERVER_NAME", false, "(empty: each broker's host)", nil, "name the brokers' certificates carry"},
		{InsecureDevVar, false, "false", nil, "development stacks only: accept credentials over plaintext to another host and unverified TLS (tls=skip-verify), which the services otherwise refuse at start"},
		{"SECKILL_TOPIC_PREFIX", false, "(empty)", nil, "prefix for topic names (<prefix>.seckill.grab)"},
		{"SECKILL_GRAB_PARTITIONS", false, "6", nil, "partitions of the grab topic; the reconciler refuses a topic with another count"},
		{"SECKILL_LOG_LEVEL", false, "info", nil, "debug, info, warn or error (JSON logs)"},
		{"SECKILL_MEMLIMIT_RATIO", false, "0.9", nil, "the Go runtime's soft memory limit is this share of the container's (cgroup) memory limit, in (0, 1]; no container limit: none"},
		{"GOMEMLIMIT", false, "(empty: SECKILL_MEMLIMIT_RATIO applies)", nil, "the Go runtime's own soft memory limit (e.g. 450MiB, or off); when set it wins over SECKILL_MEMLIMIT_RATIO"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", false, "(empty: tracing off)", nil, "OTLP/HTTP collector base URL (http://host:4318, or https://); set, traces are exported"},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", false, "(empty: the base URL's /v1/traces)", nil, "full OTLP/HTTP traces URL, instead of the base"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL", false, "http/protobuf", nil, "only http/protobuf is supported"},
		{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", false, "(empty: OTEL_EXPORTER_OTLP_PROTOCOL)", nil, "the same, for traces only"},
		{"OTEL_EXPORTER_OTLP_HEADERS", false, "(empty)", nil, "headers sent to the collector (key=value,...: its credential)"},
		{"OTEL_EXPORTER_OTLP_CERTIFICATE", false, "(empty: system roots)", nil, "PEM file of the CA that signed the collector's certificate"},
		{"OTEL_TRACES_SAMPLER", false, "parentbased_traceidratio", nil, "always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio"},
		{"OTEL_TRACES_SAMPLER_ARG", false, "0.01 (default sampler), 1 (a named ratio sampler)", nil, "the ratio sampler's share of new traces, 0 to 1"},
		{"OTEL_SERVICE_NAME", false, "gateway, consumer or reconciler", nil, "the service name on every span"},
		{"OTEL_RESOURCE_ATTRIBUTES", false, "(empty)", nil, "more resource attributes (key=value,...: deployment.environment=prod)"},
		{"OTEL_SDK_DISABLED", false, "false", nil, "true: no tracing whatever else is set"},
		{"OTEL_TRACES_EXPORTER", false, "otlp", nil, "otlp, or none (no tracing)"},
		{"SECKILL_SHUTDOWN_TIMEOUT", false, "15s", nil, "graceful shutdown budget after SIGTERM"},
		{"SECKILL_KEY_GRACE", false, "1h", nil, "Redis keys live until the session's end plus this"},
		{"SECKILL_DRAW_BEACON_SCHEME", false, "(empty: no beacon)", nil, "drand scheme of the beacon new draws commit a round of, e.g. bls-unchained-g1-rfc9380"},
		{"SECKILL_DRAW_BEACON_PUBLIC_KEY", false, "(empty)", nil, "the beacon network's public key, hex"},
		{"SECKILL_DRAW_BEACON_GENESIS", false, "0", nil, "the beacon network's genesis, unix seconds (required with a scheme)"},
		{"SECKILL_DRAW_BEACON_PERIOD", false, "3s", nil, "the beacon network's round period"},
		{"SECKILL_GATEWAY_ADDR", false, "127.0.0.1:8080", gw, "public grab/status API"},
		{"SECKILL_ADMIN_ADDR", false, "127.0.0.1:8081", gw, "admin API and metrics, on their own listener"},
		{"SECKILL_ADMIN_TOKEN", true, "(empty), >= 16 bytes when set", gw, "shared admin bearer credential; this or SECKILL_ADMIN_TOKENS_FILE is required"},
		{"SECKILL_ADMIN_TOKEN_PREVIOUS", true, "(empty: none), >= 16 bytes when set", gw, "the shared admin token being rotated out, accepted as admin too while set"},
		{"SECKILL_ADMIN_TOKENS_FILE", false, "(empty: none)", gw, "file of per-operator admin credentials, `name sha256:<hex> [role]` a line (role: scrape, viewer, operator, admin; none: admin)"},
		{"SECKILL_JWT_SECRET", true, "required without SECKILL_JWT_JWKS_FILE, >= 32 bytes", gw, "HS256 key for user tokens (development: a gateway holding it can mint any user's token); as _FILE, re-read every second"},
		{"SECKILL_JWT_JWKS_URL", false, "(empty: none)", gw, "where the identity provider publishes its JWKS (https, or http to this host's loopback): fetched at start (the gateway does not start without it) and every SECKILL_JWT_JWKS_REFRESH; a failed fetch keeps the last good set; not with SECKILL_JWT_JWKS_FILE"},
		{"SECKILL_JWT_JWKS_REFRESH", false, "5m", gw, "how often SECKILL_JWT_JWKS_URL is fetched again (1s to 24h); a failed fetch is tried again after 30 s"},
		{"SECKILL_JWT_JWKS_FILE", false, "(empty: none)", gw, "JWKS file of the identity provider's public keys (RS256, ES256, EdDSA; each with a kid): the production path; re-read every second, a bad file keeps the last good set"},
		{"SECKILL_JWT_SECRET_PREVIOUS", true, "(empty: none), >= 32 bytes when set", gw, "the secret being rotated out: its tokens are accepted too while set; as _FILE, re-read every second, absent or empty file = none"},
		{"SECKILL_JWT_ISSUER", false, "seckill", gw, "required iss of user tokens"},
		{"SECKILL_JWT_AUDIENCE", false, "seckill-gateway", gw, "required aud of user tokens"},
		{"SECKILL_JWT_MAX_LIFETIME", false, "2h", gw, "longest validity of a user token (exp minus iat or nbf) accepted or minted by gateway token (1m to 24h)"},
		{"SECKILL_TRUST_USER_HEADER", false, "(empty: off)", gw, "header with a user id set by a trusted auth proxy (needs SECKILL_USER_HEADER_PROXIES)"},
		{"SECKILL_USER_HEADER_PROXIES", false, "(empty: never)", gw, "comma-separated CIDR prefixes or addresses of the auth proxies whose SECKILL_TRUST_USER_HEADER is believed (not SECKILL_TRUSTED_PROXIES)"},
		{"SECKILL_MAX_INFLIGHT", false, "4096", gw, "requests served at once; beyond it, fast 503"},
		{"SECKILL_ADMISSION_TOLERANCE", false, "4", gw, "how many times its recent level (about 2 s) the grab path's latency (token, admission script, Kafka acknowledgement) may rise, with grabs completing at less than half their recent rate (a stall), before the adaptive admission limit shrinks; over the limit a grab gets 503 overloaded at once (0: the limit stays at SECKILL_ADMISSION_MAX)"},
		{"SECKILL_ADMISSION_MIN", false, "128", gw, "the adaptive admission limit never goes below this many grabs at once"},
		{"SECKILL_ADMISSION_MAX", false, "4096", gw, "the adaptive admission limit never goes above this many grabs at once"},
		{"SECKILL_ADMISSION_RETRY_AFTER_MAX", false, "3", gw, "a refused grab's Retry-After is drawn from 1 to this many seconds, so refusals do not come back as one wave"},
		{"SECKILL_MEMLIMIT_FALLBACK_MIB", false, "128", gw, "the gateway's soft memory limit in MiB when neither GOMEMLIMIT nor a container limit gives one (0: none)"},
		{"SECKILL_RATE_PER_USER", false, "5", gw, "token bucket rate per user, per second (0 disables)"},
		{"SECKILL_BURST_PER_USER", false, "10", gw, "token bucket burst per user"},
		{"SECKILL_RATE_PER_IP", false, "2000", gw, "token bucket rate per client IP (IPv6: per /64), per second (0 disables)"},
		{"SECKILL_BURST_PER_IP", false, "4000", gw, "token bucket burst per client IP"},
		{"SECKILL_TRUSTED_PROXIES", false, "(empty: never)", gw, "comma-separated CIDR prefixes or addresses of the reverse proxies in front"},
		{"SECKILL_RATE_MAX_KEYS", false, "200000", gw, "users / IP buckets each limiter holds (least recently used evicted)"},
		{"SECKILL_SOLDOUT_RECHECK", false, "250ms", gw, "a local sold-out flag answers keyless grabs this long before Redis is asked again"},
		{"SECKILL_SCHEDULE_REFRESH", false, "1s", gw, "schedule cache reload period"},
		{"SECKILL_PRODUCE_TIMEOUT", false, "3s", gw, "wait for Kafka's ack before handing the event to the relay"},
		{"SECKILL_KAFKA_BATCH_TIMEOUT", false, "1ms", gw, "how long a grab event waits for others to share its produce request (50µs to 50ms)"},
		{"SECKILL_KAFKA_WRITERS", false, "1", gw, "Kafka writers the grab events take turns on, each with one produce request per partition in flight (1 to 16)"},
		{"SECKILL_RELAY_QUEUE", false, "100000", gw, "grab events the relay holds while Kafka does not acknowledge; beyond it, dropped (the reconciler re-publishes them)"},
		{"SECKILL_GATEWAY_REPLICA_WAIT", false, "1s", gw, "after a failed produce, wait this long for a Redis replica to hold the reservation, else 503 (0: off; off by itself without replicas)"},
		{"SECKILL_BUCKET_UNITS", false, "0", gw, "a new prize without buckets named gets ceil(stock / this) stock buckets, at most SECKILL_BUCKET_MAX (0: off, one bucket)"},
		{"SECKILL_BUCKET_MAX", false, "16", gw, "the most stock buckets a prize may have (asked for or derived)"},
		{"SECKILL_BUCKET_WANTED_TTL", false, "2s", gw, "how long a dry home bucket's wanted flag asks the rebalance loop for units"},
		{"SECKILL_BUCKET_OTHERS_CACHE", false, "100ms", gw, "how long a dry bucket's read of the other buckets answers (and how often demand counts are flushed)"},
		{"SECKILL_CONSUMER_ADDR", false, "127.0.0.1:8082", cons, "health and metrics"},
		{"SECKILL_CONSUMER_GROUP", false, "seckill-orders", nil, "the order consumers' group (the reconciler and the console read its lag)"},
		{"SECKILL_BATCH_SIZE", false, "1000", cons, "events per batch at most"},
		{"SECKILL_BATCH_WAIT", false, "5ms", cons, "how long a batch waits to fill"},
		{"SECKILL_READ_AHEAD_BYTES", false, "4194304", cons, "bytes of messages each partition's worker holds read and not yet processed (its batch and the next ones; at least 65536)"},
		{"SECKILL_FEEDBACK_GROUP", false, "seckill-order-feedback", []string{"consumer", "reconciler"}, "the group reading downstream's order feedback"},
		{"SECKILL_RECONCILER_ADDR", false, "127.0.0.1:8083", recon, "health and metrics (scheduler mode)"},
		{"SECKILL_RECONCILE_INTERVAL", false, "10s", recon, "scheduler period; shorter than SECKILL_KEY_GRACE"},
		{"SECKILL_DRAW_INTERVAL", false, "1s", recon, "the draw loop's period: a draw freezes and admits its winners this soon after its window closes"},
		{"SECKILL_DRAW_PAGE", false, "500", recon, "places one round of a draw's admissions offers before it records the cutoff"},
		{"SECKILL_PREHEAT_LEAD", false, "5m", recon, "how long before a session its stock is loaded"},
		{"SECKILL_RECONCILER_LEASE", false, "seckill-reconciler", recon, "name of the single-actor lease (a row in MySQL's leases)"},
		{"SECKILL_LEASE_TTL", false, "15s", recon, "the lease's time to live"},
		{"SECKILL_STALE_AFTER", false, "10s", recon, "a reservation older than this without an order is settled or re-published"},
		{"SECKILL_REPUBLISH_BOUND", false, "1m", recon, "... and re-published even while its partition is busy, once this old"},
		{"SECKILL_REPLAY_BUDGET", false, "30s", recon, "time one run may spend replaying the compensation topic"},
		{"SECKILL_CATCHUP_WAIT", false, "20s", recon, "how long a run waits for consumer lag 0 before rebuilding lost keys"},
		{"SECKILL_GATEWAY_DEAD_AFTER", false, "30s", recon, "a gateway whose heartbeat is older than this is taken for dead"},
		{"SECKILL_STALE_CASE_AFTER", false, "5m", recon, "a reservation without an order this long after admission becomes a case"},
		{"SECKILL_DRIFT_CASE_RUNS", false, "3", recon, "drift left uncorrected by this many consecutive runs becomes a case"},
		{"SECKILL_BUCKET_REBALANCE_INTERVAL", false, "250ms", recon, "period of the loop moving units between a bucketed prize's stock buckets"},
		{"SECKILL_BUCKET_PRIZES_REFRESH", false, "5s", recon, "how long the rebalance loop keeps its list of open bucketed prizes (0: reads it every round)"},
		{"SECKILL_MYSQL_REPLICA_DSN", true, "(empty: no replica gauges)", recon, "a MySQL replica whose lag and threads the reconciler exports (nothing reads from it); its user needs SLAVE MONITOR"},
		{"SECKILL_CONSOLE_SESSION", false, "12h", gw, "how long an operator console sign-in lasts at most (its absolute lifetime)"},
		{"SECKILL_CONSOLE_IDLE", false, "30m", gw, "an operator console session unused this long ends"},
		{"SECKILL_CONSOLE_SECRET", true, "(empty: derived from SECKILL_ADMIN_TOKEN), >= 32 bytes when set", gw, "key of the console's session cookies"},
		{"SECKILL_ADMIN_AUTH_FAILURES", false, "10", gw, "wrong admin bearer tokens a client may present per SECKILL_ADMIN_AUTH_WINDOW; beyond it 429 until the window ends (0: no limit)"},
		{"SECKILL_ADMIN_AUTH_WINDOW", false, "5m", gw, "the window of SECKILL_ADMIN_AUTH_FAILURES, from a client's first wrong token"},
		{"SECKILL_CONSOLE_LOGIN_RATE", false, "10", gw, "console sign-in attempts per minute per remote address"},
		{"SECKILL_ADMIN_HOSTS", false, "(empty)", gw, "comma-separated Host names the admin listener answers besides IPs and localhost"},
	}
}

// SettingsFor returns the settings service reads, in table order.
func SettingsFor(service string) []Setting {
	var out []Setting
	for _, s := range Settings() {
		if s.Services == nil || slices.Contains(s.Services, service) {
			out = append(out, s)
		}
	}
	return out
}

// WriteSettings prints service's settings for --help: each variable with its default, then
// its meaning; details are in docs/operators.md.
func WriteSettings(w io.Writer, service string) {
	fmt.Fprintf(w, "Settings (environment variables; details in docs/operators.md, Configuration):\n")
	for _, s := range SettingsFor(service) {
		name := s.Name
		if s.File {
			name += " (or " + s.Name + "_FILE)"
		}
		fmt.Fprintf(w, "  %s\n      %s [default %s]\n", name, s.Meaning, s.Default)
	}
}
