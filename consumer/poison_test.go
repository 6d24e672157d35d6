package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/internal/harness"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/exception"
	"github.com/seckill-pipeline/seckill/pkg/retry"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// poisonKinds is harness.PoisonKinds as read from topic, offsets from first.
func poisonKinds(topic string, first int64) []kafka.Message {
	msgs := harness.PoisonKinds(nil)
	for i := range msgs {
		msgs[i].Topic, msgs[i].Offset = topic, first+int64(i)
	}
	return msgs
}

// checkPoisonSetAside checks that each poison message of topic cost exactly one dead letter
// (an oversized one kept truncated, with its size and hash) and one exception case.
func checkPoisonSetAside(t *testing.T, e *env, topic string, poison []kafka.Message) {
	t.Helper()
	dl := readAll(t, e.brokers, e.topics.DeadLetter)
	if len(dl) != len(poison) {
		t.Fatalf("%d dead letters, want %d (one per poison message)", len(dl), len(poison))
	}
	byOffset := map[string]kafka.Message{}
	for _, m := range dl {
		if header(m, event.HeaderOriginTopic) != topic {
			t.Fatalf("dead letter from %q, want %q", header(m, event.HeaderOriginTopic), topic)
		}
		if len(m.Value)+len(m.Key) > e.topics.DeadLetter.MaxMessageBytes/2 {
			t.Fatalf("dead letter of %d bytes", len(m.Value))
		}
		byOffset[header(m, event.HeaderOriginOffset)] = m
	}
	huge := byOffset[strconv.FormatInt(poison[0].Offset, 10)]
	sum := sha256.Sum256(poison[0].Value)
	if header(huge, event.HeaderOriginSize) != strconv.Itoa(len(poison[0].Value)) ||
		header(huge, event.HeaderOriginSHA256) != hex.EncodeToString(sum[:]) ||
		header(huge, event.HeaderTruncated) != strconv.Itoa(len(huge.Value)) ||
		!bytes.HasPrefix(poison[0].Value, huge.Value) || len(header(huge, event.HeaderError)) > 1024 {
		t.Fatalf("oversized message's dead letter: %d bytes, headers %v", len(huge.Value), huge.Headers)
	}
	var cases int64
	if err := e.db.Table("exception_cases").Where("kind = ? AND case_key LIKE ?", seckill.CaseDeadLetter, topic+"/%").Count(&cases).Error; err != nil {
		t.Fatal(err)
	}
	if cases != int64(len(poison)) {
		t.Fatalf("%d dead-letter cases, want %d", cases, len(poison))
	}
}

// Poison of every kind and size on a grab partition, then a
// valid grab: the batch is accounted for in seconds (one dead letter and one exception case
// each), and the grab after it becomes its order. Before the fix the oversized copy was
// refused by Kafka and the exception rows by max_allowed_packet, retried forever: the
// partition stopped for good.
func TestPoisonOfAnySizeOnTheGrabTopicIsSetAside(t *testing.T) {
	e := newEnv(t, 10, 10, 1)
	good := e.admit(t, 1)[0]
	poison := poisonKinds(e.topics.Grab.Name, 100)
	good.Offset = 100 + int64(len(poison))
	p := e.processor(t, store.NewOrders(e.db))
	ctx, cancel := context.WithTimeout(e.ctx, 45*time.Second)
	defer cancel()
	start := time.Now()
	if err := p.Process(ctx, append(poison, good)); err != nil {
		t.Fatalf("poison stopped the batch after %s: %v", time.Since(start).Round(time.Millisecond), err)
	}
	t.Logf("%d poison messages set aside in %s", len(poison), time.Since(start).Round(time.Millisecond))
	if n := e.count(t, "status = 'succeeded'"); n != 1 {
		t.Fatalf("%d orders, want the valid grab's 1", n)
	}
	if n := testutil.ToFloat64(p.metrics.deadLetters); n != float64(len(poison)) {
		t.Fatalf("dead letters counted %v, want %d", n, len(poison))
	}
	checkPoisonSetAside(t, e, e.topics.Grab.Name, poison)
}

// The same on the feedback topic (downstream teams write it): the valid order.paid after the
// poison is applied.
func TestPoisonOfAnySizeOnTheFeedbackTopicIsSetAside(t *testing.T) {
	e := newEnv(t, 3, 3, 1)
	rids := e.sold(t, 1)
	poison := poisonKinds(e.topics.Feedback.Name, 0)
	paid := feedbackMsg(t, e, int64(len(poison)), seckill.Feedback{RequestID: rids[0], Kind: seckill.FeedbackPaid})
	m := newMetrics(prometheus.NewRegistry())
	p := &feedbackProcessor{orders: store.NewOrders(e.db), gate: e.gate, returns: store.NewReturns(e.db),
		deadLetters: exception.NewDeadLetters(e.deadLetters(t, m.deadLetters), store.NewExceptions(e.db), time.Now, slog.New(slog.DiscardHandler)),
		policy:      retry.Policy{Immediate: 2, Backoff: 2, Base: time.Millisecond, Max: 5 * time.Millisecond, Jitter: retry.FullJitter},
		metrics:     newFeedbackMetrics(prometheus.NewRegistry()), log: slog.New(slog.DiscardHandler), now: time.Now}
	ctx, cancel := context.WithTimeout(e.ctx, 45*time.Second)
	defer cancel()
	if err := p.Process(ctx, append(poison, paid)); err != nil {
		t.Fatalf("poison stopped the batch: %v", err)
	}
	if n := e.count(t, "paid_at IS NOT NULL"); n != 1 {
		t.Fatalf("%d paid orders, want 1: the order.paid after the poison was not applied", n)
	}
	checkPoisonSetAside(t, e, e.topics.Feedback.Name, poison)
}
