package stock_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-pipeline/seckill/internal/certtest"
	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
)

// serviceACL is the ACL a service's Redis user needs, as docs/deployment.md gives it: its
// keys only, reads, writes and the gate's scripts, no CONFIG, KEYS, FLUSHALL or other
// dangerous command, but INFO (cluster detection and the eviction-policy check) and the
// cluster commands a cluster client reads the slot map with.
const serviceACL = "resetkeys ~sk:* resetchannels -@all +@read +@write +@connection -@dangerous +info +evalsha +eval +script|load +cluster|slots +cluster|shards +cluster|nodes +cluster|info +readonly"

// aclUser creates a Redis ACL user with a unique name, the given password and rules, and
// deletes it when the test ends.
func aclUser(t *testing.T, password, rules string) string {
	t.Helper()
	admin := stacktest.Redis(t)
	if _, ok := admin.(*redis.ClusterClient); ok {
		t.Skip("ACL users on a cluster are set per node; this test runs on a single server")
	}
	ctx := stacktest.Context(t, 5*time.Second)
	name := "seckill-test-" + stacktest.ID(t)
	args := []any{"ACL", "SETUSER", name, "reset", "on", ">" + password}
	for _, r := range strings.Fields(rules) {
		args = append(args, r)
	}
	if err := admin.Do(ctx, args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	t.Cleanup(func() { admin.Do(context.Background(), "ACL", "DELUSER", name) })
	return name
}

// A service's restricted user (no CONFIG, KEYS or FLUSHALL) passes the eviction-policy
// check (INFO memory instead of CONFIG GET) and runs the gate's scripts.
func TestRestrictedUserRunsTheGate(t *testing.T) {
	const password = "restricted-user-password-4711"
	user := aclUser(t, password, serviceACL)
	ctx := stacktest.Context(t, 20*time.Second)
	o := stacktest.RedisOptions(t, stacktest.RedisAddr()) // the stack's TLS, if any
	o.Username, o.Password = user, password
	rdb, err := stock.Dial(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	for _, denied := range [][]any{{"CONFIG", "GET", "maxmemory-policy"}, {"KEYS", "sk:*"}, {"FLUSHALL"}} {
		if err := rdb.Do(ctx, denied...).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Fatalf("%v as the restricted user: %v, want NOPERM (the ACL is not restricted)", denied, err)
		}
	}
	g, err := stock.NewGate(ctx, rdb)
	if err != nil {
		t.Fatalf("gate as a restricted user: %v", err)
	}
	defer g.Close()
	sid := time.Now().UnixNano() % 1_000_000_000
	if res, err := g.Load(ctx, []seckill.Stock{{SessionID: sid, PrizeID: 1, Total: 1, Left: 1, PerUserLimit: 1}}, time.Now().Add(time.Hour)); err != nil || len(res) != 1 || !res[0].Loaded {
		t.Fatalf("load as a restricted user: %v %v", res, err)
	}
	k := stock.KeysFor(sid, 1)
	t.Cleanup(func() { stacktest.Redis(t).Del(context.Background(), k.Meta, k.Users, k.Reserved, k.Outcomes) })
	v, err := g.Reserve(ctx, seckill.Grab{RequestID: "req-" + stacktest.ID(t), UserID: "u1", SessionID: sid, PrizeID: 1, AdmittedAt: time.Now()})
	if err != nil || v.Code != stock.Admitted {
		t.Fatalf("reserve as a restricted user: %+v %v", v, err)
	}
}

// Each refusal is named at connect time with the server, the user and the reason, and
// never shows the password.
func TestDialRefusalsNameServerUserAndReason(t *testing.T) {
	const password = "right-password-0815"
	const wrong = "wrong-password-0816"
	user := aclUser(t, password, serviceACL)
	trusted, other := certtest.NewCA(t), certtest.NewCA(t)
	tlsAddr := certtest.Listen(t, trusted)
	otherCA := x509.NewCertPool()
	otherCA.AppendCertsFromPEM(mustRead(t, other.CAFile(t)))
	stackTLS := stacktest.RedisOptions(t, stacktest.RedisAddr()).TLS // the secure profile's
	tests := []struct {
		name string
		o    stock.Options
		want []string
	}{
		{"wrong password", stock.Options{Addr: stacktest.RedisAddr(), Username: user, Password: wrong, TLS: stackTLS},
			[]string{stacktest.RedisAddr(), "user " + user, "WRONGPASS"}},
		{"unknown CA", stock.Options{Addr: tlsAddr, Username: user, Password: password, TLS: &tls.Config{RootCAs: otherCA}},
			[]string{tlsAddr, "user " + user, "certificate signed by unknown authority"}},
		{"TLS to a plaintext port", stock.Options{Addr: stacktest.RedisAddr(), Username: user, Password: password, TLS: &tls.Config{RootCAs: otherCA}},
			[]string{stacktest.RedisAddr(), "user " + user, "does not speak TLS"}},
		{"plaintext to a TLS port", stock.Options{Addr: tlsAddr, Username: user, Password: password},
			[]string{tlsAddr, "user " + user, "may require TLS (set SECKILL_REDIS_TLS=true)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "TLS to a plaintext port" && stackTLS != nil {
				t.Skip("the stack's Redis is TLS only (secure profile): no plaintext port")
			}
			ctx := stacktest.Context(t, 20*time.Second)
			rdb, err := stock.Dial(ctx, tc.o)
			if err == nil {
				rdb.Close()
				t.Fatal("connected")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), password) || strings.Contains(err.Error(), wrong) {
				t.Errorf("error shows the password: %q", err)
			}
		})
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A Redis that speaks TLS only (a private redis-server with a test CA and the services' ACL
// user, the default user off): the service's user over TLS runs the gate; a plaintext
// client, an untrusted CA and a client without the user are refused, each named.
func TestTLSRedisWithServiceUser(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("redis-server not installed")
		}
		t.Skip("redis-server not installed")
	}
	ca, other := certtest.NewCA(t), certtest.NewCA(t)
	certFile, keyFile := ca.LeafFiles(t)
	addr := stacktest.FreeAddr(t)
	_, port, _ := strings.Cut(addr, ":")
	const user, password = "seckill-gateway", "tls-user-password-1234"
	args := []string{"--bind", "127.0.0.1", "--port", "0", "--tls-port", port,
		"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-ca-cert-file", ca.CAFile(t), "--tls-auth-clients", "no",
		"--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction", "--dir", t.TempDir(),
		"--user", "default", "off", "--user", user, "on", ">" + password}
	args = append(args, strings.Fields(serviceACL)...)
	srv := exec.Command(bin, args...)
	var stderr strings.Builder
	srv.Stdout, srv.Stderr = &stderr, &stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })

	trusted := &tls.Config{RootCAs: x509.NewCertPool()}
	trusted.RootCAs.AppendCertsFromPEM(mustRead(t, ca.CAFile(t)))
	untrusted := &tls.Config{RootCAs: x509.NewCertPool()}
	untrusted.RootCAs.AppendCertsFromPEM(mustRead(t, other.CAFile(t)))
	good := stock.Options{Addr: addr, Username: user, Password: password, TLS: trusted}

	ctx := stacktest.Context(t, 30*time.Second)
	var rdb redis.UniversalClient
	for deadline := time.Now().Add(15 * time.Second); ; {
		if rdb, err = stock.Dial(ctx, good); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("TLS redis-server did not accept the service user: %v\n%s", err, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer rdb.Close()
	g, err := stock.NewGate(ctx, rdb)
	if err != nil {
		t.Fatalf("gate over TLS as %s: %v", user, err)
	}
	defer g.Close()
	if res, err := g.Load(ctx, []seckill.Stock{{SessionID: 1, PrizeID: 1, Total: 1, Left: 1, PerUserLimit: 1}}, time.Now().Add(time.Hour)); err != nil || !res[0].Loaded {
		t.Fatalf("load over TLS: %v %v", res, err)
	}
	if v, err := g.Reserve(ctx, seckill.Grab{RequestID: "r1", UserID: "u1", SessionID: 1, PrizeID: 1, AdmittedAt: time.Now()}); err != nil || v.Code != stock.Admitted {
		t.Fatalf("reserve over TLS: %+v %v", v, err)
	}

	for _, tc := range []struct {
		name string
		o    stock.Options
		want string
	}{
		{"plaintext", stock.Options{Addr: addr, Username: user, Password: password}, "may require TLS (set SECKILL_REDIS_TLS=true)"},
		{"untrusted CA", stock.Options{Addr: addr, Username: user, Password: password, TLS: untrusted}, "certificate signed by unknown authority"},
		{"no user", stock.Options{Addr: addr, TLS: trusted}, "NOAUTH"},
		{"wrong password", stock.Options{Addr: addr, Username: user, Password: "not-" + password, TLS: trusted}, "WRONGPASS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb, err := stock.Dial(stacktest.Context(t, 20*time.Second), tc.o)
			if err == nil {
				rdb.Close()
				t.Fatal("connected")
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), addr) {
				t.Fatalf("error %q, want it to name %s and say %q", err, addr, tc.want)
			}
			if strings.Contains(err.Error(), password) {
				t.Errorf("error shows the password: %q", err)
			}
		})
	}
}

