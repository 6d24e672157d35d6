package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/draw"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/memlimit"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// Defaults match deploy/local/stack, so a service started next to the local stack needs no
// configuration but its secrets.
const (
	DefaultRedisAddr    = "127.0.0.1:16379"
	DefaultMySQLDSN     = "seckill:seckill@tcp(127.0.0.1:13306)/seckill?parseTime=true&clientFoundRows=true&loc=UTC&charset=utf8mb4&interpolateParams=true"
	DefaultKafkaBrokers = "127.0.0.1:19092"
)

// GatewayHeartbeat is how often a gateway reports its unpublished grabs to MySQL (each
// report may itself take up to one interval before it gives up). The reconciler's
// SECKILL_GATEWAY_DEAD_AFTER is validated against it.
const GatewayHeartbeat = time.Second

// Common is what every deployable needs: where the servers are and how to log and stop.
type Common struct {
	RedisAddr     string // one address, or comma-separated seeds of a Redis Cluster (stock.Connect)
	RedisUsername string // ACL user ("" is Redis's default user)
	RedisPassword string
	RedisTLS      *tls.Config   // nil: plaintext
	RedisTimeout  time.Duration // read timeout of one Redis call (go-redis retries after it)
	MySQLDSN      string
	MySQLPassword string      // overrides the DSN's, so the secret need not be in the DSN
	MySQLTLS      *tls.Config // nil: as the DSN says (plaintext by default)
	// The DDL user's DSN and password for gateway migrate; the services run as a DML-only user.
	MySQLMigrateDSN      string
	MySQLMigratePassword string
	Kafka                event.Security // SASL and TLS of every Kafka client
	KafkaBrokers         []string
	Topics               event.Topics
	LogLevel             slog.Level
	ShutdownTimeout      time.Duration
	KeyGrace             time.Duration // Redis keys of a session live until its end + KeyGrace
	// MemLimit is how a service sets the Go runtime's soft memory limit at start
	// (memlimit.Apply): GOMEMLIMIT if set, else SECKILL_MEMLIMIT_RATIO of its cgroup's limit.
	MemLimit memlimit.Config
	// Tracing is the OpenTelemetry variables, read here so --help and docs/operators.md
	// list them; pkg/tracing.Setup decides with them (Tracing.Get), and the OTLP exporter
	// reads its own (endpoint, headers, certificates) from the environment as the
	// specification says.
	Tracing TracingEnv
	// DrawBeacon is the randomness beacon new draws commit a round of (package draw): both
	// the gateway's admin preheat and the reconciler's commit draws, so both read it.
	DrawBeacon draw.BeaconConfig
}

// TracingEnv holds the OTEL_* variables the services read (TracingVars), by name.
type TracingEnv map[string]string

// Get is the variable's value ("" when unset): pkg/tracing.Setup's env.
func (e TracingEnv) Get(key string) string { return e[key] }

// TracingVars are the OpenTelemetry variables every service reads: those pkg/tracing
// decides with, and the exporter's and the resource's that an operator sets most.
var TracingVars = []string{
	"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_HEADERS",
	"OTEL_EXPORTER_OTLP_CERTIFICATE", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_SERVICE_NAME",
	"OTEL_RESOURCE_ATTRIBUTES",
}

func readTracing(r *reader) TracingEnv {
	e := TracingEnv{}
	for _, k := range TracingVars {
		if v := r.str(k, ""); v != "" {
			e[k] = v
		}
	}
	return e
}

