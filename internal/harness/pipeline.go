package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"gorm.io/gorm"

	"github.com/seckill-pipeline/seckill/internal/history"
	"github.com/seckill-pipeline/seckill/pkg/auth"
	"github.com/seckill-pipeline/seckill/pkg/config"
	"github.com/seckill-pipeline/seckill/pkg/draw"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/preheat"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// Options shape one pipeline.
type Options struct {
	Bin        string // folder with the built deployables (Build)
	Stocks     []int  // stock per prize
	Buckets    []int  // stock buckets per prize, by index (absent or below 2: none)
	Limit      int    // per-user limit
	Consumers  int    // consumer processes
	GatewayEnv map[string]string
	Log        io.Writer

	PaymentTimeout    time.Duration     // the activity's payment timeout (0: none)
	RegrabAfterCancel bool              // the activity lets a buyer whose order was cancelled grab again
	ConsumerEnv       map[string]string // added to the consumers' environment

	// The cluster profile's shape (fleet.go): more than one gateway runs them behind
	// HAProxy, and Reconcilers more than one start that many under the one lease.
	Gateways    int
	Reconcilers int
	BehindProxy bool // HAProxy in front even of one gateway (the bench's 1 vs 2)
	// NoProxy runs several gateways without HAProxy (the single profile has none): the crowd
	// spreads its clicks over them itself and tries another on a refused connection.
	NoProxy     bool
	Replication *event.Replication // the topics' replication (nil: the brokers' defaults)
	// OpensLater makes the session open an hour after the pipeline is made instead of 2 s
	// (open by the time the services are up), for a row that opens it itself (OpenIn); the
	// stock is preheated at once either way.
	OpensLater bool
	// OpensIn, when set, opens the session that long after the pipeline is made, and
	// NewPipeline returns without waiting for it (a draw's row tries entries before it).
	OpensIn time.Duration
	// Draws are the entry windows of prizes given by a draw (package draw), by index
	// (absent or 0: first come, first served); Beacon the beacon their draws commit to.
	Draws  []time.Duration
	Beacon draw.BeaconConfig
}

// Pipeline is the three deployables as processes on the local stack, isolated from every
// other run: its own MySQL database, topics, consumer groups, lease and Redis keys. (Not a
// cluster: "cluster" means replicated servers, the cluster profile's.)
type Pipeline struct {
	opts    Options
	ID      string
	DSN     string
	DB      *gorm.DB
	Redis   redis.UniversalClient
	Brokers []string
	Topics  event.Topics
	Admin   *event.Admin
	Gate    *stock.Gate
	Session seckill.Session
	Prizes  []seckill.Prize
	Signer  *auth.Signer
	Env     map[string]string
	kafka   event.Security // the brokers' SASL and TLS, for the harness's own writers

	GatewayAddr string
	Gateway     *Proc
	Consumers   []*Proc
	Reconciler  *Proc

	// The cluster profile's fleet (fleet.go): gateways behind HAProxy (GatewayAddr is then
	// the proxy's), every reconciler (Reconciler is the first) and their addresses.
	Gateways     []*Proc
	gatewayAddrs []string
	haproxy      *Proc
	Reconcilers  []*Proc
	procAddr     map[*Proc]string
	isolations   []*isolation // gateways in network namespaces of their own (netns.go)

	base *gorm.DB
	dirs []string // removed on Close (builds made for a scenario)

	// History records every client operation of the row (internal/history): the crowd's
	// grabs and reads, the final reads, downstream feedback, deliberate stock changes.
	History *history.Recorder

	feedback     *kafka.Writer // downstream feedback, written by scenarios (Feedback)
	feedbackOnce sync.Once
	feedbackErr  error
}

