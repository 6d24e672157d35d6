package main

import (
	"bufio"
	"bytes"
	"context"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// The consumer process end to end: grab events (and one poison message) on the topic
// become orders and order events; the poison is dead-lettered; the group's committed
// offsets cover everything; SIGTERM (ctx) stops it cleanly.
func TestConsumerEndToEnd(t *testing.T) {
	e := newEnv(t, 10, 10, 1)
	msgs := e.admit(t, 6)
	w := e.writer(t, e.topics.Grab.Name)
	var out []kafka.Message
	for i, m := range msgs {
		out = append(out, kafka.Message{Key: m.Key, Value: m.Value})
		if i == 2 {
			out = append(out, kafka.Message{Key: m.Key, Value: []byte("not json")})
		}
	}
	if err := w.WriteMessages(e.ctx, out...); err != nil {
		t.Fatal(err)
	}

	addr := stacktest.FreeAddr(t)
	vars := e.consumerVars(t, addr)
	group := vars["SECKILL_CONSUMER_GROUP"]
	getenv := stacktest.Getenv(vars)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, getenv, &logs) }()
	stacktest.WaitHTTP(t, "http://"+addr+"/readyz", 20*time.Second)

	outbox := store.NewOutbox(e.db)
	deadline := time.Now().Add(30 * time.Second)
	for {
		pending, _ := outbox.CountPending(e.ctx)
		if e.count(t, "1=1") == 6 && pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("orders not written in 30s; log:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Wait for the offsets to be committed, then stop.
	client := stacktest.KafkaClient(t, e.brokers)
	parts := make([]int, e.topics.Grab.Partitions)
	for i := range parts {
		parts[i] = i
	}
	for {
		resp, err := client.OffsetFetch(e.ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{e.topics.Grab.Name: parts}})
		var committed int64
		if err == nil {
			for _, p := range resp.Topics[e.topics.Grab.Name] {
				committed += max(0, p.CommittedOffset)
			}
		}
		if committed == int64(len(out)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("committed %d offsets, want %d; log:\n%s", committed, len(out), logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v\n%s", err, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("consumer did not stop within 30s")
	}
	// The soft memory limit is decided once, at start, and said once (pkg/memlimit).
	if n := strings.Count(logs.String(), `"msg":"memory limit","source":`); n != 1 {
		t.Fatalf("%d memory limit lines in the log, want 1:\n%s", n, logs.String())
	}
	if n := len(readAll(t, e.brokers, e.topics.DeadLetter)); n != 1 {
		t.Fatalf("%d dead letters, want 1", n)
	}
	if n := len(readAll(t, e.brokers, e.topics.Order)); n != 6 {
		t.Fatalf("%d order events, want 6", n)
	}
	if snap, _ := e.gate.Snapshots(e.ctx, []seckill.SessionPrize{{Session: e.session, Prize: e.prize}}); snap[0].Pending != 0 {
		t.Fatalf("%d reservations still pending in redis", snap[0].Pending)
	}
}

// While processing is stalled (the prize's stock row is locked by another transaction, so
// no batch completes), the consumer's metrics still tell the truth: its lag is the group's
// (end offset - committed offset, from the broker) and outbox_pending is MySQL's count,
// even on an instance that does not hold the relay lock.
func TestMetricsTellTheTruthWhileStalled(t *testing.T) {
	e := newEnv(t, 10, 10, 1)
	msgs := e.admit(t, 8)
	// Three orders already written whose events nobody publishes: another instance holds
	// the relay lock and is not relaying.
	if err := e.processor(t, store.NewOrders(e.db)).Process(e.ctx, msgs[:3]); err != nil {
		t.Fatal(err)
	}
	relayLock, ok, err := store.TryLock(e.ctx, e.db, store.RelayLockName(e.dsn, e.topics.Order.Name))
	if err != nil || !ok {
		t.Fatalf("take the relay lock: %v %v", ok, err)
	}
	defer relayLock.Release(context.Background())
	// The stall: the stock row is locked until the test ends.
	tx := e.db.Begin()
	if err := tx.Exec("SELECT id FROM session_stocks WHERE session_id = ? AND prize_id = ? FOR UPDATE", e.session, e.prize).Error; err != nil {
		t.Fatal(err)
	}
	stalled := true
	unstall := func() {
		if stalled {
			tx.Rollback()
			stalled = false
		}
	}
	defer unstall()
	var out []kafka.Message
	for _, m := range msgs[3:] {
		out = append(out, kafka.Message{Key: m.Key, Value: m.Value})
	}
	if err := e.writer(t, e.topics.Grab.Name).WriteMessages(e.ctx, out...); err != nil {
		t.Fatal(err)
	}

	addr := stacktest.FreeAddr(t)
	getenv := stacktest.Getenv(e.consumerVars(t, addr))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, getenv, &logs) }()
	stacktest.WaitHTTP(t, "http://"+addr+"/readyz", 20*time.Second)

	var lag, pending float64
	deadline := time.Now().Add(20 * time.Second)
	for {
		series := scrape(t, "http://"+addr+"/metrics")
		lag, pending = 0, series["seckill_consumer_outbox_pending"]
		for name, v := range series {
			if strings.HasPrefix(name, "seckill_consumer_lag{") {
				lag += v
			}
		}
		if lag == 5 && pending == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stalled consumer reports lag %v (want 5) and outbox_pending %v (want 3); log:\n%s", lag, pending, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := e.count(t, "1=1"); n != 3 {
		t.Fatalf("%d orders while stalled, want 3 (the stall did not hold)", n)
	}
	unstall()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v\n%s", err, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("consumer did not stop within 30s")
	}
}