func readCommon(r *reader) Common {
	c := Common{
		RedisAddr:            r.addrs("SECKILL_REDIS_ADDR", DefaultRedisAddr),
		RedisUsername:        r.str("SECKILL_REDIS_USERNAME", ""),
		RedisPassword:        r.secretValue("SECKILL_REDIS_PASSWORD", "SECKILL_REDIS_PASSWORD_FILE"),
		RedisTLS:             r.tlsClient(tlsVars{On: "SECKILL_REDIS_TLS", CAFile: "SECKILL_REDIS_CA_FILE", CertFile: "SECKILL_REDIS_CERT_FILE", KeyFile: "SECKILL_REDIS_KEY_FILE", ServerName: "SECKILL_REDIS_TLS_SERVER_NAME"}),
		RedisTimeout:         r.duration("SECKILL_REDIS_TIMEOUT", time.Second, 10*time.Millisecond, time.Minute),
		MySQLDSN:             strings.TrimSpace(r.secretValue("SECKILL_MYSQL_DSN", "SECKILL_MYSQL_DSN_FILE")),
		MySQLPassword:        r.secretValue("SECKILL_MYSQL_PASSWORD", "SECKILL_MYSQL_PASSWORD_FILE"),
		MySQLTLS:             r.tlsClient(tlsVars{On: "SECKILL_MYSQL_TLS", CAFile: "SECKILL_MYSQL_CA_FILE", CertFile: "SECKILL_MYSQL_CERT_FILE", KeyFile: "SECKILL_MYSQL_KEY_FILE", ServerName: "SECKILL_MYSQL_TLS_SERVER_NAME"}),
		MySQLMigrateDSN:      strings.TrimSpace(r.secretValue("SECKILL_MYSQL_MIGRATE_DSN", "SECKILL_MYSQL_MIGRATE_DSN_FILE")),
		MySQLMigratePassword: r.secretValue("SECKILL_MYSQL_MIGRATE_PASSWORD", "SECKILL_MYSQL_MIGRATE_PASSWORD_FILE"),
		KafkaBrokers:         r.list("SECKILL_KAFKA_BROKERS", DefaultKafkaBrokers),
		Topics:               event.DefaultTopics(r.str("SECKILL_TOPIC_PREFIX", "")),
		LogLevel:             r.level("SECKILL_LOG_LEVEL", "info"),
		ShutdownTimeout:      r.duration("SECKILL_SHUTDOWN_TIMEOUT", 15*time.Second, time.Second, 5*time.Minute),
		KeyGrace:             r.duration("SECKILL_KEY_GRACE", time.Hour, time.Minute, 7*24*time.Hour),
		MemLimit: memlimit.Config{
			GOMEMLIMIT: r.str("GOMEMLIMIT", ""),
			Ratio:      r.fraction("SECKILL_MEMLIMIT_RATIO", memlimit.DefaultRatio),
		},
		Tracing:    readTracing(r),
		DrawBeacon: readDrawBeacon(r),
	}
	// The grab topic's partition count is a setting because it can be raised between sales
	// (docs/operators.md, Adding grab partitions): the reconciler maps a prize to its
	// partition by hashing over this count and refuses to start when the broker disagrees.
	c.Topics.Grab.Partitions = r.integer("SECKILL_GRAB_PARTITIONS", c.Topics.Grab.Partitions, 1, 1024)
	if c.MySQLDSN == "" {
		c.MySQLDSN = DefaultMySQLDSN
	}
	if c.MySQLMigrateDSN == "" {
		// Without a DDL user of its own, migrate runs as the service user (the local stack's
		// one user does both).
		c.MySQLMigrateDSN, c.MySQLMigratePassword = c.MySQLDSN, c.MySQLPassword
	}
	// Optimistic locking counts matched rows and session windows are times: without these
	// two DSN options the consumer would misread conflicts and the schedule.
	for _, opt := range []string{"parseTime=true", "clientFoundRows=true"} {
		if !strings.Contains(c.MySQLDSN, opt) {
			r.errs = append(r.errs, fmt.Errorf("SECKILL_MYSQL_DSN must contain %s", opt))
		}
	}
	for _, d := range []struct{ key, dsn string }{{"SECKILL_MYSQL_DSN", c.MySQLDSN}, {"SECKILL_MYSQL_MIGRATE_DSN", c.MySQLMigrateDSN}} {
		// The driver's parse errors quote no part of the DSN, so they may be shown.
		if err := store.CheckDSN(d.dsn, c.MySQLTLS != nil); err != nil {
			r.errs = append(r.errs, fmt.Errorf("%s: %w", d.key, err))
		}
	}
	c.Kafka = r.kafkaSecurity()
	r.checkTransport(c)
	if err := c.Topics.Validate(); err != nil {
		r.errs = append(r.errs, err)
	}
	return c
}

func (r *reader) kafkaSecurity() event.Security {
	sc := event.SecurityConfig{
		Mechanism: r.str("SECKILL_KAFKA_SASL_MECHANISM", "none"),
		Username:  r.str("SECKILL_KAFKA_USERNAME", ""),
		Password:  r.secretValue("SECKILL_KAFKA_PASSWORD", "SECKILL_KAFKA_PASSWORD_FILE"),
		TLS:       r.tlsClient(tlsVars{On: "SECKILL_KAFKA_TLS", CAFile: "SECKILL_KAFKA_CA_FILE", CertFile: "SECKILL_KAFKA_CERT_FILE", KeyFile: "SECKILL_KAFKA_KEY_FILE", ServerName: "SECKILL_KAFKA_TLS_SERVER_NAME"}),
	}
	sec, err := event.NewSecurity(sc)
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("SECKILL_KAFKA_SASL_MECHANISM, SECKILL_KAFKA_USERNAME, SECKILL_KAFKA_PASSWORD: %w", err))
		return sec
	}
	// SASL over plaintext: PLAIN sends the password as is, and even SCRAM's session (every
	// grab event) is then readable and alterable on the way (transport.go).
	if sec.Principal() != "User:ANONYMOUS" && sc.TLS == nil && !r.insecureDev() {
		if brokers := r.list("SECKILL_KAFKA_BROKERS", DefaultKafkaBrokers); !onThisHost(brokers) {
			r.errs = append(r.errs, plaintextRefused("SECKILL_KAFKA_SASL_MECHANISM="+strings.ToLower(strings.TrimSpace(sc.Mechanism))+" credentials",
				"Kafka "+strings.Join(brokers, ","), "set SECKILL_KAFKA_TLS=true (with SECKILL_KAFKA_CA_FILE)"))
		}
	}
	return sec
}

