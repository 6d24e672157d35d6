package store_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"encoding/binary"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/seckill-pipeline/seckill/internal/certtest"
	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// fakeTLSMySQL listens on loopback as a MySQL server that offers TLS: it sends a protocol 10
// handshake with CLIENT_SSL, waits for the client's SSL request and answers with a TLS
// handshake using a certificate of ca. That is as far as a client with another CA gets.
func fakeTLSMySQL(t *testing.T, ca *certtest.CA) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	cert := ca.Leaf(t)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				const caps = 0x1 | 0x8 | 0x200 | 0x800 | 0x2000 | 0x8000 | 0x80000 // long password, with db, 4.1, SSL, transactions, secure conn, plugin auth
				p := []byte{10}
				p = append(p, "8.0.36-fake\x00"...)
				p = binary.LittleEndian.AppendUint32(p, 1)
				p = append(p, "abcdefgh\x00"...)
				p = binary.LittleEndian.AppendUint16(p, caps&0xffff)
				p = append(p, 45)
				p = binary.LittleEndian.AppendUint16(p, 2)
				p = binary.LittleEndian.AppendUint16(p, caps>>16)
				p = append(p, 21)
				p = append(p, make([]byte, 10)...)
				p = append(p, "ijklmnopqrst\x00"...)
				p = append(p, "mysql_native_password\x00"...)
				hdr := []byte{byte(len(p)), byte(len(p) >> 8), byte(len(p) >> 16), 0}
				if _, err := c.Write(append(hdr, p...)); err != nil {
					return
				}
				var h [4]byte
				if _, err := io.ReadFull(c, h[:]); err != nil {
					return
				}
				n := int(h[0]) | int(h[1])<<8 | int(h[2])<<16
				if _, err := io.CopyN(io.Discard, c, int64(n)); err != nil {
					return
				}
				_ = tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}}).Handshake()
			}()
		}
	}()
	return ln.Addr().String()
}

func caPool(t *testing.T, ca *certtest.CA) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(ca.CAFile(t))
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(b)
	return p
}

// Each refusal names the server and the user and says why, never the password.
func TestConnectRefusalsNameServerUserAndReason(t *testing.T) {
	dsn, _ := stacktest.MySQL(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	const wrong = "wrong-mysql-password-2718"
	trusted, other := certtest.NewCA(t), certtest.NewCA(t)
	fake := fakeTLSMySQL(t, trusted)
	fakeCfg := cfg.Clone()
	fakeCfg.Addr, fakeCfg.User = fake, "svc"
	tests := []struct {
		name string
		c    store.Conn
		want []string
	}{
		{"wrong password", store.Conn{DSN: dsn, Password: wrong},
			[]string{"mysql " + cfg.Addr + " as user " + cfg.User, "Access denied"}},
		{"TLS to a server without TLS", store.Conn{DSN: dsn, TLS: &tls.Config{RootCAs: caPool(t, trusted)}},
			[]string{"mysql " + cfg.Addr + " as user " + cfg.User, "does not offer TLS"}},
		{"unknown CA", store.Conn{DSN: fakeCfg.FormatDSN(), Password: wrong, TLS: &tls.Config{RootCAs: caPool(t, other)}},
			[]string{"mysql " + fake + " as user svc", "certificate signed by unknown authority"}},
	}
	stackTLS := stacktest.MySQLConn(t, dsn).TLS
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "TLS to a server without TLS" && stackTLS != nil {
				t.Skip("the stack's MySQL requires TLS (secure profile): no server without it")
			}
			if tc.name == "wrong password" {
				tc.c.TLS = stackTLS
			}
			db, err := store.Connect(stacktest.Context(t, 20*time.Second), tc.c)
			if err == nil {
				store.Close(db)
				t.Fatal("connected")
			}
			t.Log(err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), wrong) || cfg.Passwd != "" && strings.Contains(err.Error(), ":"+cfg.Passwd+"@") {
				t.Errorf("error shows a password: %q", err)
			}
		})
	}
}

