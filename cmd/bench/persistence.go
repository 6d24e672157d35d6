package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/internal/harness"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// How fast do orders go into one hot stock row? The consumer's batched transaction against
// one transaction per order (cmd/hotrow), and the consumer itself draining a preloaded grab
// topic of one hot prize into MySQL; each as MariaDB is configured and, with -binlog, with
// the binary log and sync_binlog=1 (the stack restarts MariaDB for it). The two modes run
// in ABBA order across repetitions (off, on | on, off | off, on), so each repetition
// measures both and MariaDB restarts once per repetition instead of twice.

type hotRow struct {
	Mode      string  `json:"mode"`
	Orders    int     `json:"orders"`
	PerSecond float64 `json:"orders_per_s"`
}

func (b *bench) persistence(ctx context.Context, rep int) ([]measured, error) {
	modes := []string{modeConfigured}
	if b.binlog {
		modes = append(modes, modeBinlog)
		if b.binlogOn {
			modes = []string{modeBinlog, modeConfigured}
		}
	}
	var out []measured
	for _, mode := range modes {
		if err := b.setBinlog(ctx, mode == modeBinlog); err != nil {
			return nil, err
		}
		rows, err := b.hotrow(ctx)
		if err != nil {
			return nil, err
		}
		if len(rows) != 2 || rows[0].PerSecond <= 0 || rows[1].PerSecond <= 0 {
			return nil, fmt.Errorf("hotrow: want a batched and a per-order rate, got %+v", rows)
		}
		b.logf("  %s: batched %.0f/s, one tx per order %.0f/s", mode, rows[0].PerSecond, rows[1].PerSecond)
		out = append(out, measured{keyHotRow(mode), "persistence, one hot row, batched (500/tx) vs one tx per order (" + mode + ")",
			&sample{ThroughputPS: rows[0].PerSecond, Extra: map[string]any{extraPerOrder: rows[1].PerSecond,
				"batched_orders": rows[0].Orders, "per_order_orders": rows[1].Orders}}})
		k, err := b.kafkaToMySQL(ctx, mode)
		if err != nil {
			return nil, err
		}
		out = append(out, measured{keyKafkaMySQL(mode), "persistence, Kafka → MySQL, one hot prize, consumer (" + mode + ")", k})
	}
	return out, nil
}

func (b *bench) hotrow(ctx context.Context) ([]hotRow, error) {
	batched, perOrder := 20_000, 3_000
	if b.quick {
		batched, perOrder = 2_000, 500
	}
	cmd := exec.CommandContext(ctx, filepath.Join(b.bin, "hotrow"), "-json", "-orders", strconv.Itoa(batched),
		"-per-order", strconv.Itoa(perOrder), "-batch", "500")
	cmd.Env = os.Environ()
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("hotrow: %w", err)
	}
	var rows []hotRow
	return rows, json.Unmarshal(out, &rows)
}

// setBinlog restarts MariaDB when its binary log is not already as wanted.
func (b *bench) setBinlog(ctx context.Context, on bool) error {
	if b.binlogOn == on {
		return nil
	}
	flag := "0"
	if on {
		flag = "1"
	}
	b.logf("  restarting MariaDB with SECKILL_MYSQL_BINLOG=%s", flag)
	if err := restartMariaDB(ctx, b.out, flag); err != nil {
		// The log may be on now: restoreMariaDB must try again.
		b.binlogOn = true
		return err
	}
	b.binlogOn = on
	return nil
}

// restoreMariaDB leaves MariaDB as the stack configures it, also after a failed run.
func (b *bench) restoreMariaDB(ctx context.Context) error {
	if !b.binlogOn {
		return nil
	}
	return b.setBinlog(ctx, false)
}