// LoadKafkaSecurity reads only the Kafka SASL and TLS settings (for tools such as kafkainit).
func LoadKafkaSecurity(getenv func(string) string) (event.Security, error) {
	r := newReader(getenv)
	s := r.kafkaSecurity()
	return s, r.err()
}

// Redis is how the services reach Redis (stock.Dial).
func (c Common) Redis() stock.Options {
	return stock.Options{Addr: c.RedisAddr, Username: c.RedisUsername, Password: c.RedisPassword,
		TLS: c.RedisTLS, ReadTimeout: c.RedisTimeout}
}

// MySQL is how the services reach MySQL, as the DML user (store.Connect).
func (c Common) MySQL() store.Conn {
	return store.Conn{DSN: c.MySQLDSN, Password: c.MySQLPassword, TLS: c.MySQLTLS}
}

// MySQLMigrate is how gateway migrate reaches MySQL, as the DDL user.
func (c Common) MySQLMigrate() store.Conn {
	return store.Conn{DSN: c.MySQLMigrateDSN, Password: c.MySQLMigratePassword, TLS: c.MySQLTLS}
}

// LoadCommon reads only the shared settings (for one-shot commands such as migrate, which
// need no secrets).
func LoadCommon(getenv func(string) string) (Common, error) {
	r := newReader(getenv)
	c := readCommon(r)
	return c, r.err()
}

// Gateway configures the HTTP grab/status front and the admin API.
type Gateway struct {
	Common
	HTTPAddr  string // public grab and status API
	AdminAddr string // admin API and operational endpoints, on their own listener
	// AdminToken is the single shared admin credential (named "admin" in the audit logs);
	// AdminTokensFile names a file of per-operator credentials ("name sha256:<hex>" lines,
	// gateway/operator). At least one of the two is required.
	AdminToken      string
	AdminTokensFile string
	// AdminTokenPrevious is the shared credential being rotated out ("": none), accepted as
	// "admin" too while set.
	AdminTokenPrevious string
	JWTSecret          string // HMAC key for user tokens (HS256 only)
	// JWTSecretPrevious is the secret being rotated out ("": none): tokens signed with it
	// are accepted too while it is set. JWTSecretFile and JWTSecretPreviousFile are the files
	// the two came from ("": the environment), which the gateway re-reads while it runs.
	JWTSecretPrevious     string
	JWTSecretFile         string
	JWTSecretPreviousFile string
	// JWTJWKSFile is a JWKS file of the identity provider's public keys (RS256, ES256,
	// EdDSA): the production path, re-read while the gateway runs. With it, JWTSecret is
	// optional (development: HS256 tokens too).
	JWTJWKSFile string
	// JWTJWKSURL is where the identity provider publishes the same document (https, or
	// http to this host's loopback), fetched at start and every JWTJWKSRefresh; one of the
	// file and the URL at most.
	JWTJWKSURL     string
	JWTJWKSRefresh time.Duration
	JWTIssuer      string
	JWTAudience    string
	// JWTMaxLifetime caps a user token's validity (exp minus iat or nbf): the verifier refuses
	// longer ones and gateway token will not mint them.
	JWTMaxLifetime time.Duration

	// TrustUserHeader, when set, names a header an upstream auth proxy fills with the
	// verified user id; on requests from a UserHeaderProxies peer the gateway then skips JWT
	// checks (any other peer needs its bearer token). Off by default; requires
	// UserHeaderProxies, and the proxy must strip the header from client requests.
	TrustUserHeader string
	// UserHeaderProxies are the auth proxies whose TrustUserHeader names the user. A list of
	// its own, apart from TrustedProxies: a load balancer trusted to append the client's
	// address to X-Forwarded-For usually passes the client's other headers on as sent, and
	// would let any client name any user. Empty (the default): the header is never believed.
	UserHeaderProxies []netip.Prefix

	// TrustedProxies are the reverse proxies whose X-Forwarded-For names the client: a
	// request from one of them is rate limited per the address it forwarded for, any other
	// per its own peer address. Empty (the default): X-Forwarded-For is never read.
	TrustedProxies []netip.Prefix

	MaxInflight int // concurrent grab/status requests; beyond it, fast 503s
	// Admission is the adaptive limit on grabs doing their Redis and Kafka work (package
	// gateway/admission): its latency tolerance, bounds and refusals' Retry-After.
	AdmissionTolerance     float64
	AdmissionMin           int
	AdmissionMax           int
	AdmissionRetryAfterMax int
	RatePerUser            float64 // token bucket per user (requests/s; 0 disables)
	BurstPerUser           int
	RatePerIP              float64 // token bucket per client IP (requests/s; 0 disables)
	BurstPerIP             int
	RateMaxKeys            int           // users or IP buckets each limiter holds; the least recently used is evicted
	SoldOutRecheck         time.Duration // how long a local sold-out flag answers before asking Redis again
	ScheduleRefresh        time.Duration // how often the session schedule cache reloads from MySQL
	ProduceTimeout         time.Duration // how long a grab waits for Kafka's acknowledgement
	// KafkaBatchTimeout is the grab writer's batch timeout (event.WithBatchTimeout).
	KafkaBatchTimeout time.Duration
	// KafkaWriters is how many writers the grab events take turns on.
	KafkaWriters int
	RelayQueue   int // grab events the relay holds for Kafka; beyond it they are dropped to the reconciler
	// ReplicaWait is how long a grab whose produce failed waits for a Redis replica to
	// acknowledge its reservation before the 202 (WAIT); without one, the answer is a 503
	// with the request id. 0 turns the wait off (a 202 then rests on one Redis server).
	ReplicaWait time.Duration

	// Stock buckets (docs/design.md). BucketUnits derives a new prize's number of buckets
	// from its stock when the operator names none: ceil(stock / BucketUnits), at most
	// BucketMax (0: off, every such prize gets one bucket). BucketMax also bounds what an
	// operator may ask for. BucketWantedTTL is how long a dry home bucket's wanted flag lives;
	// BucketOthersCache how long a dry bucket's read of the others answers before Redis is
	// read again (and how often demand counts are flushed).
	BucketUnits       int
	BucketMax         int
	BucketWantedTTL   time.Duration
	BucketOthersCache time.Duration

	// ConsumerGroup is the order consumers' group, whose lag the operator console shows.
	ConsumerGroup string
	// ConsoleSession is how long an operator console sign-in lasts at most (its absolute
	// lifetime); ConsoleIdle how long it lasts unused.
	ConsoleSession time.Duration
	ConsoleIdle    time.Duration
	// ConsoleSecret keys the console's session cookies ("": derived from AdminToken, or
	// random per process when there is none, so sessions end at a restart and hold on one
	// gateway only).
	ConsoleSecret string
	// ConsoleLoginRate is how many console sign-ins a remote address may try per minute.
	ConsoleLoginRate int
	// AdminAuthFailures wrong admin bearer tokens a client may present within
	// AdminAuthWindow before it is answered 429 until the window ends (0: no limit).
	AdminAuthFailures int
	AdminAuthWindow   time.Duration
	// AdminHosts are the Host names (optionally host:port) the admin listener answers
	// besides IP addresses and localhost: any other Host is refused (DNS rebinding).
	AdminHosts []string
}