func env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func randomID() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// FreeAddr returns a loopback address whose port was free a moment ago, drawn below the
// kernel's ephemeral range. A port the kernel hands out for port 0 is an ephemeral one, and
// between this check and the server's bind an outgoing connection may take it: the open
// bench's 2,000 client connections did, and a gateway failed to start with "address already
// in use". Ports below the range are never given to outgoing connections; when the range
// starts too low to leave room, the kernel's choice it is.
func FreeAddr() (string, error) {
	if low := ephemeralLow(); low > freePortFloor+1000 {
		for range 50 {
			port := freePortFloor + mrand.IntN(low-freePortFloor)
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			if err != nil {
				continue // taken: draw another
			}
			addr := ln.Addr().String()
			ln.Close()
			return addr, nil
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// freePortFloor is the lowest port FreeAddr draws: above the well-known and most registered
// servers' ports (the stack's own are below it or fixed).
const freePortFloor = 20000

// ephemeralLow is the first port of the kernel's ephemeral range (0 when unknown).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return n
}

// NewPipeline creates the database, topics and an activity whose only session opens two
// seconds from now with the given prizes, preheats it, and starts the processes.
func NewPipeline(ctx context.Context, o Options) (*Pipeline, error) {
	c := &Pipeline{opts: o, ID: randomID(), History: history.NewRecorder(),
		Brokers: strings.Split(env("SECKILL_KAFKA_BROKERS", config.DefaultKafkaBrokers), ",")}
	if err := c.setup(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Pipeline) setup(ctx context.Context) error {
	// The servers' credentials and TLS from the variables the services read (the secure
	// profile's users and CA), for the harness's own clients.
	common, err := config.LoadCommon(os.Getenv)
	if err != nil {
		return err
	}
	c.kafka = common.Kafka
	conn := common.MySQL()
	baseDSN := conn.DSN
	if c.base, err = store.Connect(ctx, conn); err != nil {
		return err
	}
	cfg, err := mysql.ParseDSN(baseDSN)
	if err != nil {
		return err
	}
	cfg.DBName = "seckill_chaos_" + c.ID
	if err := c.base.Exec("CREATE DATABASE `" + cfg.DBName + "`").Error; err != nil {
		return fmt.Errorf("create database: %w", err)
	}
	c.DSN = cfg.FormatDSN()
	conn.DSN = c.DSN
	if c.DB, err = store.Connect(ctx, conn); err != nil {
		return err
	}
	if _, err := store.Migrate(ctx, c.DB); err != nil {
		return err
	}
	// Ids far from any demo's, so Redis keys never collide.
	for _, t := range []string{"sessions", "prizes"} {
		if err := c.DB.Exec(fmt.Sprintf("ALTER TABLE %s AUTO_INCREMENT = %d", t, 2_000_000_000+time.Now().UnixNano()%1_000_000_000)).Error; err != nil {
			return err
		}
	}
	if c.Redis, err = stock.Dial(ctx, common.Redis()); err != nil {
		return err
	}
	if c.Admin, err = event.NewAdmin(c.Brokers, event.AdminSecurity(c.kafka)); err != nil {
		return err
	}
	c.Topics = event.DefaultTopics("chaos" + c.ID)
	if c.opts.Replication != nil {
		err = c.Admin.EnsureReplicatedTopics(ctx, *c.opts.Replication, c.Topics.All()...)
	} else {
		err = c.Admin.EnsureTopics(ctx, c.Topics.All()...)
	}
	if err != nil {
		return err
	}

	now := time.Now().UTC()
	opensIn := 2 * time.Second
	if c.opts.OpensLater {
		opensIn = time.Hour
	} else if c.opts.OpensIn > 0 {
		opensIn = c.opts.OpensIn
	}
	start := now.Add(opensIn).Truncate(time.Millisecond)
	act := seckill.Activity{Name: "chaos " + c.ID, WindowStart: start, WindowEnd: start.Add(30 * time.Minute),
		Interval: 30 * time.Minute, SessionLength: 30 * time.Minute, PerUserLimit: c.opts.Limit,
		PaymentTimeout: c.opts.PaymentTimeout, RegrabAfterCancel: c.opts.RegrabAfterCancel}
	for i, s := range c.opts.Stocks {
		p := seckill.Prize{Name: fmt.Sprintf("prize-%d", i+1), StockPerSession: s, Buckets: c.buckets(i)}
		if i < len(c.opts.Draws) && c.opts.Draws[i] > 0 {
			p.Admission, p.EntryWindow = seckill.AdmissionDraw, c.opts.Draws[i]
		}
		act.Prizes = append(act.Prizes, p)
	}
	cat := store.NewCatalog(c.DB, time.Now)
	created, err := cat.CreateActivity(ctx, act)
	if err != nil {
		return err
	}
	c.Prizes = created.Prizes
	sessions, err := cat.Sessions(ctx, created.ID)
	if err != nil {
		return err
	}
	c.Session = sessions[0]
	if c.Gate, err = stock.NewGate(ctx, c.Redis); err != nil {
		return err
	}
	entries, err := draw.NewEntries(ctx, c.Redis)
	if err != nil {
		return err
	}
	armer := draw.NewArmer(store.NewDraws(c.DB, time.Now), entries, c.opts.Beacon)
	if _, err := preheat.New(cat, c.Gate, time.Hour, time.Now).WithDraws(armer).Session(ctx, c.Session.ID); err != nil {
		return err
	}

	secret := "chaos-jwt-secret-" + c.ID + "-0123456789abcdef"
	c.Signer = auth.NewSigner([]byte(secret), "seckill", "seckill-gateway")
	c.Env = map[string]string{
		"SECKILL_MYSQL_DSN":          c.DSN,
		"SECKILL_TOPIC_PREFIX":       "chaos" + c.ID,
		"SECKILL_CONSUMER_GROUP":     "chaos-orders-" + c.ID,
		"SECKILL_FEEDBACK_GROUP":     "chaos-feedback-" + c.ID,
		"SECKILL_RECONCILER_LEASE":   "chaos-lease-" + c.ID,
		"SECKILL_ADMIN_TOKEN":        "chaos-admin-token-" + c.ID,
		"SECKILL_JWT_SECRET":         secret,
		"SECKILL_RATE_PER_IP":        "0", // the whole crowd comes from 127.0.0.1
		"SECKILL_STALE_AFTER":        "2s",
		"SECKILL_RECONCILE_INTERVAL": "1s",
		"SECKILL_CATCHUP_WAIT":       "3s",
		"SECKILL_LEASE_TTL":          "3s",
		"SECKILL_LOG_LEVEL":          "warn",
		"SECKILL_BATCH_WAIT":         "2ms",
	}
	if len(c.opts.Draws) > 0 {
		// Small rounds of admissions, so a row's fault can meet a draw in its middle.
		c.Env["SECKILL_DRAW_PAGE"] = "20"
	}
	if c.opts.Gateways > 1 && c.opts.NoProxy {
		if err := c.startGateways(ctx); err != nil {
			return err
		}
	} else if c.opts.Gateways > 1 || c.opts.BehindProxy {
		if err := c.startFleet(ctx); err != nil {
			return err
		}
	} else {
		if c.GatewayAddr, err = FreeAddr(); err != nil {
			return err
		}
		if err := c.StartGateway(ctx); err != nil {
			return err
		}
	}
	for i := 0; i < c.opts.Consumers; i++ {
		p, err := c.startConsumer(ctx)
		if err != nil {
			return err
		}
		c.Consumers = append(c.Consumers, p)
	}
	if c.Reconciler, err = c.StartReconciler(ctx); err != nil {
		return err
	}
	c.Reconcilers = []*Proc{c.Reconciler}
	for i := 1; i < c.opts.Reconcilers; i++ {
		p, err := c.StartReconciler(ctx)
		if err != nil {
			return err
		}
		c.Reconcilers = append(c.Reconcilers, p)
	}
	if c.opts.OpensLater || c.opts.OpensIn > 0 {
		return nil // the row opens it (OpenIn), or waits for it
	}
	// Wait for the session to open.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(start)):
	}
	return nil
}

func (c *Pipeline) procEnv(extra map[string]string) map[string]string {
	out := make(map[string]string, len(c.Env)+len(extra))
	for k, v := range c.Env {
		out[k] = v
	}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

func waitHealthy(ctx context.Context, p *Proc, url string, d time.Duration) error {
	deadline := time.Now().Add(d)
	client := &http.Client{Timeout: time.Second}
	for {
		if resp, err := client.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if p.Exited() {
			return fmt.Errorf("%s exited during start-up:\n%s", p.Name, tail(p.Output(), 20))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s:\n%s", p.Name, d, tail(p.Output(), 20))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// StartGateway starts (or restarts) the gateway on its fixed address.
func (c *Pipeline) StartGateway(ctx context.Context) error {
	adminAddr, err := FreeAddr()
	if err != nil {
		return err
	}
	extra := map[string]string{"SECKILL_GATEWAY_ADDR": c.GatewayAddr, "SECKILL_ADMIN_ADDR": adminAddr}
	for k, v := range c.opts.GatewayEnv {
		extra[k] = v
	}
	p, err := Start("gateway", filepath.Join(c.opts.Bin, "gateway"), c.procEnv(extra))
	if err != nil {
		return err
	}
	c.Gateway = p
	// /readyz: Redis and Kafka answer; the process also loaded the schedule before listening.
	return waitHealthy(ctx, p, "http://"+c.GatewayAddr+"/readyz", 30*time.Second)
}

func (c *Pipeline) startConsumer(ctx context.Context) (*Proc, error) {
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	extra := map[string]string{"SECKILL_CONSUMER_ADDR": addr}
	for k, v := range c.opts.ConsumerEnv {
		extra[k] = v
	}
	p, err := Start("consumer", filepath.Join(c.opts.Bin, "consumer"), c.procEnv(extra))
	if err != nil {
		return nil, err
	}
	return p, waitHealthy(ctx, p, "http://"+addr+"/healthz", 30*time.Second)
}

// RestartConsumer replaces consumer i with a fresh process (the old one must be dead).
func (c *Pipeline) RestartConsumer(ctx context.Context, i int) error {
	p, err := c.startConsumer(ctx)
	if err != nil {
		return err
	}
	c.Consumers[i] = p
	return nil
}

// StartReconciler starts a reconciler in scheduler mode.
func (c *Pipeline) StartReconciler(ctx context.Context) (*Proc, error) {
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	p, err := Start("reconciler", filepath.Join(c.opts.Bin, "reconciler"), c.procEnv(map[string]string{"SECKILL_RECONCILER_ADDR": addr}))
	if err != nil {
		return nil, err
	}
	c.remember(p, addr)
	return p, waitHealthy(ctx, p, "http://"+addr+"/healthz", 30*time.Second)
}

// ReconcileOnce runs `reconciler --once --json` to completion and returns its output.
func (c *Pipeline) ReconcileOnce(ctx context.Context) (string, error) {
	addr, err := FreeAddr()
	if err != nil {
		return "", err
	}
	p, err := Start("reconciler-once", filepath.Join(c.opts.Bin, "reconciler"),
		c.procEnv(map[string]string{"SECKILL_RECONCILER_ADDR": addr, "SECKILL_CATCHUP_WAIT": "20s"}), "--once", "--json")
	if err != nil {
		return "", err
	}
	err = p.Wait(90 * time.Second)
	if err != nil && !p.Exited() {
		p.Kill()
	}
	return p.Output(), err
}

// Stop stops the deployables (SIGTERM, then SIGKILL).
func (c *Pipeline) Stop() {
	procs := append([]*Proc{c.Gateway, c.Reconciler}, c.Consumers...)
	procs = append(append(procs, c.Gateways...), c.Reconcilers...)
	for _, p := range append(procs, c.haproxy) {
		if p != nil && !p.Exited() {
			_ = p.Stop(20 * time.Second)
		}
	}
}

// Close stops everything and removes the pipeline's database, topics and keys.
func (c *Pipeline) Close() {
	c.Stop()
	for _, iso := range c.isolations {
		iso.close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if c.Redis != nil {
		for i, p := range c.Prizes {
			// Each bucket's keys share its own slot ({session:prize} for bucket 0,
			// {session:prize:b:x} above), so each DEL reaches the one primary that holds them, on a
			// Redis Cluster too.
			for b := range c.buckets(i) {
				k := stock.BucketKeysFor(c.Session.ID, p.ID, b, c.buckets(i))
				c.Redis.Del(ctx, k.Meta, k.Users, k.Reserved, k.Outcomes, k.Fence, k.Returned, k.Transfers(), k.Demand(), k.Wanted())
			}
		}
		_ = c.Redis.Close()
	}
	if c.feedback != nil {
		_ = c.feedback.Close()
	}
	if c.Admin != nil && c.Topics.Grab.Name != "" {
		var names []string
		for _, t := range c.Topics.All() {
			names = append(names, t.Name)
		}
		_ = c.Admin.DeleteTopics(ctx, names...)
	}
	if c.DB != nil {
		_ = store.Close(c.DB)
	}
	for _, d := range c.dirs {
		_ = os.RemoveAll(d)
	}
	if c.base != nil {
		_ = c.base.Exec("DROP DATABASE IF EXISTS `seckill_chaos_" + c.ID + "`").Error
		_ = store.Close(c.base)
	}
}

// Token signs a token for a crowd user.
func (c *Pipeline) Token(user string) (string, error) {
	return c.Signer.Token(user, time.Now(), 2*time.Hour)
}

// OpenIn moves the session's start to d from now, as an operator rescheduling it would (the
// services see it at their next schedule reload, every second by default; d of at least 2 s
// leaves them time). The session must not have started.
func (c *Pipeline) OpenIn(ctx context.Context, d time.Duration) error {
	if !time.Now().Before(c.Session.Start) {
		return fmt.Errorf("open the session in %s: it started at %s already", d, c.Session.Start.Format(time.RFC3339Nano))
	}
	start := time.Now().UTC().Add(d).Truncate(time.Millisecond)
	res := c.DB.WithContext(ctx).Table("sessions").Where("id = ?", c.Session.ID).Update("starts_at", start)
	if res.Error != nil {
		return fmt.Errorf("open the session in %s: %w", d, res.Error)
	}
	if res.RowsAffected != 1 {
		return fmt.Errorf("open the session in %s: %d sessions rescheduled, want 1", d, res.RowsAffected)
	}
	c.Session.Start = start
	return nil
}
