package stacktest

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Private is a MariaDB server of one test's own (Debian's mariadbd in a temporary folder, on
// a free loopback port): for faults that act on the whole server, such as read_only, which
// must never touch the stack's server other tests share.
type Private struct {
	DSN  string  // the service user (no SUPER, so read_only applies to it) on database seckill_private
	Root *sql.DB // root over the server's socket
}

// PrivateMariaDB starts one and stops it at the end of the test. Without mariadbd it skips
// (fails under CI, where the stack installed it).
func PrivateMariaDB(tb testing.TB) *Private {
	tb.Helper()
	bin, err := exec.LookPath("mariadbd")
	if err != nil {
		unavailable(tb, "mariadbd", err)
	}
	// The socket path must fit in sun_path (108 bytes): a short folder of its own.
	dir, err := os.MkdirTemp("", "seckill-mdb-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	me, err := user.Current()
	if err != nil {
		tb.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	install := exec.Command("mariadb-install-db", "--no-defaults", "--datadir="+data, "--user="+me.Username,
		"--auth-root-authentication-method=normal", "--skip-test-db")
	if out, err := install.CombinedOutput(); err != nil {
		tb.Fatalf("mariadb-install-db: %v\n%s", err, out)
	}
	addr := FreeAddr(tb)
	_, port, _ := net.SplitHostPort(addr)
	sock := filepath.Join(dir, "s")
	logf := filepath.Join(dir, "mariadb.log")
	cmd := exec.Command(bin, "--no-defaults", "--datadir="+data, "--user="+me.Username, "--bind-address=127.0.0.1",
		"--port="+port, "--socket="+sock, "--pid-file="+filepath.Join(dir, "pid"), "--log-error="+logf)
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	tb.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	rootCfg := mysql.NewConfig()
	rootCfg.User, rootCfg.Net, rootCfg.Addr = "root", "unix", sock
	root, err := sql.Open("mysql", rootCfg.FormatDSN())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = root.Close() })
	ctx := Context(tb, 60*time.Second)
	for {
		if err = root.PingContext(ctx); err == nil {
			break
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(logf)
			tb.Fatalf("mariadbd exited during start-up:\n%s", log)
		case <-ctx.Done():
			tb.Fatalf("mariadbd not ready: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	for _, q := range []string{
		"CREATE DATABASE seckill_private",
		"CREATE USER 'svc'@'127.0.0.1' IDENTIFIED BY 'svc'",
		"GRANT ALL PRIVILEGES ON `seckill%`.* TO 'svc'@'127.0.0.1'",
	} {
		if _, err := root.ExecContext(ctx, q); err != nil {
			tb.Fatalf("%s: %v", q, err)
		}
	}
	return &Private{Root: root,
		DSN: fmt.Sprintf("svc:svc@tcp(%s)/seckill_private?parseTime=true&clientFoundRows=true&loc=UTC&charset=utf8mb4&interpolateParams=true", addr)}
}

// ReadOnly sets the server's read_only: on, every write of the service user fails with 1290,
// as on a primary fenced in a failover.
func (p *Private) ReadOnly(tb testing.TB, on bool) {
	tb.Helper()
	v := 0
	if on {
		v = 1
	}
	if _, err := p.Root.ExecContext(context.Background(), fmt.Sprintf("SET GLOBAL read_only = %d", v)); err != nil {
		tb.Fatal(err)
	}
}