// LoadGateway reads the gateway's configuration.
func LoadGateway(getenv func(string) string) (Gateway, error) {
	r := newReader(getenv)
	g := Gateway{
		Common:                readCommon(r),
		HTTPAddr:              r.str("SECKILL_GATEWAY_ADDR", "127.0.0.1:8080"),
		AdminAddr:             r.str("SECKILL_ADMIN_ADDR", "127.0.0.1:8081"),
		AdminToken:            r.optionalSecret("SECKILL_ADMIN_TOKEN", "SECKILL_ADMIN_TOKEN_FILE", 16),
		AdminTokensFile:       r.str("SECKILL_ADMIN_TOKENS_FILE", ""),
		AdminTokenPrevious:    r.optionalSecret("SECKILL_ADMIN_TOKEN_PREVIOUS", "SECKILL_ADMIN_TOKEN_PREVIOUS_FILE", 16),
		JWTSecret:             jwtSecret(r),
		JWTJWKSFile:           strings.TrimSpace(r.getenv("SECKILL_JWT_JWKS_FILE")),
		JWTJWKSURL:            jwksURL(r),
		JWTJWKSRefresh:        r.duration("SECKILL_JWT_JWKS_REFRESH", 5*time.Minute, time.Second, 24*time.Hour),
		JWTSecretPrevious:     r.previousSecret("SECKILL_JWT_SECRET_PREVIOUS", "SECKILL_JWT_SECRET_PREVIOUS_FILE", 32),
		JWTSecretFile:         strings.TrimSpace(r.getenv("SECKILL_JWT_SECRET_FILE")),
		JWTSecretPreviousFile: strings.TrimSpace(r.getenv("SECKILL_JWT_SECRET_PREVIOUS_FILE")),
		JWTIssuer:             r.str("SECKILL_JWT_ISSUER", "seckill"),
		JWTAudience:           r.str("SECKILL_JWT_AUDIENCE", "seckill-gateway"),
		JWTMaxLifetime:        r.duration("SECKILL_JWT_MAX_LIFETIME", 2*time.Hour, time.Minute, 24*time.Hour),

		TrustUserHeader:   r.getenv("SECKILL_TRUST_USER_HEADER"),
		ConsumerGroup:     r.str("SECKILL_CONSUMER_GROUP", "seckill-orders"),
		ConsoleSession:    r.duration("SECKILL_CONSOLE_SESSION", 12*time.Hour, time.Minute, 7*24*time.Hour),
		ConsoleIdle:       r.duration("SECKILL_CONSOLE_IDLE", 30*time.Minute, time.Minute, 24*time.Hour),
		ConsoleSecret:     r.optionalSecret("SECKILL_CONSOLE_SECRET", "SECKILL_CONSOLE_SECRET_FILE", 32),
		ConsoleLoginRate:  r.integer("SECKILL_CONSOLE_LOGIN_RATE", 10, 1, 1_000_000),
		AdminHosts:        r.hosts("SECKILL_ADMIN_HOSTS"),
		AdminAuthFailures: r.integer("SECKILL_ADMIN_AUTH_FAILURES", 10, 0, 1_000_000),
		AdminAuthWindow:   r.duration("SECKILL_ADMIN_AUTH_WINDOW", 5*time.Minute, time.Second, 24*time.Hour),
		TrustedProxies:    r.prefixes("SECKILL_TRUSTED_PROXIES"),
		UserHeaderProxies: r.prefixes("SECKILL_USER_HEADER_PROXIES"),
		MaxInflight:       r.integer("SECKILL_MAX_INFLIGHT", 4096, 1, 1_000_000),

		AdmissionTolerance:     r.number("SECKILL_ADMISSION_TOLERANCE", 4, 0, 100),
		AdmissionMin:           r.integer("SECKILL_ADMISSION_MIN", 128, 1, 1_000_000),
		AdmissionMax:           r.integer("SECKILL_ADMISSION_MAX", 4096, 1, 1_000_000),
		AdmissionRetryAfterMax: r.integer("SECKILL_ADMISSION_RETRY_AFTER_MAX", 3, 1, 3600),

		RatePerUser:       float64(r.integer("SECKILL_RATE_PER_USER", 5, 0, 1_000_000)),
		BurstPerUser:      r.integer("SECKILL_BURST_PER_USER", 10, 1, 1_000_000),
		RatePerIP:         float64(r.integer("SECKILL_RATE_PER_IP", 2000, 0, 10_000_000)),
		BurstPerIP:        r.integer("SECKILL_BURST_PER_IP", 4000, 1, 10_000_000),
		RateMaxKeys:       r.integer("SECKILL_RATE_MAX_KEYS", 200_000, 100, 10_000_000),
		SoldOutRecheck:    r.duration("SECKILL_SOLDOUT_RECHECK", 250*time.Millisecond, 10*time.Millisecond, time.Minute),
		ScheduleRefresh:   r.duration("SECKILL_SCHEDULE_REFRESH", time.Second, 100*time.Millisecond, time.Minute),
		ProduceTimeout:    r.duration("SECKILL_PRODUCE_TIMEOUT", 3*time.Second, 100*time.Millisecond, time.Minute),
		KafkaBatchTimeout: r.duration("SECKILL_KAFKA_BATCH_TIMEOUT", time.Millisecond, 50*time.Microsecond, 50*time.Millisecond),
		KafkaWriters:      r.integer("SECKILL_KAFKA_WRITERS", 1, 1, 16),
		RelayQueue:        r.integer("SECKILL_RELAY_QUEUE", 100_000, 1, 10_000_000),
		ReplicaWait:       r.duration("SECKILL_GATEWAY_REPLICA_WAIT", time.Second, 0, time.Minute),

		BucketUnits:       r.integer("SECKILL_BUCKET_UNITS", 0, 0, 100_000_000),
		BucketMax:         r.integer("SECKILL_BUCKET_MAX", 16, 1, 1024),
		BucketWantedTTL:   r.duration("SECKILL_BUCKET_WANTED_TTL", 2*time.Second, 100*time.Millisecond, time.Minute),
		BucketOthersCache: r.duration("SECKILL_BUCKET_OTHERS_CACHE", 100*time.Millisecond, 10*time.Millisecond, 10*time.Second),
	}
	// The gateway's memory follows the crowd (connections, requests in flight): without a
	// container limit it still gets a soft one, so the collector works before it grows past it.
	g.MemLimit.Fallback = int64(r.integer("SECKILL_MEMLIMIT_FALLBACK_MIB", 128, 0, 1<<20)) << 20
	if g.AdmissionMin > g.AdmissionMax {
		r.errs = append(r.errs, fmt.Errorf("SECKILL_ADMISSION_MIN=%d is above SECKILL_ADMISSION_MAX=%d", g.AdmissionMin, g.AdmissionMax))
	}
	if g.AdminToken == "" && g.AdminTokensFile == "" {
		r.errs = append(r.errs, fmt.Errorf("SECKILL_ADMIN_TOKEN (or SECKILL_ADMIN_TOKEN_FILE) or SECKILL_ADMIN_TOKENS_FILE is required (an admin credential)"))
	}
	// The user header is believed only from its own proxies: with none named it would either
	// be believed from anyone (anyone who reaches the gateway grabs as any user) or never.
	// A deployment from before the two lists were split named its auth proxy in
	// SECKILL_TRUSTED_PROXIES: it is refused, naming the new variable, rather than either
	// trusting every X-Forwarded-For proxy with the user (the hole the split closes) or
	// answering every user 401 from a gateway that started "fine".
	switch {
	case g.TrustUserHeader != "" && len(g.UserHeaderProxies) == 0 && len(g.TrustedProxies) > 0:
		r.errs = append(r.errs, fmt.Errorf("SECKILL_TRUST_USER_HEADER is set but SECKILL_USER_HEADER_PROXIES is empty: "+
			"SECKILL_TRUSTED_PROXIES now serves X-Forwarded-For only; name the auth proxy that sets %s in SECKILL_USER_HEADER_PROXIES "+
			"(the header is believed only from it)", g.TrustUserHeader))
	case g.TrustUserHeader != "" && len(g.UserHeaderProxies) == 0:
		r.errs = append(r.errs, fmt.Errorf("SECKILL_TRUST_USER_HEADER is set but SECKILL_USER_HEADER_PROXIES is empty: "+
			"name the auth proxy that sets %s in SECKILL_USER_HEADER_PROXIES (the header is believed only from it)", g.TrustUserHeader))
	case g.TrustUserHeader == "" && len(g.UserHeaderProxies) > 0:
		r.errs = append(r.errs, fmt.Errorf("SECKILL_USER_HEADER_PROXIES is set but SECKILL_TRUST_USER_HEADER is empty: "+
			"name the header the auth proxy sets, or unset SECKILL_USER_HEADER_PROXIES"))
	}
	return g, r.err()
}

