package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/seckill-pipeline/seckill/internal/harness"
	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// lowPort returns a loopback port below Linux's ephemeral range (32768) that was free a
// moment ago, above every port the local stack's profiles use.
func lowPort(t *testing.T) int {
	t.Helper()
	for i := 0; i < 200; i++ {
		p := 30000 + rand.IntN(2700)
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err == nil {
			ln.Close()
			return p
		}
	}
	t.Fatal("no free port in 30000..32699")
	return 0
}

// stopPID ends a server the test started, by its pid: SIGTERM, then SIGKILL after 30 s.
func stopPID(pid int) {
	_ = syscall.Kill(pid, syscall.SIGTERM)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if syscall.Kill(pid, 0) != nil {
			return
		}
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// statuses reads every order's status by request id.
func statuses(t *testing.T, db *gorm.DB) map[string]string {
	t.Helper()
	var rows []struct{ RequestID, Status string }
	if err := db.Raw("SELECT request_id, status FROM orders").Scan(&rows).Error; err != nil {
		t.Fatal(err)
	}
	out := make(map[string]string, len(rows))
	for _, r := range rows {
		out[r.RequestID] = r.Status
	}
	return out
}

// onceWith runs `reconciler --once --json` in process with env and returns its report.
func onceWith(t *testing.T, e *recEnv, env map[string]string) report {
	t.Helper()
	var out bytes.Buffer
	err := run(e.ctx, []string{"--once", "--json"}, stacktest.Getenv(env), &out, io.Discard)
	var rep report
	if jerr := json.Unmarshal(out.Bytes(), &rep); jerr != nil || err != nil {
		t.Fatalf("reconciler --once: %v; report %q: %v", err, out.String(), jerr)
	}
	return rep
}

// A hot backup taken with mariadb-backup while a crowd is buying, restored into a fresh
// server, with Redis rebuilt from it: what a restore to a point before the last orders means,
// and the runbook's remedy (docs/runbook.md, Restoring MySQL from a backup). It shows that
//   - the restored database is consistent (every order it holds is the live one, total =
//     left + succeeded) but lacks the orders written after the backup's point, whose
//     order.created events downstream already has;
//   - the reconciler's rebuild trusts the consumer group's lag, which Kafka keeps, so it
//     rebuilds Redis from the restored database at once and puts the lost orders' units on
//     sale again; the consumer group, its offsets past those grabs, re-persists nothing; the
//     stale and drift jobs see nothing wrong;
//   - rewinding the group to the backup's start time replays the grabs: every lost order
//     comes back with the status downstream was told, none twice, and the next reconciler
//     run takes the units off sale again.
func TestRestoreFromHotBackupDuringASale(t *testing.T) {
	if _, err := exec.LookPath("mariadb-backup"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("mariadb-backup is missing (deploy/local/stack up installs it)")
		}
		t.Skip("mariadb-backup is missing: run deploy/local/stack up as root, or apt-get install mariadb-backup")
	}
	e := newRecEnv(t, 5000, 1)
	e.startConsumer()
	cfg, err := mysql.ParseDSN(e.dsn)
	if err != nil {
		t.Fatal(err)
	}

	// The crowd: one admitted grab every 10 ms, as the gateway does it (Redis, then Kafka),
	// until 60 grabs after the backup finished.
	w, err := event.NewGrabWriter(e.brokers, e.topics.Grab.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var (
		mu        sync.Mutex
		admitted  []seckill.Grab
		backedUp  atomic.Bool
		crowdErr  = make(chan error, 1)
		afterDone = 60
	)
	go func() {
		for i := 0; i < 4000; i++ {
			g := seckill.Grab{RequestID: seckill.RequestID(e.session, e.prize, fmt.Sprintf("key-crowd-%05d", i)),
				UserID: fmt.Sprintf("crowd-%d", i), SessionID: e.session, PrizeID: e.prize, AdmittedAt: time.Now().UTC()}
			if v, err := e.gate.Reserve(e.ctx, g); err != nil || v.Code != stock.Admitted {
				crowdErr <- fmt.Errorf("reserve %s: %+v %v", g.RequestID, v, err)
				return
			}
			m, err := event.EncodeGrab(g)
			if err == nil {
				err = w.WriteMessages(e.ctx, m)
			}
			if err != nil {
				crowdErr <- err
				return
			}
			mu.Lock()
			admitted = append(admitted, g)
			mu.Unlock()
			if backedUp.Load() {
				if afterDone--; afterDone == 0 {
					break
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		crowdErr <- nil
	}()
	e.waitOrders(50)
	backupDir := filepath.Join(t.TempDir(), "backup")
	take := exec.CommandContext(e.ctx, filepath.Join(harness.Root(), "deploy/local/backup"), "take", backupDir,
		"--databases", "mysql "+cfg.DBName)
	out, err := take.Output()
	backedUp.Store(true)
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("backup take: %v\n%s", err, stderr)
	}
	started, err := time.Parse(time.RFC3339, strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("backup start time %q: %v", out, err)
	}
	if err := <-crowdErr; err != nil {
		t.Fatal(err)
	}
	e.waitOrders(int64(len(admitted)))
	e.waitSettled()
	for deadline := time.Now().Add(30 * time.Second); e.orders("NOT "+store.PublishedSQL("orders")) > 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("order events not all published after 30 s")
		}
	}
	live := statuses(t, e.db)
	liveLeft := e.dbLeft()
	// The live database is lost; its consumer stops with it.
	if err := e.consumer.Stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}

	// Restore into a server of the test's own.
	runDir := filepath.Join(t.TempDir(), "restored")
	port := lowPort(t)
	restore := exec.CommandContext(e.ctx, filepath.Join(harness.Root(), "deploy/local/backup"), "restore", backupDir,
		filepath.Join(runDir, "data"), strconv.Itoa(port))
	if out, err := restore.CombinedOutput(); err != nil {
		t.Fatalf("backup restore: %v\n%s", err, out)
	}
	pidText, err := os.ReadFile(filepath.Join(runDir, "mariadbd.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(pidText)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopPID(pid) })
	cfg.Addr = "127.0.0.1:" + strconv.Itoa(port)
	restoredDSN := cfg.FormatDSN()
	rdb, err := stacktest.OpenMySQL(e.ctx, t, restoredDSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close(rdb) })

	restored := statuses(t, rdb)
	var lost []string
	lostSucceeded := 0
	for rid, st := range live {
		if got, ok := restored[rid]; !ok {
			lost = append(lost, rid)
			if st == string(seckill.OrderSucceeded) {
				lostSucceeded++
			}
		} else if got != st {
			t.Errorf("restored order %s is %s, live %s", rid, got, st)
		}
	}
	t.Logf("backup started %s; %d orders live, %d restored, %d lost (%d succeeded); %d grabs admitted",
		started.Format(time.RFC3339Nano), len(live), len(restored), len(lost), lostSucceeded, len(admitted))
	if len(restored) < 50 || len(lost) == 0 || len(restored)+len(lost) != len(live) {
		t.Fatalf("restored %d of %d orders: want at least the 50 before the backup and fewer than all", len(restored), len(live))
	}
	left := func(db *gorm.DB) int64 {
		var n int64
		if err := db.Raw("SELECT left_stock FROM session_stocks WHERE session_id = ? AND prize_id = ?", e.session, e.prize).Row().Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	var restoredSucceeded int64
	rdb.Raw("SELECT COUNT(*) FROM orders WHERE status = 'succeeded'").Row().Scan(&restoredSucceeded)
	if left(rdb)+restoredSucceeded != 5000 {
		t.Fatalf("restored database: left %d + succeeded %d != total 5000", left(rdb), restoredSucceeded)
	}
	// Downstream already has the lost orders: their order.created events are on the topic.
	announced, _ := e.orderEvents()
	for _, rid := range lost {
		if announced["order:"+rid+":"+live[rid]] != 1 {
			t.Fatalf("lost order %s: its event is on the order topic %d times, want once", rid, announced["order:"+rid+":"+live[rid]])
		}
	}

	// Redis rebuilt from the restored database, in a Redis of the test's own.
	redisBin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal(err)
	}
	redisAddr := "127.0.0.1:" + strconv.Itoa(lowPort(t))
	_, redisPort, _ := net.SplitHostPort(redisAddr)
	srv, err := harness.Start("redis-server", redisBin, nil, "--bind", "127.0.0.1", "--port", redisPort,
		"--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction", "--dir", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Kill)
	fresh := redis.NewClient(&redis.Options{Addr: redisAddr})
	t.Cleanup(func() { fresh.Close() })
	for deadline := time.Now().Add(20 * time.Second); fresh.Ping(e.ctx).Err() != nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("fresh redis not ready:\n%s", srv.Output())
		}
	}
	freshGate, err := stock.NewGate(e.ctx, fresh)
	if err != nil {
		t.Fatal(err)
	}
	redisLeft := func() int64 {
		snaps, err := freshGate.Snapshots(e.ctx, []seckill.SessionPrize{{Session: e.session, Prize: e.prize}})
		if err != nil || !snaps[0].Loaded {
			t.Fatalf("fresh redis: %+v %v", snaps, err)
		}
		return snaps[0].Left
	}
	envR := maps.Clone(e.env)
	envR["SECKILL_MYSQL_DSN"] = restoredDSN
	envR["SECKILL_REDIS_ADDR"] = redisAddr
	envR["SECKILL_CONSUMER_ADDR"] = stacktest.FreeAddr(t)
	envR["SECKILL_BATCH_WAIT"] = "2ms"
	rep := onceWith(t, e, envR)
	if got := jobOf(rep, "rebuild").Summary["rebuilt"]; got != 1 {
		t.Fatalf("rebuild from the restored database: %+v", jobOf(rep, "rebuild"))
	}
	// The rebuild waited for consumer lag 0, which Kafka reports for offsets past the lost
	// grabs: the units the lost orders took are on sale again.
	if redisLeft() != left(rdb) || left(rdb) != liveLeft+int64(lostSucceeded) {
		t.Fatalf("rebuilt redis left %d, restored left %d, live left %d, lost succeeded %d", redisLeft(), left(rdb), liveLeft, lostSucceeded)
	}

	// The consumer group as it is: its offsets are past the lost grabs, so it re-persists
	// nothing; the stale job finds no reservation in the rebuilt Redis, the drift job no drift.
	consumer := stacktest.Start(t, "consumer", envR)
	stacktest.WaitHTTP(t, "http://"+envR["SECKILL_CONSUMER_ADDR"]+"/readyz", 30*time.Second)
	admin := stacktest.KafkaAdmin(t, e.brokers)
	lag, err := admin.Lag(e.ctx, envR["SECKILL_CONSUMER_GROUP"], e.topics.Grab)
	if err != nil {
		t.Fatal(err)
	}
	for p, n := range lag {
		if n != 0 {
			t.Fatalf("group lag on partition %d is %d: the group should be at the end", p, n)
		}
	}
	rep = onceWith(t, e, envR)
	if jobOf(rep, "stale").Summary["republished"] != 0 || jobOf(rep, "drift").Summary["corrected"] != 0 {
		t.Fatalf("stale or drift acted on the restored state: %+v %+v", jobOf(rep, "stale"), jobOf(rep, "drift"))
	}
	if n := len(statuses(t, rdb)); n != len(restored) {
		t.Fatalf("%d orders after the consumer ran with its offsets, want the %d restored", n, len(restored))
	}

	// The remedy: consumers stopped, the group rewound to before the backup began, started again.
	if err := consumer.Stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	reset := exec.CommandContext(e.ctx, filepath.Join(harness.Root(), "deploy/local/kafka-tool"), "consumer-groups",
		"--bootstrap-server", e.brokers[0], "--group", envR["SECKILL_CONSUMER_GROUP"], "--topic", e.topics.Grab.Name,
		"--reset-offsets", "--to-datetime", started.Add(-time.Minute).UTC().Format("2006-01-02T15:04:05.000"), "--execute")
	reset.Env = append(os.Environ(), "TZ=UTC")
	if out, err := reset.CombinedOutput(); err != nil {
		t.Fatalf("kafka-consumer-groups --reset-offsets: %v\n%s", err, out)
	}
	envR["SECKILL_CONSUMER_ADDR"] = stacktest.FreeAddr(t)
	stacktest.Start(t, "consumer", envR)
	stacktest.WaitHTTP(t, "http://"+envR["SECKILL_CONSUMER_ADDR"]+"/readyz", 30*time.Second)
	var after map[string]string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if after = statuses(t, rdb); len(after) >= len(live) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d orders 60 s after the rewind, want %d", len(after), len(live))
		}
	}
	if len(after) != len(live) {
		t.Fatalf("%d orders after the replay, %d live", len(after), len(live))
	}
	for rid, st := range live {
		if after[rid] != st {
			t.Errorf("order %s after the replay is %q, downstream was told %q", rid, after[rid], st)
		}
	}
	rep = onceWith(t, e, envR)
	if redisLeft() != liveLeft || left(rdb) != liveLeft {
		t.Fatalf("after the replay and a reconciler run: redis left %d, restored left %d, want %d (%+v)", redisLeft(), left(rdb), liveLeft, jobOf(rep, "drift"))
	}
	// What downstream sees: the re-created orders' events published again under the same
	// event ids (it deduplicates on them), never an order announced with two outcomes.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var n int64
		rdb.Raw("SELECT COUNT(*) FROM orders WHERE NOT " + store.PublishedSQL("orders")).Row().Scan(&n)
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d restored orders' events not published 30 s after the replay", n)
		}
	}
	final, _ := e.orderEvents()
	outcomes := map[string]map[string]bool{}
	again := 0
	for id, n := range final {
		rest := strings.TrimPrefix(id, "order:")
		i := strings.LastIndex(rest, ":")
		rid, st := rest[:i], rest[i+1:]
		if outcomes[rid] == nil {
			outcomes[rid] = map[string]bool{}
		}
		outcomes[rid][st] = true
		again += n - announced[id]
	}
	for rid, sts := range outcomes {
		if len(sts) != 1 {
			t.Errorf("order %s announced with outcomes %v", rid, sts)
		}
	}
	t.Logf("after the replay: %d order events published again (same event ids) for %d lost orders", again, len(lost))
}
