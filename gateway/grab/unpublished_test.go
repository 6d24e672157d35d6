package grab

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

type flakyWriter struct{ fail atomic.Bool }

func (w *flakyWriter) WriteMessages(ctx context.Context, _ ...kafka.Message) error {
	if w.fail.Load() {
		return errors.New("kafka unavailable")
	}
	return nil
}

// A grab whose event waits in the relay is reported in MySQL as held by this gateway until
// the relay published it; a stopped gateway leaves the table.
func TestUnpublishedGrabsAreReportedUntilPublished(t *testing.T) {
	_, db := stacktest.Migrated(t)
	ctx := stacktest.Context(t, 30*time.Second)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	held := newUnpublished()
	w := &flakyWriter{}
	w.fail.Store(true)
	r := newRelay(w, 10, held, testMetrics(), log)
	key := event.PartitionKey(7, 9)
	held.hold(key) // as the grab handler does before Reserve; the produce failed:
	if !r.Enqueue(kafka.Message{Key: key}) {
		t.Fatal("enqueue")
	}
	un := store.NewUnpublished(db)
	rctx, stopReport := context.WithCancel(ctx)
	reported := make(chan struct{})
	go func() { defer close(reported); reportUnpublished(rctx, un, "gw-test", held, 50*time.Millisecond, log) }()
	pending := func() int {
		var n int
		db.Raw("SELECT COALESCE(SUM(pending), 0) FROM gateway_unpublished WHERE gateway = 'gw-test' AND session_id = 7 AND prize_id = 9").Row().Scan(&n)
		return n
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("the held grab to be reported", func() bool { return pending() == 1 })

	relayCtx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan struct{})
	go func() { defer close(relayDone); _ = r.Run(relayCtx, time.Second) }()
	time.Sleep(100 * time.Millisecond) // still failing: still held
	if pending() != 1 {
		t.Fatal("a grab the relay could not publish is no longer reported")
	}
	w.fail.Store(false)
	waitFor("the published grab to leave the report", func() bool { return pending() == 0 })
	stopRelay()
	<-relayDone
	stopReport()
	<-reported
	var beats int64
	db.Raw("SELECT COUNT(*) FROM gateway_heartbeats WHERE gateway = 'gw-test'").Row().Scan(&beats)
	if beats != 0 {
		t.Fatal("a stopped gateway still has a heartbeat row")
	}
}