// jwtSecret reads the HS256 secret: required without a key set (SECKILL_JWT_JWKS_FILE or
// _URL), so a gateway never starts unable to verify any token; optional with one.
func jwtSecret(r *reader) string {
	if strings.TrimSpace(r.getenv("SECKILL_JWT_JWKS_FILE")) != "" || strings.TrimSpace(r.getenv("SECKILL_JWT_JWKS_URL")) != "" {
		return r.optionalSecret("SECKILL_JWT_SECRET", "SECKILL_JWT_SECRET_FILE", 32)
	}
	return r.secret("SECKILL_JWT_SECRET", "SECKILL_JWT_SECRET_FILE", 32)
}

// jwksURL reads SECKILL_JWT_JWKS_URL: https, or http to this host's loopback (or on a
// development stack): a key set fetched in plaintext across a network is one an attacker
// in the path chooses, and with it every user's token.
func jwksURL(r *reader) string {
	raw := strings.TrimSpace(r.getenv("SECKILL_JWT_JWKS_URL"))
	if raw == "" {
		return ""
	}
	if strings.TrimSpace(r.getenv("SECKILL_JWT_JWKS_FILE")) != "" {
		r.errs = append(r.errs, fmt.Errorf("SECKILL_JWT_JWKS_FILE and SECKILL_JWT_JWKS_URL are both set: set one"))
		return ""
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		r.errs = append(r.errs, fmt.Errorf("SECKILL_JWT_JWKS_URL=%q: want an https:// URL", raw))
		return ""
	case u.Scheme == "http" && !loopbackHost(u.Hostname()) && !r.insecureDev():
		r.errs = append(r.errs, fmt.Errorf("SECKILL_JWT_JWKS_URL=%q: the key set would be fetched in plaintext from another host "+
			"(whoever is in the path could choose the keys): use https, or set %s=1 on a development stack", raw, InsecureDevVar))
		return ""
	}
	return raw
}