// scrape reads a Prometheus text page into series name (with labels) -> value.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// The consumer refuses a Redis that may evict keys, as the gateway and the reconciler do.
// The evicting Redis is a real redis-server of the test's own on a free port (the stack's
// Redis is shared and must keep noeviction).
func TestConsumerRefusesEvictingRedis(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("redis-server not installed")
		}
		t.Skip("redis-server not installed")
	}
	addr := stacktest.FreeAddr(t)
	_, port, _ := strings.Cut(addr, ":")
	srv := exec.Command(bin, "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no",
		"--maxmemory-policy", "allkeys-lru", "--dir", t.TempDir())
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	for deadline := time.Now().Add(10 * time.Second); rdb.Ping(context.Background()).Err() != nil; {
		if time.Now().After(deadline) {
			t.Fatal("private redis-server did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}

	brokers, topics := stacktest.Kafka(t)
	dsn, _ := stacktest.Migrated(t)
	vars := stacktest.ConsumerGroups(t)
	maps.Copy(vars, map[string]string{
		"SECKILL_MYSQL_DSN": dsn, "SECKILL_REDIS_ADDR": addr, "SECKILL_KAFKA_BROKERS": strings.Join(brokers, ","),
		"SECKILL_CONSUMER_ADDR": stacktest.FreeAddr(t),
		"SECKILL_TOPIC_PREFIX":  strings.TrimSuffix(topics.Grab.Name, ".seckill.grab"),
		// The private server is plaintext with the default user, whatever the stack's is.
		"SECKILL_REDIS_TLS": "false", "SECKILL_REDIS_CA_FILE": "", "SECKILL_REDIS_USERNAME": "",
		"SECKILL_REDIS_PASSWORD": "", "SECKILL_REDIS_PASSWORD_FILE": "",
	})
	getenv := stacktest.Getenv(vars)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var logs syncBuffer
	err = run(ctx, getenv, &logs)
	if err == nil || !strings.Contains(err.Error(), "noeviction") || ctx.Err() != nil {
		t.Fatalf("run with maxmemory-policy allkeys-lru: %v (want a refusal naming noeviction at start-up); log:\n%s", err, logs.String())
	}
}

// syncBuffer is a bytes.Buffer the consumer's goroutines can log into while the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