// A Redis Cluster that speaks TLS only, with the service's ACL user on every node: the
// cluster is detected with that user over TLS (INFO cluster), the eviction-policy check asks
// every node as it (INFO memory), and the gate's scripts run through the cluster client.
func TestTLSRedisClusterWithServiceUser(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("redis-server not installed")
		}
		t.Skip("redis-server not installed")
	}
	ca := certtest.NewCA(t)
	certFile, keyFile := ca.LeafFiles(t)
	caFile := ca.CAFile(t)
	const user, password = "seckill-consumer", "cluster-user-password-5678"
	const admin, adminPassword = "admin", "cluster-admin-password-9012"
	trusted := &tls.Config{RootCAs: x509.NewCertPool()}
	trusted.RootCAs.AppendCertsFromPEM(mustRead(t, caFile))
	ctx := stacktest.Context(t, 60*time.Second)

	type node struct{ addr, bus string }
	nodes := make([]node, 3)
	admins := make([]*redis.Client, 3)
	for i := range nodes {
		nodes[i] = node{stacktest.FreeAddr(t), stacktest.FreeAddr(t)}
		_, port, _ := strings.Cut(nodes[i].addr, ":")
		_, bus, _ := strings.Cut(nodes[i].bus, ":")
		dir := t.TempDir()
		args := []string{"--bind", "127.0.0.1", "--port", "0", "--tls-port", port, "--cluster-enabled", "yes", "--cluster-port", bus,
			"--cluster-config-file", dir + "/nodes.conf", "--tls-cluster", "yes",
			"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-ca-cert-file", caFile, "--tls-auth-clients", "no",
			"--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction", "--dir", dir,
			"--user", "default", "off", "--user", admin, "on", ">" + adminPassword, "~*", "&*", "+@all",
			"--user", user, "on", ">" + password}
		args = append(args, strings.Fields(serviceACL)...)
		srv := exec.Command(bin, args...)
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
		admins[i] = redis.NewClient(&redis.Options{Addr: nodes[i].addr, Username: admin, Password: adminPassword, TLSConfig: trusted})
		t.Cleanup(func() { admins[i].Close() })
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !ok(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 20s", what)
			}
		}
	}
	for i, c := range admins {
		waitFor("node "+nodes[i].addr+" up", func() bool { return c.Ping(ctx).Err() == nil })
		lo, hi := i*16384/3, (i+1)*16384/3-1
		if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			t.Fatalf("ADDSLOTSRANGE on %s: %v", nodes[i].addr, err)
		}
	}
	for i := 1; i < len(nodes); i++ {
		host, port, _ := strings.Cut(nodes[i].addr, ":")
		_, bus, _ := strings.Cut(nodes[i].bus, ":")
		if err := admins[0].Do(ctx, "CLUSTER", "MEET", host, port, bus).Err(); err != nil {
			t.Fatalf("CLUSTER MEET %s: %v", nodes[i].addr, err)
		}
	}
	for i, c := range admins {
		waitFor("cluster state ok on "+nodes[i].addr, func() bool {
			info, err := c.ClusterInfo(ctx).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:3")
		})
	}

	rdb, err := stock.Dial(ctx, stock.Options{Addr: nodes[1].addr, Username: user, Password: password, TLS: trusted})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	if _, ok := rdb.(*redis.ClusterClient); !ok {
		t.Fatalf("one seed of the TLS cluster gave a %T", rdb)
	}
	g, err := stock.NewGate(ctx, rdb)
	if err != nil {
		t.Fatalf("gate on the TLS cluster as %s: %v", user, err)
	}
	defer g.Close()
	for sid := int64(1); sid <= 6; sid++ { // keys on several nodes
		if res, err := g.Load(ctx, []seckill.Stock{{SessionID: sid, PrizeID: 1, Total: 1, Left: 1, PerUserLimit: 1}}, time.Now().Add(time.Hour)); err != nil || !res[0].Loaded {
			t.Fatalf("load session %d on the TLS cluster: %v %v", sid, res, err)
		}
		if v, err := g.Reserve(ctx, seckill.Grab{RequestID: fmt.Sprintf("r%d", sid), UserID: "u1", SessionID: sid, PrizeID: 1, AdmittedAt: time.Now()}); err != nil || v.Code != stock.Admitted {
			t.Fatalf("reserve session %d on the TLS cluster: %+v %v", sid, v, err)
		}
	}
}