// Consumer configures the grab-event consumer group.
type Consumer struct {
	Common
	HTTPAddr  string // health and metrics
	GroupID   string
	BatchSize int
	BatchWait time.Duration
	// ReadAhead bounds the bytes of messages a partition's worker holds read and not yet
	// processed: its batch and the next ones (pkg/readahead).
	ReadAhead int
	// FeedbackGroup is the group consuming downstream's order feedback (paid, cancelled).
	FeedbackGroup string
}

// LoadConsumer reads the consumer's configuration.
func LoadConsumer(getenv func(string) string) (Consumer, error) {
	r := newReader(getenv)
	c := Consumer{
		Common:    readCommon(r),
		HTTPAddr:  r.str("SECKILL_CONSUMER_ADDR", "127.0.0.1:8082"),
		GroupID:   r.str("SECKILL_CONSUMER_GROUP", "seckill-orders"),
		BatchSize: r.integer("SECKILL_BATCH_SIZE", 1000, 1, 10000),
		BatchWait: r.duration("SECKILL_BATCH_WAIT", 5*time.Millisecond, 0, 10*time.Second),
		ReadAhead: r.integer("SECKILL_READ_AHEAD_BYTES", 4<<20, 64<<10, 1<<30),

		FeedbackGroup: r.str("SECKILL_FEEDBACK_GROUP", "seckill-order-feedback"),
	}
	return c, r.err()
}

