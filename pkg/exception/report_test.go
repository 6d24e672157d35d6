package exception

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

func TestDeadLetterReportKeys(t *testing.T) {
	g := seckill.Grab{RequestID: seckill.RequestID(7, 3, "alice-key-0001"), UserID: "alice", SessionID: 7, PrizeID: 3, AdmittedAt: time.Now()}
	m, err := event.EncodeGrab(g)
	if err != nil {
		t.Fatal(err)
	}
	m.Topic, m.Partition, m.Offset = "grabs", 2, 40
	r := DeadLetterReport(event.Poison{Msg: m, Cause: errors.New("no stock row")})
	if r.Kind != seckill.CaseDeadLetter || r.Key != "grabs:"+g.RequestID || r.SessionID != 7 || r.PrizeID != 3 || r.UserID != "alice" {
		t.Fatalf("grab report %+v", r)
	}
	ev := r.Evidence.(map[string]any)["message"].(Message)
	if ev.Value == "" || ev.ValueBase64 != "" || ev.Cause != "no stock row" || ev.Headers["schema"] != "grab.v1" {
		t.Fatalf("grab evidence %+v", ev)
	}

	// Bytes that are not text survive the round trip through JSON evidence.
	bin := kafka.Message{Topic: "grabs", Partition: 1, Offset: 9, Value: []byte{0xff, 0x00, 0x7b}}
	r = DeadLetterReport(event.Poison{Msg: bin})
	ev = r.Evidence.(map[string]any)["message"].(Message)
	if r.Key != "grabs/1@9" || r.RequestID != "" || ev.ValueBase64 == "" || ev.Cause != "unknown" {
		t.Fatalf("binary report %+v %+v", r, ev)
	}
	if b, err := ev.Bytes(); err != nil || string(b) != string(bin.Value) {
		t.Fatalf("bytes %v %v", b, err)
	}
}

type fakeWriter struct{ err error }

func (f fakeWriter) Write(context.Context, ...event.Poison) error { return f.err }

type flakyRecorder struct {
	fails int
	got   []store.CaseReport
}

func (f *flakyRecorder) Record(_ context.Context, _ time.Time, r ...store.CaseReport) error {
	if f.fails > 0 {
		f.fails--
		return errors.New("mysql gone")
	}
	f.got = append(f.got, r...)
	return nil
}

func TestDeadLettersRecordAfterTheTopicAcknowledged(t *testing.T) {
	p := event.Poison{Msg: kafka.Message{Topic: "grabs", Value: []byte("x")}, Cause: errors.New("bad")}
	log := slog.New(slog.DiscardHandler)

	rec := &flakyRecorder{}
	if err := NewDeadLetters(fakeWriter{errors.New("broker down")}, rec, time.Now, log).Write(context.Background(), p); err == nil || len(rec.got) != 0 {
		t.Fatalf("unacknowledged dead letter: err %v, recorded %d", err, len(rec.got))
	}
	rec = &flakyRecorder{fails: 2}
	if err := NewDeadLetters(fakeWriter{}, rec, time.Now, log).Write(context.Background(), p); err != nil || len(rec.got) != 1 {
		t.Fatalf("recording retried: err %v, recorded %d", err, len(rec.got))
	}
	// MySQL never answers: the write ends with its context, as an error (offsets stay uncommitted).
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	rec = &flakyRecorder{fails: 1 << 30}
	if err := NewDeadLetters(fakeWriter{}, rec, time.Now, log).Write(ctx, p); err == nil {
		t.Fatal("unrecorded cases reported as done")
	}
}

// A case keeps a bounded part of a poison message, says so, and names the original by size
// and hash; a message whose key or value was cut is not replayable as it was.
func TestDeadLetterEvidenceIsBounded(t *testing.T) {
	text := strings.Repeat("é", 20<<10) // 40 KiB of two-byte characters
	binary := bytes.Repeat([]byte{0xff}, 20<<10)
	for _, tc := range []struct {
		name      string
		key       []byte
		value     []byte
		truncated bool
	}{
		{"small", []byte("1:2"), []byte("not json"), false},
		{"long text", []byte("1:2"), []byte(text), true},
		{"long binary", []byte("1:2"), binary, true},
		{"long key", bytes.Repeat([]byte("k"), 5000), []byte("x"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := DeadLetterReport(event.Poison{Msg: kafka.Message{Topic: "g", Key: tc.key, Value: tc.value},
				Cause: errors.New(strings.Repeat("c", 5000))})
			ev := r.Evidence.(map[string]any)["message"].(Message)
			kept, err := ev.Bytes()
			sum := sha256.Sum256(tc.value)
			if err != nil || ev.Truncated != tc.truncated || ev.Size != len(tc.value) || ev.SHA256 != hex.EncodeToString(sum[:]) ||
				len(kept) > maxValue || !bytes.HasPrefix(tc.value, kept) || len(ev.Cause) > maxField || len(ev.Key) > maxField {
				t.Fatalf("evidence: truncated %v, size %d, kept %d bytes, cause %d, key %d, err %v", ev.Truncated, ev.Size, len(kept), len(ev.Cause), len(ev.Key), err)
			}
			if tc.name == "long text" && (ev.Value == "" || !utf8.ValidString(ev.Value)) {
				t.Fatalf("text cut mid-character or kept as base64")
			}
		})
	}
}