// restartMariaDB restarts the stack's MariaDB with or without the binary log.
func restartMariaDB(ctx context.Context, out io.Writer, binlog string) error {
	srv := harness.LocalServers()
	if err := srv.Signal("mariadb", syscall.SIGTERM); err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := srv.Signal("mariadb", 0); err != nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("mariadb did not stop")
		}
		time.Sleep(100 * time.Millisecond)
	}
	os.Setenv("SECKILL_MYSQL_BINLOG", binlog)
	defer os.Unsetenv("SECKILL_MYSQL_BINLOG")
	return srv.Up(ctx, nil)
}

// kafkaToMySQL preloads the grab topic with one hot prize's events, then starts one
// consumer and measures orders/s from the first order committed to the last.
func (b *bench) kafkaToMySQL(ctx context.Context, mode string) (*sample, error) {
	d, err := b.drainHotPrize(ctx, 1)
	if err != nil {
		return nil, err
	}
	b.logf("  kafka → mysql (%s): %s", mode, d.line())
	return d.s, nil
}

// drained is one drainHotPrize run: its sample and what the log says about it.
type drained struct {
	s          *sample
	partitions []int // the grab partition of each bucket
	n          int
	secs, rate float64
	cpu        []string
}

func (d drained) line() string {
	return fmt.Sprintf("%d orders in %.2fs = %.0f orders/s; CPU µs/order: %s", d.n, d.secs, d.rate, strings.Join(d.cpu, ", "))
}

