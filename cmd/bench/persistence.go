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
	n := b.n(40_000)
	c, err := harness.NewPipeline(ctx, harness.Options{Bin: b.bin, Stocks: []int{n}, Limit: 1, Consumers: 0})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	w, err := event.NewWriter(c.Brokers, c.Topics.Grab.Name)
	if err != nil {
		return nil, err
	}
	w.BatchSize = 5000
	now := time.Now().UTC()
	for i := 0; i < n; i += 5000 {
		msgs := make([]kafka.Message, 0, 5000)
		for j := i; j < min(i+5000, n); j++ {
			m, err := event.EncodeGrab(seckill.Grab{RequestID: seckill.RequestID(c.Session.ID, c.Prizes[0].ID, fmt.Sprintf("pre-%08d", j)),
				UserID: "u" + strconv.Itoa(j), SessionID: c.Session.ID, PrizeID: c.Prizes[0].ID, AdmittedAt: now})
			if err != nil {
				w.Close()
				return nil, err
			}
			msgs = append(msgs, m)
		}
		if err := w.WriteMessages(ctx, msgs...); err != nil {
			w.Close()
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	// CPU per order per process (the cost model in docs/performance.md): the consumer, the
	// MySQL server and the Kafka broker, from the consumer's start to its last order. The
	// servers are found by their listening sockets; one not found is left out, not zero.
	var servers []cpuProc
	if p, ok := b.serverProc("kafka", c.Brokers); ok {
		servers = append(servers, p)
	}
	if p, ok, err := b.mariadbProc(c.DSN); err != nil {
		return nil, err
	} else if ok {
		servers = append(servers, p)
	}
	start := time.Now()
	p, err := harness.Start("consumer", filepath.Join(b.bin, "consumer"), map[string]string{
		"SECKILL_MYSQL_DSN": c.DSN, "SECKILL_TOPIC_PREFIX": c.Env["SECKILL_TOPIC_PREFIX"], "SECKILL_CONSUMER_GROUP": c.Env["SECKILL_CONSUMER_GROUP"],
		"SECKILL_CONSUMER_ADDR": "127.0.0.1:0", "SECKILL_LOG_LEVEL": "warn"}) // the shipped batch size and wait
	if err != nil {
		return nil, err
	}
	defer p.Kill()
	procs := append([]cpuProc{{"consumer", []int{p.Pid()}}}, servers...)
	cpuBefore, err := cpuTimes(procs)
	if err != nil {
		return nil, err
	}
	// Done when the last event's order exists: one partition, consumed in order, so every
	// earlier order exists too. A unique-key lookup, not a COUNT(*) that scans an index of
	// tens of thousands of rows every 100 ms while the consumer writes it (that poll cost
	// the measured rate about 10 %); the count runs once, at the end, to check.
	last := seckill.RequestID(c.Session.ID, c.Prizes[0].ID, fmt.Sprintf("pre-%08d", n-1))
	for {
		if time.Since(start) > 3*time.Minute || p.Exited() {
			return nil, fmt.Errorf("consumer did not persist %s within 3 minutes:\n%s", last, p.Output())
		}
		if err := pause(ctx, 100*time.Millisecond); err != nil {
			return nil, err
		}
		var found int64
		if err := c.DB.Raw("SELECT COUNT(*) FROM orders WHERE request_id = ?", last).Scan(&found).Error; err != nil {
			return nil, fmt.Errorf("look up the last order: %w", err)
		}
		if found == 1 {
			break
		}
	}
	cpuAfter, err := cpuTimes(procs)
	if err != nil {
		return nil, err
	}
	var done int64
	if err := c.DB.Raw("SELECT COUNT(*) FROM orders").Scan(&done).Error; err != nil {
		return nil, fmt.Errorf("count persisted orders: %w", err)
	}
	if done != int64(n) {
		return nil, fmt.Errorf("the last order is there but %d of %d orders are", done, n)
	}
	var span struct{ First, Last time.Time }
	if err := c.DB.Raw("SELECT MIN(created_at) AS first, MAX(created_at) AS last FROM orders").Scan(&span).Error; err != nil {
		return nil, fmt.Errorf("read the persistence span: %w", err)
	}
	secs := span.Last.Sub(span.First).Seconds()
	rate := float64(n) / max(secs, 0.001)
	extra := map[string]any{"orders": n, "seconds": secs}
	var cpu []string
	for i, pr := range procs {
		us := float64((cpuAfter[i] - cpuBefore[i]).Microseconds()) / float64(n)
		extra["cpu_us_per_order_"+pr.name] = us
		cpu = append(cpu, fmt.Sprintf("%s %.1f", pr.name, us))
	}
	b.logf("  kafka → mysql (%s): %d orders in %.2fs = %.0f orders/s; CPU µs/order: %s", mode, n, secs, rate, strings.Join(cpu, ", "))
	return &sample{ThroughputPS: rate, Extra: extra}, nil
}
