package harness

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// The cluster profile's MariaDB rows: a primary and a replica (semi-sync, AFTER_SYNC) behind
// one writer address (HAProxy following the writable server), failed over by
// `deploy/local/stack failover-db --profile cluster` (deploy/local/cluster.sh).

// defaultMySQLNodes are the pair's own addresses as deploy/local/cluster.sh places them.
const defaultMySQLNodes = "127.0.0.1:27307,127.0.0.1:27308"

// MySQLWriter returns the node (1 or 2) the writer address reaches now, by the port the
// server listens on (SECKILL_CLUSTER_MYSQL_NODES lists mariadb-1's, then mariadb-2's).
func (c *Pipeline) MySQLWriter(ctx context.Context) (int, error) {
	var port string
	if err := c.DB.WithContext(ctx).Raw("SELECT @@port").Row().Scan(&port); err != nil {
		return 0, fmt.Errorf("ask the writer its port: %w", err)
	}
	return nodeOfPort(port)
}

// nodeOfPort names the MariaDB node (1 or 2) listening on port.
func nodeOfPort(port string) (int, error) {
	nodes := splitAddrs(env("SECKILL_CLUSTER_MYSQL_NODES", defaultMySQLNodes))
	for i, n := range nodes {
		if _, p, err := net.SplitHostPort(n); err == nil && p == port {
			return i + 1, nil
		}
	}
	return 0, fmt.Errorf("port %s is none of %v: not the cluster profile's MariaDB pair", port, nodes)
}

// awaitReaderOn waits until SECKILL_MYSQL_REPLICA_DSN (the reconcilers' replication gauges;
// the stack's reader address, which follows the read-only server) reaches node want, for at
// most limit. Without the variable there is nothing to follow and nothing is checked.
func awaitReaderOn(ctx context.Context, want int, limit time.Duration) error {
	dsn := env("SECKILL_MYSQL_REPLICA_DSN", "")
	if dsn == "" {
		return nil
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return fmt.Errorf("SECKILL_MYSQL_REPLICA_DSN: %w", err)
	}
	defer db.Close()
	db.SetMaxIdleConns(0) // each probe a new session: the address may move between them
	deadline := time.Now().Add(limit)
	got, last := 0, error(nil)
	for time.Now().Before(deadline) {
		var port string
		if last = db.QueryRowContext(ctx, "SELECT @@port").Scan(&port); last == nil {
			if got, last = nodeOfPort(port); last == nil && got == want {
				return nil
			}
		}
		sleepCtx(ctx, 250*time.Millisecond)
	}
	return fmt.Errorf("the replica address (SECKILL_MYSQL_REPLICA_DSN) does not reach mariadb-%d, the replica, within %s (reaches mariadb-%d; last error: %v)", want, limit, got, last)
}

// nodeDB opens the pipeline's database on MariaDB node n itself, not through the writer address.
func (c *Pipeline) nodeDB(n int) (*sql.DB, error) {
	nodes := splitAddrs(env("SECKILL_CLUSTER_MYSQL_NODES", defaultMySQLNodes))
	if n < 1 || n > len(nodes) {
		return nil, fmt.Errorf("no mariadb-%d in SECKILL_CLUSTER_MYSQL_NODES (%v)", n, nodes)
	}
	cfg, err := mysql.ParseDSN(c.DSN)
	if err != nil {
		return nil, err
	}
	cfg.Addr = nodes[n-1]
	return sql.Open("mysql", cfg.FormatDSN())
}

// nodeRoot runs SQL as root on node n over its socket (the stack's state folder); the
// output has no column names, but a vertical (\G) one keeps its field names.
func nodeRoot(ctx context.Context, e *Env, n int, query string) (string, error) {
	sock := filepath.Join(e.Servers.State, "cluster", fmt.Sprintf("mariadb-%d", n), "mysqld.sock")
	args := []string{"--no-defaults", "-uroot", "-S", sock, "-e", query}
	if !strings.HasSuffix(query, `\G`) {
		args = append(args, "-N")
	}
	out, err := exec.CommandContext(ctx, "mariadb", args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("mariadb-%d: %s: %v: %s", n, query, err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// slaveField reads one field of SHOW SLAVE STATUS on node n.
func slaveField(ctx context.Context, e *Env, n int, field string) (string, error) {
	out, err := nodeRoot(ctx, e, n, `SHOW SLAVE STATUS\G`)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ": "); ok && k == field {
			return v, nil
		}
	}
	return "", fmt.Errorf("mariadb-%d: no %s in SHOW SLAVE STATUS (not a replica)", n, field)
}

// firstOrderAfter polls node db until an order created after since is there, and returns
// when it saw it (the order's own created_at is the consumer's clock before its commit).
func firstOrderAfter(ctx context.Context, db *sql.DB, since time.Time, limit time.Duration) (time.Time, error) {
	deadline := time.Now().Add(limit)
	var last error
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var n int
		err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM orders WHERE created_at > ?", since.UTC()).Scan(&n)
		if err == nil && n > 0 {
			return time.Now(), nil
		}
		last = err
		sleepCtx(ctx, 50*time.Millisecond)
	}
	return time.Time{}, fmt.Errorf("no order written on the new primary within %s (last error: %v)", limit, last)
}