// Reconciler configures the scheduled reconciliation job.
type Reconciler struct {
	Common
	HTTPAddr    string // health and metrics (scheduler mode)
	Interval    time.Duration
	PreheatLead time.Duration
	LeaseName   string        // the single-actor lease; instances sharing it take turns
	LeaseTTL    time.Duration // renewed every third of it while held

	ConsumerGroup  string        // the order consumers' group, whose lag says what is in flight
	FeedbackGroup  string        // the feedback consumers' group: no payment timeout while it has the order's reports unread
	StaleAfter     time.Duration // a reservation older than this without an order is stale
	RepublishBound time.Duration // ... and re-published even while its partition is busy once this old
	CatchUpWait    time.Duration // how long a run waits for consumer lag 0 before rebuilding keys
	// GatewayDeadAfter is how old a gateway's heartbeat must be before the key rebuild stops
	// waiting for the unpublished grabs it reported: long enough that a gateway which merely
	// could not reach MySQL for a while (a blip, a failover) is still waited for.
	GatewayDeadAfter time.Duration
	ReplayBudget     time.Duration // how long one run may spend replaying the compensation topic

	// When automation hands over to a person (an exception case on the workbench).
	StaleCaseAfter time.Duration // a reservation still without an order this long after admission
	DriftCaseRuns  int           // drift left uncorrected by this many consecutive runs

	// RebalanceInterval is the period of the rebalance loop that moves units between a
	// bucketed prize's stock buckets (docs/design.md): a dry home bucket answers 503
	// rebalancing for about this long before units arrive.
	RebalanceInterval time.Duration
	// BucketPrizesRefresh is how long the rebalance loop keeps its list of the open
	// sessions' bucketed prizes before reading it from MySQL again (0: every round).
	BucketPrizesRefresh time.Duration

	// DrawInterval is the period of the draw loop (package draw): how soon after an entry
	// window closes its draw freezes, ranks and admits winners, and how soon a returned unit
	// reaches the waitlist. DrawPage is how many places one round of admissions offers
	// before it records the cutoff (what a reconciler killed mid-draw leaves to repeat).
	DrawInterval time.Duration
	DrawPage     int

	// MySQLReplicaDSN names a replica of the writer whose replication the reconciler exports
	// (seckill_mysql_replica_* gauges; empty: none). Nothing in the pipeline reads from it.
	MySQLReplicaDSN string
}

