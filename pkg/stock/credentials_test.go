package stock_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
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
