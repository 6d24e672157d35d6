package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/pkg/stacktest"
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
	group := "t-" + stacktest.ID(t)
	getenv := stacktest.Getenv(map[string]string{
		"SECKILL_MYSQL_DSN": e.dsn, "SECKILL_CONSUMER_ADDR": addr, "SECKILL_CONSUMER_GROUP": group,
		"SECKILL_TOPIC_PREFIX": strings.TrimSuffix(e.topics.Grab.Name, ".seckill.grab"),
	})
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
	client := &kafka.Client{Addr: kafka.TCP(e.brokers...)}
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
	if n := len(readAll(t, e.brokers, e.topics.DeadLetter)); n != 1 {
		t.Fatalf("%d dead letters, want 1", n)
	}
	if n := len(readAll(t, e.brokers, e.topics.Order)); n != 6 {
		t.Fatalf("%d order events, want 6", n)
	}
	if snap, _ := e.gate.Snapshots(e.ctx, [][2]int64{{e.session, e.prize}}); snap[0].Pending != 0 {
		t.Fatalf("%d reservations still pending in redis", snap[0].Pending)
	}
}
