package grab

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// stuckWriter is a Kafka writer during an outage: every write blocks until the test ends,
// and, if ignoreCtx, even past its context (a connection stuck in a dead broker's TCP stack).
type stuckWriter struct {
	ignoreCtx bool
	release   chan struct{}
	mu        sync.Mutex
	calls     int
}

func (w *stuckWriter) WriteMessages(ctx context.Context, _ ...kafka.Message) error {
	w.mu.Lock()
	w.calls++
	w.mu.Unlock()
	if w.ignoreCtx {
		<-w.release
		return context.Canceled
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-w.release:
		return context.Canceled
	}
}

// During a Kafka outage the relay's drain at shutdown is bounded: Run returns within the
// drain budget whatever the writer does, and logs how many events it left (they stay
// reserved in Redis; the reconciler re-publishes them).
func TestRelayShutdownDrainIsBounded(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ignoreCtx bool
	}{
		{"writer honours its context", false},
		{"writer ignores its context", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &stuckWriter{ignoreCtx: tc.ignoreCtx, release: make(chan struct{})}
			t.Cleanup(func() { close(w.release) })
			var logs bytes.Buffer
			var logMu sync.Mutex
			log := slog.New(slog.NewJSONHandler(&lockedWriter{w: &logs, mu: &logMu}, nil))
			r := newRelay(w, 10, nil, testMetrics(), log)
			for _, k := range []string{"a", "b", "c"} {
				if !r.Enqueue(kafka.Message{Key: []byte(k)}) {
					t.Fatal("enqueue refused")
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = r.Run(ctx, 200*time.Millisecond) }()
			// Let the relay start its first (stuck) write, then shut down.
			for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				w.mu.Lock()
				started := w.calls > 0
				w.mu.Unlock()
				if started || time.Now().After(deadline) {
					break
				}
			}
			start := time.Now()
			cancel()
			select {
			case <-done:
			case <-time.After(3 * time.Second):
				t.Fatal("relay Run did not return within 3s of shutdown with a drain budget of 200ms")
			}
			if d := time.Since(start); d > time.Second {
				t.Fatalf("relay took %s to stop with a drain budget of 200ms", d)
			}
			logMu.Lock()
			defer logMu.Unlock()
			var left float64 = -1
			for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				var rec map[string]any
				if json.Unmarshal([]byte(line), &rec) == nil {
					if n, ok := rec["relay_unpublished"].(float64); ok {
						left = n
					}
				}
			}
			if left != 3 {
				t.Fatalf("relay_unpublished logged as %v, want 3; log:\n%s", left, logs.String())
			}
		})
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