// drainHotPrize preloads the grab topic with the events of one hot prize of n stock buckets
// (n = 1: a prize without buckets, as the persistence step has always measured it), then
// starts one consumer and measures orders/s from the first order committed to the last.
// For n > 1 the prize's buckets' keys must land on n different grab partitions, as
// placement promises (bucketPlan, buckets.go, fails the run otherwise): the row measures n
// serial parts side by side, which is what buckets are for. Each bucket drains as many
// orders as the prize without buckets: an order's created_at is its batch's start, so the
// first-to-last span leaves out the last batch of each partition, and leaves out the same
// share of the work for every bucket count.
func (b *bench) drainHotPrize(ctx context.Context, buckets int) (drained, error) {
	n := b.n(40_000) * buckets
	opts := harness.Options{Bin: b.bin, Stocks: []int{n}, Limit: 1, Consumers: 0}
	if buckets > 1 {
		opts.Buckets = []int{buckets}
	}
	c, err := harness.NewPipeline(ctx, opts)
	if err != nil {
		return drained{}, err
	}
	defer c.Close()
	parts, err := c.Admin.Partitions(ctx, c.Topics.Grab.Name)
	if err != nil {
		return drained{}, err
	}
	prize := c.Prizes[0].ID
	onPartition, err := bucketPlan(c.Session.ID, prize, buckets, parts)
	if err != nil {
		return drained{}, err
	}
	if buckets > 1 {
		b.logf("  %d buckets of prize %d on grab partitions %v (of %d)", buckets, prize, onPartition, parts)
	}
	users, err := assignUsers(store.Split(n, buckets))
	if err != nil {
		return drained{}, err
	}
	w, err := event.NewGrabWriter(c.Brokers, c.Topics.Grab.Name)
	if err != nil {
		return drained{}, err
	}
	w.BatchSize = 5000
	now := time.Now().UTC()
	// The last event of each bucket: one partition per bucket, consumed in order, so when
	// its order exists every earlier order of the bucket does too.
	last := make([]string, buckets)
	for i := 0; i < n; i += 5000 {
		msgs := make([]kafka.Message, 0, 5000)
		for j := i; j < min(i+5000, n); j++ {
			g := seckill.Grab{RequestID: seckill.RequestID(c.Session.ID, prize, fmt.Sprintf("pre-%08d", j)),
				UserID: users[j].user, SessionID: c.Session.ID, PrizeID: prize, Bucket: users[j].bucket, AdmittedAt: now}
			m, err := event.EncodeGrab(g)
			if err != nil {
				w.Close()
				return drained{}, err
			}
			msgs = append(msgs, m)
			last[g.Bucket] = g.RequestID
		}
		if err := w.WriteMessages(ctx, msgs...); err != nil {
			w.Close()
			return drained{}, err
		}
	}
	if err := w.Close(); err != nil {
		return drained{}, err
	}
	// CPU per order per process (the cost model in docs/performance.md): the consumer, the
	// MySQL server and the Kafka broker, from the consumer's start to its last order. The
	// servers are found by their listening sockets; one not found is left out, not zero.
	var servers []cpuProc
	if p, ok := b.serverProc("kafka", c.Brokers); ok {
		servers = append(servers, p)
	}
	if p, ok, err := b.mariadbProc(c.DSN); err != nil {
		return drained{}, err
	} else if ok {
		servers = append(servers, p)
	}
	start := time.Now()
	p, err := harness.Start("consumer", filepath.Join(b.bin, "consumer"), map[string]string{
		"SECKILL_MYSQL_DSN": c.DSN, "SECKILL_TOPIC_PREFIX": c.Env["SECKILL_TOPIC_PREFIX"], "SECKILL_CONSUMER_GROUP": c.Env["SECKILL_CONSUMER_GROUP"],
		"SECKILL_CONSUMER_ADDR": "127.0.0.1:0", "SECKILL_LOG_LEVEL": "warn"}) // the shipped batch size and wait
	if err != nil {
		return drained{}, err
	}
	defer p.Kill()
	procs := append([]cpuProc{{"consumer", []int{p.Pid()}}}, servers...)
	cpuBefore, err := cpuTimes(procs)
	if err != nil {
		return drained{}, err
	}
	// Done when every bucket's last event's order exists. Unique-key lookups, not a
	// COUNT(*) that scans an index of tens of thousands of rows every 100 ms while the
	// consumer writes it (that poll cost the measured rate about 10 %); the count runs
	// once, at the end, to check.
	for {
		if time.Since(start) > 3*time.Minute || p.Exited() {
			return drained{}, fmt.Errorf("consumer did not persist %v within 3 minutes:\n%s", last, p.Output())
		}
		if err := pause(ctx, 100*time.Millisecond); err != nil {
			return drained{}, err
		}
		var found int64
		if err := c.DB.Raw("SELECT COUNT(*) FROM orders WHERE request_id IN ?", last).Scan(&found).Error; err != nil {
			return drained{}, fmt.Errorf("look up the last orders: %w", err)
		}
		if found == int64(buckets) {
			break
		}
	}
	cpuAfter, err := cpuTimes(procs)
	if err != nil {
		return drained{}, err
	}
	var done int64
	if err := c.DB.Raw("SELECT COUNT(*) FROM orders").Scan(&done).Error; err != nil {
		return drained{}, fmt.Errorf("count persisted orders: %w", err)
	}
	if done != int64(n) {
		return drained{}, fmt.Errorf("the last orders are there but %d of %d orders are", done, n)
	}
	var skew float64
	if buckets > 1 {
		if err := checkBucketOrders(c, store.Split(n, buckets)); err != nil {
			return drained{}, err
		}
		if skew, err = bucketStartSkew(c); err != nil {
			return drained{}, err
		}
	}
	var span struct{ First, Last time.Time }
	if err := c.DB.Raw("SELECT MIN(created_at) AS first, MAX(created_at) AS last FROM orders").Scan(&span).Error; err != nil {
		return drained{}, fmt.Errorf("read the persistence span: %w", err)
	}
	secs := span.Last.Sub(span.First).Seconds()
	d := drained{partitions: onPartition, n: n, secs: secs, rate: float64(n) / max(secs, 0.001)}
	extra := map[string]any{"orders": n, "seconds": secs}
	if buckets > 1 {
		extra["bucket_start_skew_s"] = skew
	}
	for i, pr := range procs {
		us := float64((cpuAfter[i] - cpuBefore[i]).Microseconds()) / float64(n)
		extra["cpu_us_per_order_"+pr.name] = us
		d.cpu = append(d.cpu, fmt.Sprintf("%s %.1f", pr.name, us))
	}
	d.s = &sample{ThroughputPS: d.rate, Extra: extra}
	return d, nil
}