// The password can be kept out of the DSN (SECKILL_MYSQL_PASSWORD).
func TestConnectPasswordBesideTheDSN(t *testing.T) {
	dsn, _ := stacktest.MySQL(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	stack := stacktest.MySQLConn(t, dsn) // the secure profile's password file and TLS
	password := cfg.Passwd
	if password == "" {
		password = stack.Password
	}
	cfg.Passwd = ""
	db, err := store.Connect(stacktest.Context(t, 20*time.Second), store.Conn{DSN: cfg.FormatDSN(), Password: password, TLS: stack.TLS})
	if err != nil {
		t.Fatal(err)
	}
	store.Close(db)
}

// rootDB connects as the server's root, which may create users: SECKILL_MYSQL_ROOT_DSN, or
// root over the local stack's socket ($SECKILL_STATE_DIR/mariadb/mysqld.sock, socket
// authentication as the OS user root). Without it the test is skipped.
func rootDB(t *testing.T) *sql.DB {
	t.Helper()
	dsn := os.Getenv("SECKILL_MYSQL_ROOT_DSN")
	if dsn == "" {
		state := os.Getenv("SECKILL_STATE_DIR")
		if state == "" {
			state = filepath.Join("..", "..", ".state")
		}
		dsn = "root@unix(" + filepath.Join(state, "mariadb", "mysqld.sock") + ")/"
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := stacktest.Context(t, 5*time.Second)
	var grants string
	if err := db.QueryRowContext(ctx, "SHOW GRANTS").Scan(&grants); err != nil || !strings.Contains(grants, "WITH GRANT OPTION") {
		t.Skipf("no server admin to create users with (set SECKILL_MYSQL_ROOT_DSN or SECKILL_STATE_DIR): %v %s", err, grants)
	}
	return db
}

// The two users of docs/deployment.md: the migrating user (ALL on the schema) applies every
// migration, and the services' DML-only user (SELECT, INSERT, UPDATE, DELETE) runs every
// kind of store operation the services do, and is refused DDL.
func TestMigrateAndServiceUsers(t *testing.T) {
	root := rootDB(t)
	dsn, _ := stacktest.MySQL(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	ctx := stacktest.Context(t, 60*time.Second)
	host, _, _ := net.SplitHostPort(cfg.Addr)
	createUser := func(prefix, grant string) (string, string) {
		user, password := prefix+stacktest.ID(t), "pw-"+stacktest.ID(t)
		account := "'" + user + "'@'" + host + "'"
		for _, stmt := range []string{
			"CREATE USER " + account + " IDENTIFIED BY '" + password + "'",
			"GRANT " + grant + " ON `" + cfg.DBName + "`.* TO " + account,
		} {
			if _, err := root.ExecContext(ctx, stmt); err != nil {
				t.Fatalf("%s: %v", strings.Replace(stmt, password, "…", 1), err)
			}
		}
		t.Cleanup(func() { root.ExecContext(context.Background(), "DROP USER IF EXISTS "+account) })
		return user, password
	}

	ddlUser, ddlPassword := createUser("sk_ddl_", "ALL PRIVILEGES")
	ddlCfg := cfg.Clone()
	ddlCfg.User, ddlCfg.Passwd = ddlUser, ""
	stackTLS := stacktest.MySQLConn(t, dsn).TLS // the secure profile's CA, if any
	ddl, err := store.Connect(ctx, store.Conn{DSN: ddlCfg.FormatDSN(), Password: ddlPassword, TLS: stackTLS})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close(ddl)
	if res, err := store.Migrate(ctx, ddl); err != nil || len(res.Applied) == 0 {
		t.Fatalf("migrate as the DDL user: %+v %v", res, err)
	}

	user, password := createUser("sk_dml_", "SELECT, INSERT, UPDATE, DELETE")
	cfg.User, cfg.Passwd = user, ""
	db, err := store.Connect(ctx, store.Conn{DSN: cfg.FormatDSN(), Password: password, TLS: stackTLS})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close(db)
	// Admin writes (activity, sessions, prizes, stock, audit) and reads.
	cat := store.NewCatalog(db, func() time.Time { return t0.Add(-time.Hour) })
	a, err := cat.CreateActivity(ctx, demoActivity(1))
	if err != nil {
		t.Fatalf("create activity as the DML user: %v", err)
	}
	sessions, err := cat.Sessions(ctx, a.ID)
	if err != nil || len(sessions) == 0 {
		t.Fatalf("sessions: %v %v", sessions, err)
	}
	stocks, err := cat.Stocks(ctx, sessions[0].ID)
	if err != nil || len(stocks) == 0 {
		t.Fatalf("stocks: %v %v", stocks, err)
	}
	st := stocks[0]
	if _, _, err := cat.AdjustStock(ctx, st.SessionID, st.PrizeID, st.Total+1, "test", "127.0.0.1", "dml user", nil); err != nil {
		t.Fatalf("adjust stock as the DML user: %v", err)
	}
	// The consumer's batched persist (orders, the conditional stock update, the outbox).
	orders := store.NewOrders(db)
	g := seckill.Grab{RequestID: "req-" + stacktest.ID(t), UserID: "u1", SessionID: st.SessionID, PrizeID: st.PrizeID, AdmittedAt: t0}
	if _, err := orders.Persist(ctx, st.SessionID, st.PrizeID, []seckill.Grab{g}, t0); err != nil {
		t.Fatalf("persist as the DML user: %v", err)
	}
	if o, err := orders.ByRequestID(ctx, g.RequestID); err != nil || o.Status != seckill.OrderSucceeded {
		t.Fatalf("order as the DML user: %+v %v", o, err)
	}
	// The reconciler's lease and the relay's named lock (GET_LOCK needs no privilege).
	if ok, err := lease.New(db, "dml-test", time.Minute).Do(ctx, func(context.Context, lease.Fence) error { return nil }); err != nil || !ok {
		t.Fatalf("lease as the DML user: %v %v", ok, err)
	}
	l, ok, err := store.TryLock(ctx, db, "seckill.test."+user)
	if err != nil || !ok {
		t.Fatalf("named lock as the DML user: %v %v", ok, err)
	}
	l.Release(ctx)
	// DDL is refused.
	for _, ddl := range []string{"CREATE TABLE dml_probe (id INT)", "ALTER TABLE orders ADD COLUMN dml_probe INT", "DROP TABLE orders"} {
		if err := db.WithContext(ctx).Exec(ddl).Error; err == nil || !strings.Contains(err.Error(), "denied") {
			t.Errorf("%s as the DML user: %v, want denied", ddl, err)
		}
	}
}
