// Package stacktest finds the local real stack (deploy/local/stack) for integration tests
// and gives each test its own Redis key prefix, MySQL database and Kafka topics, cleaned up
// when the test ends. When the stack is missing a test is skipped, except under CI (CI set),
// where it fails loudly: a CI run that skipped its integration tests proved nothing.
package stacktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"gorm.io/gorm"

	"github.com/seckill-pipeline/seckill/pkg/config"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

func env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// RedisAddr, MySQLDSN and KafkaBrokers are where the stack is, from the same variables
// (and defaults) the services read.
func RedisAddr() string { return env("SECKILL_REDIS_ADDR", config.DefaultRedisAddr) }
func MySQLDSN() string  { return env("SECKILL_MYSQL_DSN", config.DefaultMySQLDSN) }
func KafkaBrokers() []string {
	return strings.Split(env("SECKILL_KAFKA_BROKERS", config.DefaultKafkaBrokers), ",")
}

// settings are the servers' credentials and TLS from the same variables the services read
// (SECKILL_REDIS_USERNAME, SECKILL_KAFKA_SASL_MECHANISM, SECKILL_MYSQL_TLS, their *_FILE
// secrets...), so the integration tests run unchanged on the secure profile.
func settings(tb testing.TB) config.Common {
	tb.Helper()
	c, err := config.LoadCommon(os.Getenv)
	if err != nil {
		tb.Fatalf("the stack's variables: %v", err)
	}
	return c
}

// RedisOptions is how to reach the Redis at addr with the stack's user and TLS.
func RedisOptions(tb testing.TB, addr string) stock.Options {
	tb.Helper()
	o := settings(tb).Redis()
	o.Addr, o.ReadTimeout = addr, time.Second
	if o.TLS != nil {
		// Decrypting a large reply costs CPU: one HGETALL of 200,000 fields took 0.9 s over
		// TLS under -race on two busy cores (TestSnapshotStaysO1WithManyReservations timed out).
		o.ReadTimeout = 3 * time.Second
	}
	return o
}

// KafkaSecurity is the SASL and TLS settings of the stack's brokers (none on the plain stack).
func KafkaSecurity(tb testing.TB) event.Security {
	tb.Helper()
	return settings(tb).Kafka
}

// KafkaTransport is the transport of kafka-go clients a test builds itself (kafka.Client,
// kafka.Writer) with the stack's SASL and TLS; nil (kafka-go's default) on the plain stack.
func KafkaTransport(tb testing.TB) kafka.RoundTripper {
	tb.Helper()
	if t := KafkaSecurity(tb).Transport(); t != nil {
		return t
	}
	return nil
}

// KafkaClient is a kafka-go client of brokers with the stack's SASL and TLS.
func KafkaClient(tb testing.TB, brokers []string) *kafka.Client {
	tb.Helper()
	return &kafka.Client{Addr: kafka.TCP(brokers...), Transport: KafkaTransport(tb)}
}

// KafkaAdmin is an admin client of brokers with the stack's SASL and TLS settings.
func KafkaAdmin(tb testing.TB, brokers []string) *event.Admin {
	tb.Helper()
	admin, err := event.NewAdmin(brokers, event.AdminSecurity(KafkaSecurity(tb)))
	if err != nil {
		tb.Fatal(err)
	}
	return admin
}

// MySQLConn is dsn with the stack's MySQL password (SECKILL_MYSQL_PASSWORD, kept beside the
// DSN on the secure profile) and TLS.
func MySQLConn(tb testing.TB, dsn string) store.Conn {
	tb.Helper()
	c := settings(tb).MySQL()
	c.DSN = dsn
	return c
}

// OpenMySQL opens dsn as MySQLConn says.
func OpenMySQL(ctx context.Context, tb testing.TB, dsn string) (*gorm.DB, error) {
	tb.Helper()
	return store.Connect(ctx, MySQLConn(tb, dsn))
}

func unavailable(tb testing.TB, what string, err error) {
	tb.Helper()
	msg := fmt.Sprintf("%s unavailable: %v (start it with: deploy/local/stack up)", what, err)
	if os.Getenv("CI") != "" {
		tb.Fatal(msg)
	}
	tb.Skip(msg)
}

// ID returns a short random id for names that must not collide between tests and runs.
func ID(tb testing.TB) string {
	tb.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		tb.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// Context returns a context that ends with the test or after d.
func Context(tb testing.TB, d time.Duration) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}

