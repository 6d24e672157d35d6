package main

import (
	"bytes"
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// A burst of the largest messages the feedback topic takes (downstream writes it), then a
// valid order.paid: the consumer, as it runs (its own configuration, both groups), sets the
// burst aside and applies the payment, and its heap stays far below what the burst weighs.
// Before the read-ahead was bounded in bytes, each partition's worker queued up to 2,000
// messages whatever their size, and held the whole burst.
func TestABurstOfLargeMessagesStaysWithinMemory(t *testing.T) {
	const n, size = 120, 900 << 10 // 108 MB in all, each just under the topic's 1 MiB
	e := newEnv(t, 3, 3, 1)
	rids := e.sold(t, 1)
	w, err := event.NewWriter(e.brokers, e.topics.Feedback.Name, event.WithSecurity(stacktest.KafkaSecurity(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	burst := make([]kafka.Message, n)
	for i := range burst {
		burst[i] = kafka.Message{Key: []byte(rids[0]), Value: bytes.Repeat([]byte{'x'}, size)}
	}
	if err := w.WriteMessages(e.ctx, burst...); err != nil {
		t.Fatal(err)
	}
	burst = nil
	paid, err := event.EncodeFeedback(seckill.Feedback{RequestID: rids[0], Kind: seckill.FeedbackPaid, At: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteMessages(e.ctx, paid); err != nil {
		t.Fatal(err)
	}

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak atomic.Uint64
	sampled := make(chan struct{})
	stopSampling := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > peak.Load() {
				peak.Store(ms.HeapAlloc)
			}
			select {
			case <-stopSampling:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()

	addr := stacktest.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, stacktest.Getenv(e.consumerVars(t, addr)), &logs) }()
	deadline := time.Now().Add(60 * time.Second)
	for e.count(t, "paid_at IS NOT NULL") != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the order.paid after the burst was not applied within 60 s; log:\n%s", tail(logs.String(), 20))
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(stopSampling)
	<-sampled
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("consumer: %v", err)
	}
	grew := int64(peak.Load()) - int64(base)
	t.Logf("burst of %d MB: heap grew by at most %d MiB while the consumer worked through it", n*size>>20, grew>>20)
	if grew > 64<<20 {
		t.Fatalf("heap grew by %d MiB for a %d MB burst: the read-ahead is not bounded in bytes", grew>>20, n*size>>20)
	}
	var cases int64
	if err := e.db.Table("exception_cases").Where("kind = ?", seckill.CaseDeadLetter).Count(&cases).Error; err != nil || cases != n {
		t.Fatalf("%d dead-letter cases (%v), want one per message of the burst (%d)", cases, err, n)
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}
