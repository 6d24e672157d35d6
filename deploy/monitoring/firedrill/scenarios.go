package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/pkg/config"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// crowd sends grabs of distinct users at rate a second, at most limit (0: no limit), until
// stopped; the stop function waits for the answers and prints them by status. A grab in
// flight when it stops gets its answer (the HTTP client's timeout bounds it): cut off, it
// would be counted as an error the gateway never made.
func (d *drill) crowd(ctx context.Context, session, prize int64, rate, limit int) (stop func()) {
	inFlight := context.WithoutCancel(ctx)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var sent atomic.Int64
	var mu sync.Mutex
	codes := map[string]int{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second / time.Duration(rate))
		defer t.Stop()
		for i := 0; limit == 0 || i < limit; i++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				code, err := d.grab(inFlight, session, prize, fmt.Sprintf("drill-%d-%d", session, i))
				answer := strconv.Itoa(code)
				if err != nil {
					answer = "error"
				}
				mu.Lock()
				codes[answer]++
				mu.Unlock()
				sent.Add(1)
			}(i)
		}
	}()
	return func() {
		cancel()
		wg.Wait()
		fmt.Printf("  sent %d grabs, answers %v\n", sent.Load(), codes)
	}
}

func (d *drill) conflicts(ctx context.Context) (func(), error) {
	db, err := store.Open(ctx, env("SECKILL_MYSQL_DSN", config.DefaultMySQLDSN))
	if err != nil {
		return nil, err
	}
	session, prize, err := d.sale(ctx, "firedrill: conflict storm", 1_000_000)
	if err != nil {
		store.Close(db)
		return nil, err
	}
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var bumps atomic.Int64
	done := make(chan struct{})
	go func() { // the other writer: every stock row version of this session, continuously
		defer close(done)
		for bctx.Err() == nil {
			if db.WithContext(bctx).Exec("UPDATE session_stocks SET version = version + 1 WHERE session_id = ?", session).Error == nil {
				bumps.Add(1)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	stopCrowd := d.crowd(bctx, session, prize, d.rate, 0)
	return func() {
		cancel()
		stopCrowd()
		<-done
		store.Close(db)
		fmt.Printf("  %d version bumps by the other writer\n", bumps.Load())
	}, nil
}

func (d *drill) soldOut(ctx context.Context) (func(), error) {
	rdb, err := stock.Connect(ctx, env("SECKILL_REDIS_ADDR", config.DefaultRedisAddr), os.Getenv("SECKILL_REDIS_PASSWORD"), time.Second)
	if err != nil {
		return nil, err
	}
	defer rdb.Close()
	const stockN, extra = 10, 15
	session, prize, err := d.sale(ctx, "firedrill: Redis ahead of MySQL", stockN)
	if err != nil {
		return nil, err
	}
	// Drift: Redis believes there are 15 more units than MySQL has.
	if err := rdb.HIncrBy(ctx, stock.KeysFor(session, prize).Meta, "left", extra).Err(); err != nil {
		return nil, err
	}
	answers := map[int]int{}
	for i := range stockN + extra {
		code, err := d.grab(ctx, session, prize, fmt.Sprintf("drill-%d-%d", session, i))
		if err != nil {
			return nil, err
		}
		answers[code]++
	}
	fmt.Printf("  Redis left raised by %d; %d grabs answered %v\n", extra, stockN+extra, answers)
	// Nothing to undo: the reconciler corrects the drift, MySQL kept the truth.
	return func() {}, nil
}

// relay makes the grab topic refuse every produce (its max.message.bytes set below any
// grab event: the broker answers MESSAGE_TOO_LARGE, the partitions stay readable) and sends
// a crowd: each grab goes to the gateway's relay, which fills and drops the rest. Undone,
// the relay publishes what it holds and the reconciler re-publishes the dropped grabs'
// reservations once stale. (Raising min.insync.replicas above the replica count would not
// do: Kafka 4 caps it at the replica count.)
func (d *drill) relay(ctx context.Context) (func(), error) {
	grab := d.common.Topics.Grab
	client := &kafka.Client{Addr: kafka.TCP(d.common.KafkaBrokers...), Timeout: 10 * time.Second}
	if t := d.common.Kafka.Transport(); t != nil { // a nil *Transport in the interface would be used
		client.Transport = t
	}
	restore, err := setTopicConfig(ctx, client, grab.Name, "max.message.bytes", "16")
	if err != nil {
		return nil, err
	}
	fmt.Printf("  %s: max.message.bytes set to 16: every grab event is refused (MESSAGE_TOO_LARGE)\n", grab.Name)
	session, prize, err := d.sale(ctx, "firedrill: grab topic refuses writes", 100_000)
	if err != nil {
		restore()
		return nil, err
	}
	stopCrowd := d.crowd(context.WithoutCancel(ctx), session, prize, d.rate, d.grabs)
	return func() {
		stopCrowd()
		restore()
	}, nil
}

// setTopicConfig sets one of topic's settings and returns what puts it back as it was (the
// topic's own value, or the broker's default when the topic had none).
func setTopicConfig(ctx context.Context, client *kafka.Client, topic, name, value string) (restore func(), err error) {
	desc, err := client.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{{
		ResourceType: kafka.ResourceTypeTopic, ResourceName: topic, ConfigNames: []string{name}}}})
	if err != nil {
		return nil, fmt.Errorf("describe %s: %w", topic, err)
	}
	back := kafka.IncrementalAlterConfigsRequestConfig{Name: name, ConfigOperation: kafka.ConfigOperationDelete}
	for _, r := range desc.Resources {
		if r.Error != nil {
			return nil, fmt.Errorf("describe %s: %w", topic, r.Error)
		}
		for _, e := range r.ConfigEntries {
			const dynamicTopicConfig = 1 // DescribeConfigs' config source of a topic's own value
			if e.ConfigName == name && e.ConfigSource == dynamicTopicConfig {
				back = kafka.IncrementalAlterConfigsRequestConfig{Name: name, Value: e.ConfigValue, ConfigOperation: kafka.ConfigOperationSet}
			}
		}
	}
	alter := func(ctx context.Context, c kafka.IncrementalAlterConfigsRequestConfig) error {
		resp, err := client.IncrementalAlterConfigs(ctx, &kafka.IncrementalAlterConfigsRequest{Resources: []kafka.IncrementalAlterConfigsRequestResource{{
			ResourceType: kafka.ResourceTypeTopic, ResourceName: topic, Configs: []kafka.IncrementalAlterConfigsRequestConfig{c}}}})
		if err == nil {
			for _, r := range resp.Resources {
				err = errors.Join(err, r.Error)
			}
		}
		if err != nil {
			return fmt.Errorf("alter %s %s: %w", topic, c.Name, err)
		}
		return nil
	}
	if err := alter(ctx, kafka.IncrementalAlterConfigsRequestConfig{Name: name, Value: value, ConfigOperation: kafka.ConfigOperationSet}); err != nil {
		return nil, err
	}
	return func() {
		rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := alter(rctx, back); err != nil {
			fmt.Printf("  COULD NOT RESTORE %s's %s (%v): kafka-configs.sh --alter --entity-type topics --entity-name %s --delete-config %s\n", topic, name, err, topic, name)
			return
		}
		fmt.Printf("  %s: %s restored\n", topic, name)
	}, nil
}

// leaseStuck holds a write lock on exception_cases from a MySQL session of its own: the
// reconcile run that reads it (the exceptions job, every run) waits for the lock (MariaDB's
// lock_wait_timeout is a day) while its lease keeps being renewed.
func (d *drill) leaseStuck(ctx context.Context) (func(), error) {
	db, err := store.Open(ctx, env("SECKILL_MYSQL_DSN", config.DefaultMySQLDSN))
	if err != nil {
		return nil, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	conn, err := sqlDB.Conn(ctx)
	if err != nil {
		store.Close(db)
		return nil, err
	}
	if _, err := conn.ExecContext(ctx, "LOCK TABLES exception_cases WRITE"); err != nil {
		conn.Close()
		store.Close(db)
		return nil, fmt.Errorf("lock exception_cases: %w", err)
	}
	fmt.Println("  exception_cases locked for writing by the drill's own MySQL session: reconcile runs wait on it")
	return func() {
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := conn.ExecContext(rctx, "UNLOCK TABLES"); err != nil {
			fmt.Println("  unlock failed (closing the session releases the lock):", err)
		}
		conn.Close()
		store.Close(db)
		fmt.Println("  exception_cases unlocked")
	}, nil
}

// The server scenarios act on the single profile's stack: its MariaDB (root over the
// socket, as deploy/local/stack does) and its one broker.

func (d *drill) singleStack() error {
	if len(d.common.KafkaBrokers) != 1 {
		return fmt.Errorf("the server scenarios act on the single profile's stack; SECKILL_KAFKA_BROKERS names %d brokers", len(d.common.KafkaBrokers))
	}
	if _, err := os.Stat(d.state + "/mariadb/mysqld.sock"); err != nil {
		return fmt.Errorf("no local stack in %s (SECKILL_STATE_DIR): %w", d.state, err)
	}
	return nil
}

func (d *drill) mysqlRoot(ctx context.Context, sql string) error {
	out, err := exec.CommandContext(ctx, "mariadb", "--no-defaults", "-uroot", "-S", d.state+"/mariadb/mysqld.sock", "-e", sql).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mariadb -e %q: %w: %s", sql, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (d *drill) mysqlReadOnly(ctx context.Context) (func(), error) {
	if err := d.singleStack(); err != nil {
		return nil, err
	}
	if err := d.mysqlRoot(ctx, "SET GLOBAL read_only = ON"); err != nil {
		return nil, err
	}
	fmt.Println("  the stack's MariaDB: SET GLOBAL read_only = ON (the pipeline's writes now fail with 1290)")
	return func() {
		rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.mysqlRoot(rctx, "SET GLOBAL read_only = OFF"); err != nil {
			fmt.Println("  COULD NOT TURN read_only OFF:", err)
			return
		}
		fmt.Println("  the stack's MariaDB: read_only OFF")
	}, nil
}

func (d *drill) mysqlDown(ctx context.Context) (func(), error) {
	return d.serverDown(ctx, "mariadb", d.state+"/mariadb/mysqld.pid")
}

func (d *drill) kafkaDown(ctx context.Context) (func(), error) {
	return d.serverDown(ctx, "kafka", d.state+"/kafka/kafka.pid")
}

// serverDown stops the stack's server by its PID file (SIGTERM, then SIGKILL after a
// minute) and returns what starts it again: deploy/local/stack up, which starts what is not
// running and waits until it is ready.
func (d *drill) serverDown(ctx context.Context, name, pidFile string) (func(), error) {
	if err := d.singleStack(); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return nil, fmt.Errorf("%s: PID file %s holds %q", name, pidFile, b)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return nil, fmt.Errorf("stop %s (pid %d): %w", name, pid, err)
	}
	for i := 0; syscall.Kill(pid, 0) == nil; i++ {
		if i == 600 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Printf("  the stack's %s (pid %d) stopped\n", name, pid)
	return func() {
		rctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(rctx, d.stack, "up")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Printf("  COULD NOT START %s AGAIN (%v): run %s up\n", name, err, d.stack)
			return
		}
		fmt.Printf("  the stack's %s started again\n", name)
	}, nil
}