// killMySQLPrimary kills -9 the MariaDB primary mid-crowd and fails over at once (an
// orchestrator that noticed), then restarts the old primary, which rejoins as a replica.
// It prints the time from the kill to the promotion and to the first order the consumers
// wrote on the new primary.
func killMySQLPrimary(ctx context.Context, e *Env) error {
	c := e.Pipeline
	old, err := c.MySQLWriter(ctx)
	if err != nil {
		return err
	}
	promoted := 3 - old
	db, err := c.nodeDB(promoted)
	if err != nil {
		return err
	}
	defer db.Close()
	fmt.Fprintf(e.Log, "  kill -9 mariadb-%d (the primary)\n", old)
	killed := time.Now()
	if _, err := clusterStack(ctx, "kill", fmt.Sprintf("mariadb-%d", old)); err != nil {
		return err
	}
	if _, err := clusterStack(ctx, "failover-db"); err != nil {
		return err
	}
	tookOver := time.Since(killed)
	first, err := firstOrderAfter(ctx, db, killed, 90*time.Second)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.Log, "  mariadb-%d promoted and the writer address on it %s after the kill; first order written on it %s after the kill\n",
		promoted, tookOver.Round(10*time.Millisecond), first.Sub(killed).Round(10*time.Millisecond))
	t := time.Now()
	if _, err := clusterStack(ctx, "start", fmt.Sprintf("mariadb-%d", old)); err != nil {
		return err
	}
	fmt.Fprintf(e.Log, "  mariadb-%d restarted and replicating from mariadb-%d (%s)\n", old, promoted, time.Since(t).Round(100*time.Millisecond))
	// The replication gauges must now read the old primary: an address fixed on a node would
	// read the new primary, which has no replication to report.
	return awaitReaderOn(ctx, old, 10*time.Second)
}

// switchoverMySQL runs a planned switchover mid-crowd (the primary fenced read-only, the
// replica promoted, the old primary its replica) and requires that no client saw errors for
// longer than the switchover took.
func switchoverMySQL(ctx context.Context, e *Env) error {
	c := e.Pipeline
	old, err := c.MySQLWriter(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.Log, "  switchover: mariadb-%d -> mariadb-%d\n", old, 3-old)
	t := time.Now()
	if _, err := clusterStack(ctx, "failover-db"); err != nil {
		return err
	}
	took := time.Since(t)
	now, err := c.MySQLWriter(ctx)
	if err != nil {
		return err
	}
	if now == old {
		return fmt.Errorf("the writer address still reaches mariadb-%d after the switchover", old)
	}
	select {
	case <-e.CrowdDone():
	case <-ctx.Done():
		return ctx.Err()
	}
	longest, n := e.Attempts.LongestErrorRun()
	fmt.Fprintf(e.Log, "  switchover took %s; longest run of 5xx answers %s (%d answers)\n",
		took.Round(10*time.Millisecond), longest.Round(10*time.Millisecond), n)
	if longest > took {
		return fmt.Errorf("clients saw 5xx for %s, longer than the switchover (%s)", longest.Round(10*time.Millisecond), took.Round(10*time.Millisecond))
	}
	return nil
}

// stopReplicaSQL stops the replica's SQL thread for the rest of the crowd (at most 20 s):
// it falls behind while everything the pipeline reads and writes is on the primary. The
// replica's I/O thread goes on acknowledging, so semi-sync stays on. Then it catches up.
func stopReplicaSQL(ctx context.Context, e *Env) error {
	w, err := e.Pipeline.MySQLWriter(ctx)
	if err != nil {
		return err
	}
	r := 3 - w
	if _, err := nodeRoot(ctx, e, r, "STOP SLAVE SQL_THREAD"); err != nil {
		return err
	}
	fmt.Fprintf(e.Log, "  mariadb-%d (the replica): SQL thread stopped\n", r)
	select {
	case <-e.CrowdDone():
	case <-time.After(20 * time.Second):
	case <-ctx.Done():
	}
	// Seconds_Behind_Master is NULL while the SQL thread is stopped: compare what the replica
	// received with what it applied instead.
	received, err := slaveField(ctx, e, r, "Gtid_IO_Pos")
	if err != nil {
		return err
	}
	applied, err := nodeRoot(ctx, e, r, "SELECT @@gtid_slave_pos")
	if err != nil {
		return err
	}
	if _, err := nodeRoot(ctx, e, r, "START SLAVE SQL_THREAD"); err != nil {
		return err
	}
	fmt.Fprintf(e.Log, "  SQL thread started again: it had received up to GTID %s and applied up to %s\n", received, applied)
	if received == applied {
		return fmt.Errorf("mariadb-%d applied everything it received while stopped: the row tested nothing", r)
	}
	for t := time.Now(); ; {
		running, err1 := slaveField(ctx, e, r, "Slave_SQL_Running")
		lag, err2 := slaveField(ctx, e, r, "Seconds_Behind_Master")
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		if running == "Yes" && lag == "0" {
			fmt.Fprintf(e.Log, "  mariadb-%d caught up after %s\n", r, time.Since(t).Round(100*time.Millisecond))
			return nil
		}
		if time.Since(t) > 90*time.Second || ctx.Err() != nil {
			return fmt.Errorf("mariadb-%d has not caught up after %s (SQL thread %s, %s s behind)", r, time.Since(t).Round(time.Second), running, lag)
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}