// Redis connects to the stack's Redis: one server, or a Redis Cluster when
// SECKILL_REDIS_ADDR names one (the cluster profile's variables), and then any CROSSSLOT
// error fails the test (GuardCrossSlot). Tests keep to keys under their own prefix (ID).
func Redis(tb testing.TB) redis.UniversalClient {
	tb.Helper()
	rdb, err := stock.Dial(Context(tb, 5*time.Second), RedisOptions(tb, RedisAddr()))
	if err != nil {
		unavailable(tb, "redis", err)
	}
	tb.Cleanup(func() { _ = rdb.Close() })
	if _, ok := rdb.(*redis.ClusterClient); ok {
		GuardCrossSlot(tb, rdb)
	}
	return rdb
}

// SingleRedisAddr is the stack's Redis address for a test that puts a TCP proxy in front of
// one server (lost and late replies). Such a proxy cannot stand in front of a Redis Cluster
// (a cluster client follows the nodes' own addresses), so there the test is skipped.
func SingleRedisAddr(tb testing.TB) string {
	tb.Helper()
	if _, ok := Redis(tb).(*redis.ClusterClient); ok {
		tb.Skip("SECKILL_REDIS_ADDR is a Redis Cluster: a TCP proxy in front of one server cannot stand in for it")
	}
	return RedisAddr()
}

// DefaultClusterRedisAddr is the cluster profile's Redis Cluster (deploy/local/cluster.sh).
const DefaultClusterRedisAddr = "127.0.0.1:17001,127.0.0.1:17002,127.0.0.1:17003,127.0.0.1:17004,127.0.0.1:17005,127.0.0.1:17006"

// ClusterRedisAddr is where the cluster profile's Redis Cluster is: SECKILL_CLUSTER_REDIS_ADDR,
// else its six nodes on their default ports.
func ClusterRedisAddr() string { return env("SECKILL_CLUSTER_REDIS_ADDR", DefaultClusterRedisAddr) }

// ClusterRedis connects to the cluster profile's Redis Cluster (`deploy/local/stack up
// --profile cluster`), whatever SECKILL_REDIS_ADDR says, so the single-node run of the
// suite also runs the cluster tests when the cluster is up. Without it the test is skipped,
// under CI too (CI runs no cluster), unless SECKILL_CLUSTER=1 says it must be up: then it
// fails. Any CROSSSLOT error on the client fails the test.
func ClusterRedis(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	rdb, err := stock.Dial(Context(tb, 5*time.Second), RedisOptions(tb, ClusterRedisAddr()))
	if err != nil {
		msg := fmt.Sprintf("redis cluster unavailable: %v (start it with: deploy/local/stack up --profile cluster)", err)
		if os.Getenv("SECKILL_CLUSTER") == "1" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	tb.Cleanup(func() { _ = rdb.Close() })
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		tb.Fatalf("redis at %s is not a cluster", ClusterRedisAddr())
	}
	GuardCrossSlot(tb, cc)
	return cc
}

// DefaultClusterKafkaBrokers are the cluster profile's three Kafka nodes.
const DefaultClusterKafkaBrokers = "127.0.0.1:29091,127.0.0.1:29092,127.0.0.1:29093"

// ClusterKafka returns the cluster profile's brokers (SECKILL_CLUSTER_KAFKA_BROKERS, else
// its three nodes on their default ports) once all three answer, with the same skip rule
// as ClusterRedis.
func ClusterKafka(tb testing.TB) []string {
	tb.Helper()
	brokers := strings.Split(env("SECKILL_CLUSTER_KAFKA_BROKERS", DefaultClusterKafkaBrokers), ",")
	for _, b := range brokers {
		admin, err := event.NewAdmin([]string{b}, event.AdminSecurity(KafkaSecurity(tb)))
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			err = admin.Ping(ctx)
			cancel()
		}
		if err != nil {
			msg := fmt.Sprintf("kafka cluster broker %s unavailable: %v (start it with: deploy/local/stack up --profile cluster)", b, err)
			if os.Getenv("SECKILL_CLUSTER") == "1" {
				tb.Fatal(msg)
			}
			tb.Skip(msg)
		}
	}
	return brokers
}

// GuardCrossSlot fails the test when it ends if any command or pipeline on rdb got a
// CROSSSLOT error (keys of one call in different cluster slots), even one the code under
// test swallowed.
func GuardCrossSlot(tb testing.TB, rdb redis.UniversalClient) {
	tb.Helper()
	g := &crossSlotGuard{}
	rdb.AddHook(g)
	tb.Cleanup(func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if len(g.seen) > 0 {
			tb.Errorf("%d CROSSSLOT errors, first: %s", len(g.seen), g.seen[0])
		}
	})
}

type crossSlotGuard struct {
	mu   sync.Mutex
	seen []string
}

func (g *crossSlotGuard) check(cmds ...redis.Cmder) {
	for _, c := range cmds {
		if err := c.Err(); err != nil && strings.HasPrefix(err.Error(), "CROSSSLOT") {
			g.mu.Lock()
			g.seen = append(g.seen, fmt.Sprintf("%v: %v", c.Args(), err))
			g.mu.Unlock()
		}
	}
}

