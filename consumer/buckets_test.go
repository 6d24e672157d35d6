package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// TestBucketedGrabsPersistPerBucket: one fetched batch holding the grabs of a prize's 4
// stock buckets (a partition carries several buckets' keys) becomes one transaction per
// bucket, each on its own row, with the orders' buckets and the outcomes settled on each
// bucket's keys; a grab naming a bucket the prize does not have is dead-lettered; the
// same batch again changes nothing.
func TestBucketedGrabsPersistPerBucket(t *testing.T) {
	const n, per = 4, 3
	op := stacktest.NewBucketedPrize(t, per, n, 1)
	brokers, topics := stacktest.Kafka(t)
	e := &env{dsn: op.DSN, db: op.DB, rdb: op.Redis, gate: op.Gate, brokers: brokers, topics: topics,
		session: op.SessionID, prize: op.PrizeID, ctx: stacktest.Context(t, 90*time.Second)}
	var msgs []kafka.Message
	var grabs []seckill.Grab
	perBucket := map[int]int{}
	for i := 0; len(grabs) < n*per; i++ {
		u := fmt.Sprintf("u%d", i)
		b := stock.HomeBucket(u, n)
		if perBucket[b] == per {
			continue
		}
		perBucket[b]++
		g := seckill.Grab{RequestID: seckill.RequestID(e.session, e.prize, fmt.Sprintf("key-%08d", i)), UserID: u,
			SessionID: e.session, PrizeID: e.prize, Bucket: b, Buckets: n, AdmittedAt: time.Now().UTC()}
		if v, err := e.gate.Reserve(e.ctx, g); err != nil || v.Code != stock.Admitted {
			t.Fatalf("reserve %s in bucket %d: %v %v", u, b, v.Code, err)
		}
		grabs = append(grabs, g)
	}
	forged := seckill.Grab{RequestID: seckill.RequestID(e.session, e.prize, "key-forged"), UserID: "mallory",
		SessionID: e.session, PrizeID: e.prize, Bucket: n, AdmittedAt: time.Now().UTC()}
	for i, g := range append(grabs, forged) {
		m, err := event.EncodeGrab(g)
		if err != nil {
			t.Fatal(err)
		}
		m.Topic, m.Offset = e.topics.Grab.Name, int64(i)
		msgs = append(msgs, m)
	}
	p := e.processor(t, store.NewOrders(e.db))
	for round := range 2 {
		if err := p.Process(e.ctx, msgs); err != nil {
			t.Fatal(err)
		}
		bs, err := store.NewCatalog(e.db, time.Now).Buckets(e.ctx, e.session, e.prize)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bs {
			// One transaction per bucket in the first round; the redelivery updates nothing.
			if b.Left != 0 || b.Version != 1 {
				t.Fatalf("round %d: bucket %+v, want left 0 at version 1", round, b)
			}
		}
		for _, g := range grabs {
			if n := e.count(t, "request_id = ? AND bucket = ? AND status = 'succeeded'", g.RequestID, g.Bucket); n != 1 {
				t.Fatalf("round %d: grab %s of bucket %d has %d succeeded orders there", round, g.RequestID, g.Bucket, n)
			}
			k := stock.BucketKeysFor(e.session, e.prize, g.Bucket, n)
			if out := e.rdb.HGet(e.ctx, k.Outcomes, g.RequestID).Val(); !strings.HasPrefix(out, g.UserID+"|s|") {
				t.Fatalf("round %d: outcome of %s on bucket %d's keys: %q", round, g.RequestID, g.Bucket, out)
			}
			if e.rdb.HExists(e.ctx, k.Reserved, g.RequestID).Val() {
				t.Fatalf("round %d: %s still reserved in bucket %d", round, g.RequestID, g.Bucket)
			}
		}
		if n := e.count(t, "session_id = ? AND prize_id = ?", e.session, e.prize); n != int64(len(grabs)) {
			t.Fatalf("round %d: %d orders, want %d", round, n, len(grabs))
		}
	}
	dl := readAll(t, e.brokers, e.topics.DeadLetter)
	if len(dl) != 2 || !strings.Contains(header(dl[0], "error"), "no such stock bucket") || string(dl[0].Value) != string(msgs[len(msgs)-1].Value) {
		t.Fatalf("dead letters %d (first error %q), want the forged grab twice, refused for its bucket", len(dl), header(dl[0], "error"))
	}
}