// LoadReconciler reads the reconciler's configuration.
func LoadReconciler(getenv func(string) string) (Reconciler, error) {
	r := newReader(getenv)
	c := Reconciler{
		Common:      readCommon(r),
		HTTPAddr:    r.str("SECKILL_RECONCILER_ADDR", "127.0.0.1:8083"),
		Interval:    r.duration("SECKILL_RECONCILE_INTERVAL", 10*time.Second, time.Second, time.Hour),
		PreheatLead: r.duration("SECKILL_PREHEAT_LEAD", 5*time.Minute, 0, 24*time.Hour),
		LeaseName:   r.str("SECKILL_RECONCILER_LEASE", "seckill-reconciler"),
		LeaseTTL:    r.duration("SECKILL_LEASE_TTL", 15*time.Second, time.Second, 10*time.Minute),

		ConsumerGroup:       r.str("SECKILL_CONSUMER_GROUP", "seckill-orders"),
		FeedbackGroup:       r.str("SECKILL_FEEDBACK_GROUP", "seckill-order-feedback"),
		StaleAfter:          r.duration("SECKILL_STALE_AFTER", 10*time.Second, 100*time.Millisecond, time.Hour),
		RepublishBound:      r.duration("SECKILL_REPUBLISH_BOUND", time.Minute, 100*time.Millisecond, 24*time.Hour),
		CatchUpWait:         r.duration("SECKILL_CATCHUP_WAIT", 20*time.Second, 0, 10*time.Minute),
		GatewayDeadAfter:    r.duration("SECKILL_GATEWAY_DEAD_AFTER", 30*time.Second, 0, time.Hour),
		ReplayBudget:        r.duration("SECKILL_REPLAY_BUDGET", 30*time.Second, time.Second, time.Hour),
		StaleCaseAfter:      r.duration("SECKILL_STALE_CASE_AFTER", 5*time.Minute, time.Second, 24*time.Hour),
		DriftCaseRuns:       r.integer("SECKILL_DRIFT_CASE_RUNS", 3, 1, 1000),
		RebalanceInterval:   r.duration("SECKILL_BUCKET_REBALANCE_INTERVAL", 250*time.Millisecond, 10*time.Millisecond, 10*time.Second),
		BucketPrizesRefresh: r.duration("SECKILL_BUCKET_PRIZES_REFRESH", 5*time.Second, 0, 10*time.Minute),
		DrawInterval:        r.duration("SECKILL_DRAW_INTERVAL", time.Second, 100*time.Millisecond, time.Minute),
		DrawPage:            r.integer("SECKILL_DRAW_PAGE", 500, 1, 10_000),
		MySQLReplicaDSN:     strings.TrimSpace(r.secretValue("SECKILL_MYSQL_REPLICA_DSN", "SECKILL_MYSQL_REPLICA_DSN_FILE")),
	}
	if c.MySQLReplicaDSN != "" {
		if err := store.CheckDSN(c.MySQLReplicaDSN, c.MySQLTLS != nil); err != nil {
			r.errs = append(r.errs, fmt.Errorf("SECKILL_MYSQL_REPLICA_DSN: %w", err))
		} else if !r.insecureDev() {
			if err := checkMySQLTransport("SECKILL_MYSQL_REPLICA_DSN", c.MySQLReplicaDSN, "", c.MySQLTLS != nil); err != nil {
				r.errs = append(r.errs, err)
			}
		}
	}
	if c.RepublishBound < c.StaleAfter {
		r.errs = append(r.errs, fmt.Errorf("SECKILL_REPUBLISH_BOUND=%s: shorter than SECKILL_STALE_AFTER (%s)", c.RepublishBound, c.StaleAfter))
	}
	// The lifecycle job keeps the keys of a prize with pending reservations until now plus
	// the key grace, each run: a run must come before that expiry.
	if c.Interval >= c.KeyGrace {
		r.errs = append(r.errs, fmt.Errorf("SECKILL_RECONCILE_INTERVAL=%s: not shorter than SECKILL_KEY_GRACE (%s): keys kept for pending reservations would expire between runs", c.Interval, c.KeyGrace))
	}
	// A live gateway's last committed beat can be one interval plus one report's timeout old;
	// a shorter limit would take a gateway that is merely between beats for dead.
	if c.GatewayDeadAfter <= 2*GatewayHeartbeat {
		r.errs = append(r.errs, fmt.Errorf("SECKILL_GATEWAY_DEAD_AFTER=%s: must exceed twice the gateways' heartbeat interval (%s), and should outlast a MySQL blip", c.GatewayDeadAfter, GatewayHeartbeat))
	}
	if c.StaleCaseAfter < c.RepublishBound {
		r.errs = append(r.errs, fmt.Errorf("SECKILL_STALE_CASE_AFTER=%s: shorter than SECKILL_REPUBLISH_BOUND (%s): a person would get reservations the reconciler has not re-published yet", c.StaleCaseAfter, c.RepublishBound))
	}
	return c, r.err()
}

// readDrawBeacon reads the draws' beacon: a drand network's scheme and public key, its
// genesis time (unix seconds) and period. No scheme: no beacon. A scheme with a key drand's
// library refuses stops the service at start.
func readDrawBeacon(r *reader) draw.BeaconConfig {
	b := draw.BeaconConfig{Scheme: r.str("SECKILL_DRAW_BEACON_SCHEME", "")}
	key := r.str("SECKILL_DRAW_BEACON_PUBLIC_KEY", "")
	genesis := int64(r.integer("SECKILL_DRAW_BEACON_GENESIS", 0, 0, math.MaxInt32))
	period := r.duration("SECKILL_DRAW_BEACON_PERIOD", 3*time.Second, time.Second, time.Hour)
	if b.Scheme == "" {
		if key != "" {
			r.errs = append(r.errs, errors.New("SECKILL_DRAW_BEACON_PUBLIC_KEY is set without SECKILL_DRAW_BEACON_SCHEME"))
		}
		return b
	}
	if _, err := draw.NewDrand(b.Scheme, key); err != nil {
		r.errs = append(r.errs, fmt.Errorf("SECKILL_DRAW_BEACON_SCHEME, SECKILL_DRAW_BEACON_PUBLIC_KEY: %w", err))
	}
	if genesis == 0 {
		r.errs = append(r.errs, errors.New("SECKILL_DRAW_BEACON_GENESIS: required with a beacon (its first round's unix time)"))
	}
	b.PublicKey, b.Genesis, b.Period = key, time.Unix(genesis, 0).UTC(), period
	return b
}