func (g *crossSlotGuard) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *crossSlotGuard) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		g.check(cmd)
		return err
	}
}

func (g *crossSlotGuard) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		g.check(cmds...)
		return err
	}
}

// MySQL creates a fresh database for the test, returns its DSN and a gorm handle on it,
// and drops it when the test ends.
func MySQL(tb testing.TB) (string, *gorm.DB) {
	tb.Helper()
	ctx := Context(tb, 10*time.Second)
	base, err := OpenMySQL(ctx, tb, MySQLDSN())
	if err != nil {
		unavailable(tb, "mysql", err)
	}
	tb.Cleanup(func() { _ = store.Close(base) })
	cfg, err := mysql.ParseDSN(MySQLDSN())
	if err != nil {
		tb.Fatalf("parse SECKILL_MYSQL_DSN: %v", err)
	}
	cfg.DBName = "seckill_t_" + ID(tb)
	if err := base.WithContext(ctx).Exec("CREATE DATABASE `" + cfg.DBName + "`").Error; err != nil {
		tb.Fatalf("create test database: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = base.WithContext(ctx).Exec("DROP DATABASE IF EXISTS `" + cfg.DBName + "`").Error
	})
	dsn := cfg.FormatDSN()
	db, err := OpenMySQL(ctx, tb, dsn)
	if err != nil {
		tb.Fatalf("open test database: %v", err)
	}
	tb.Cleanup(func() { _ = store.Close(db) })
	return dsn, db
}

// Kafka creates the pipeline's topics under a prefix of the test's own and deletes them
// when the test ends. It returns the brokers and the topics.
func Kafka(tb testing.TB) ([]string, event.Topics) {
	tb.Helper()
	brokers := KafkaBrokers()
	admin := KafkaAdmin(tb, brokers)
	ctx := Context(tb, 30*time.Second)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := admin.Ping(pctx); err != nil {
		unavailable(tb, "kafka", err)
	}
	topics := event.DefaultTopics("t" + ID(tb))
	if err := admin.EnsureTopics(ctx, topics.All()...); err != nil {
		tb.Fatalf("create test topics: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		names := make([]string, 0, 4)
		for _, t := range topics.All() {
			names = append(names, t.Name)
		}
		_ = admin.DeleteTopics(ctx, names...)
	})
	return brokers, topics
}

// FreeAddr returns a loopback address with a port that was free a moment ago.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Getenv returns a getenv function that answers from vars first and the process
// environment second, so a test can configure a service without touching os.Environ.
func Getenv(vars map[string]string) func(string) string {
	return func(k string) string {
		if v, ok := vars[k]; ok {
			return v
		}
		return os.Getenv(k)
	}
}

// WaitHTTP polls url until it answers 200 or the deadline passes.
func WaitHTTP(tb testing.TB, url string, d time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(d)
	client := &http.Client{Timeout: time.Second}
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s not ready after %s (last: %v)", url, d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Migrated returns a fresh, migrated test database whose session and prize ids start at a
// random high number, so the Redis keys of tests (and of a local demo sharing the Redis)
// never collide.
func Migrated(tb testing.TB) (string, *gorm.DB) {
	tb.Helper()
	dsn, db := MySQL(tb)
	ctx := Context(tb, 30*time.Second)
	if _, err := store.Migrate(ctx, db); err != nil {
		tb.Fatalf("migrate test database: %v", err)
	}
	var base [2]uint32
	for i := range base {
		b := make([]byte, 4)
		if _, err := rand.Read(b); err != nil {
			tb.Fatal(err)
		}
		base[i] = (uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2])) + 1
	}
	for i, table := range []string{"sessions", "prizes"} {
		stmt := fmt.Sprintf("ALTER TABLE %s AUTO_INCREMENT = %d", table, uint64(base[i])*1000+1_000_000_000)
		if err := db.WithContext(ctx).Exec(stmt).Error; err != nil {
			tb.Fatalf("%s: %v", stmt, err)
		}
	}
	return dsn, db
}

// CleanupKeys deletes, when the test ends, the Redis keys of every session×prize in db.
func CleanupKeys(tb testing.TB, rdb redis.UniversalClient, db *gorm.DB) {
	tb.Helper()
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var pairs []struct{ SessionID, PrizeID int64 }
		if err := db.WithContext(ctx).Table("session_stocks").Select("session_id, prize_id").Find(&pairs).Error; err != nil {
			return
		}
		for _, p := range pairs {
			k := stock.KeysFor(p.SessionID, p.PrizeID)
			rdb.Del(ctx, k.Meta, k.Users, k.Reserved, k.Outcomes, k.Returned)
		}
	})
}

// OpenPrize is the one prize of a fresh test activity whose only session is open now, with
// redisStock loaded into the gate (dbStock in MySQL: the two differ to test drift).
type OpenPrize struct {
	DSN       string
	DB        *gorm.DB
	Redis     redis.UniversalClient
	Gate      *stock.Gate
	SessionID int64
	PrizeID   int64
}

// NewOpenPrize creates it on a migrated test database; its keys are removed at the end.
func NewOpenPrize(tb testing.TB, dbStock, redisStock, limit int) *OpenPrize {
	tb.Helper()
	dsn, db := Migrated(tb)
	rdb := Redis(tb)
	CleanupKeys(tb, rdb, db)
	ctx := Context(tb, 30*time.Second)
	now := time.Now().UTC()
	cat := store.NewCatalog(db, func() time.Time { return now })
	act, err := cat.CreateActivity(ctx, seckill.Activity{Name: "test sale", WindowStart: now.Add(-time.Minute),
		WindowEnd: now.Add(time.Hour), Interval: time.Hour, SessionLength: time.Hour, PerUserLimit: limit,
		Prizes: []seckill.Prize{{Name: "p", StockPerSession: dbStock}}})
	if err != nil {
		tb.Fatal(err)
	}
	sessions, err := cat.Sessions(ctx, act.ID)
	if err != nil {
		tb.Fatal(err)
	}
	gate, err := stock.NewGate(ctx, rdb)
	if err != nil {
		tb.Fatal(err)
	}
	st := seckill.Stock{SessionID: sessions[0].ID, PrizeID: act.Prizes[0].ID, Total: redisStock, Left: redisStock, PerUserLimit: limit}
	if _, err := gate.Load(ctx, []seckill.Stock{st}, now.Add(2*time.Hour)); err != nil {
		tb.Fatal(err)
	}
	return &OpenPrize{DSN: dsn, DB: db, Redis: rdb, Gate: gate, SessionID: st.SessionID, PrizeID: st.PrizeID}
}

// NewBucketedPrize is NewOpenPrize for a prize whose stock is split into n stock buckets of
// perBucket units each (docs/design.md), every bucket loaded into Redis from its row and its
// ledger, as preheat does. Every bucket's keys are removed at the end.
func NewBucketedPrize(tb testing.TB, perBucket, n, limit int) *OpenPrize {
	tb.Helper()
	dsn, db := Migrated(tb)
	rdb := Redis(tb)
	ctx := Context(tb, 30*time.Second)
	now := time.Now().UTC()
	cat := store.NewCatalog(db, func() time.Time { return now })
	act, err := cat.CreateActivity(ctx, seckill.Activity{Name: "bucketed sale", WindowStart: now.Add(-time.Minute),
		WindowEnd: now.Add(time.Hour), Interval: time.Hour, SessionLength: time.Hour, PerUserLimit: limit,
		Prizes: []seckill.Prize{{Name: "hot", StockPerSession: perBucket * n}}})
	if err != nil {
		tb.Fatal(err)
	}
	sessions, err := cat.Sessions(ctx, act.ID)
	if err != nil {
		tb.Fatal(err)
	}
	sid, pid := sessions[0].ID, act.Prizes[0].ID
	if err := cat.CreateBuckets(ctx, sid, pid, n); err != nil {
		tb.Fatal(err)
	}
	gate, err := stock.NewGate(ctx, rdb)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		for b := range n {
			k := stock.BucketKeysFor(sid, pid, b, n)
			// One call per bucket: a cluster refuses keys of two slots in one DEL.
			rdb.Del(context.Background(), k.Meta, k.Users, k.Reserved, k.Outcomes, k.Fence, k.Returned, k.Transfers(),
				strings.TrimSuffix(k.Meta, "meta")+"rev")
		}
	})
	bs, err := cat.Buckets(ctx, sid, pid)
	if err != nil {
		tb.Fatal(err)
	}
	led, err := cat.Ledger(ctx, sid, pid, n)
	if err != nil {
		tb.Fatal(err)
	}
	for _, b := range bs {
		st := seckill.Stock{SessionID: sid, PrizeID: pid, Total: b.Total, Left: b.Left, Version: b.Version, PerUserLimit: limit}
		if r, err := gate.LoadBucket(ctx, st, b.Bucket, n, led[b.Bucket], now.Add(2*time.Hour)); err != nil || !r.Loaded {
			tb.Fatalf("load bucket %d: %+v %v", b.Bucket, r, err)
		}
	}
	return &OpenPrize{DSN: dsn, DB: db, Redis: rdb, Gate: gate, SessionID: sid, PrizeID: pid}
}
