// Package exception turns what the pipeline's detectors see into exception cases for the
// workbench (MySQL's exception_cases, through pkg/store), and replays the cases that carry
// events once a person fixed their cause.
package exception

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/retry"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// Message is a Kafka message as a case's evidence keeps it: enough to judge it and to
// produce it again, or, for one too large to keep whole, to find the original (where it was
// read, its size and hash) and judge it from its first bytes.
type Message struct {
	Topic       string            `json:"topic"`
	Partition   int               `json:"partition"`
	Offset      int64             `json:"offset"`
	Key         string            `json:"key"`
	Value       string            `json:"value,omitempty"`        // when it is UTF-8 text
	ValueBase64 string            `json:"value_base64,omitempty"` // otherwise
	Size        int               `json:"size"`                   // of the original value, in bytes
	SHA256      string            `json:"sha256,omitempty"`       // of the original value, hex
	Truncated   bool              `json:"truncated,omitempty"`    // Key or Value holds only its first bytes
	Headers     map[string]string `json:"headers,omitempty"`
	Cause       string            `json:"cause"`
}

// What a case keeps of a message: a poison message can be as large as its topic allows and
// come a thousand at a time, and every case is a row in MySQL (see store.Record).
const (
	maxValue   = 16 << 10
	maxField   = 1 << 10 // a key, a header value, the cause
	maxHeaders = 32
)

// Bytes returns the message's value.
func (m Message) Bytes() ([]byte, error) {
	if m.ValueBase64 != "" {
		return base64.StdEncoding.DecodeString(m.ValueBase64)
	}
	return []byte(m.Value), nil
}

func messageOf(p event.Poison) Message {
	sum := sha256.Sum256(p.Msg.Value)
	m := Message{Topic: p.Msg.Topic, Partition: p.Msg.Partition, Offset: p.Msg.Offset, Key: event.Clip(string(p.Msg.Key), maxField),
		Size: len(p.Msg.Value), SHA256: hex.EncodeToString(sum[:]), Truncated: len(p.Msg.Key) > maxField, Cause: "unknown"}
	value := p.Msg.Value
	if len(value) > maxValue {
		cut := maxValue
		if utf8.Valid(value) { // text stays text: cut at a character's start
			for cut > 0 && !utf8.RuneStart(value[cut]) {
				cut--
			}
		}
		value, m.Truncated = value[:cut], true
	}
	if utf8.Valid(value) {
		m.Value = string(value)
	} else {
		m.ValueBase64 = base64.StdEncoding.EncodeToString(value)
	}
	if p.Cause != nil {
		m.Cause = event.Clip(p.Cause.Error(), maxField)
	}
	if len(p.Msg.Headers) > 0 {
		m.Headers = make(map[string]string, min(len(p.Msg.Headers), maxHeaders))
		for _, h := range p.Msg.Headers[:min(len(p.Msg.Headers), maxHeaders)] {
			m.Headers[event.Clip(h.Key, maxField)] = event.Clip(string(h.Value), maxField)
		}
	}
	return m
}

// DeadLetterReport is the case of one dead-lettered message. A message that decodes as a
// grab is keyed by its topic and request id, so the same grab dead-lettered again (a
// stale-reservation re-publish, a replay whose cause was not fixed) is the same case; any
// other message by where it was read.
func DeadLetterReport(p event.Poison) store.CaseReport {
	ev := messageOf(p)
	r := store.CaseReport{Kind: seckill.CaseDeadLetter, Evidence: map[string]any{"message": ev},
		Key:    ev.Topic + "/" + strconv.Itoa(ev.Partition) + "@" + strconv.FormatInt(ev.Offset, 10),
		Detail: fmt.Sprintf("dead-lettered from %s partition %d offset %d: %s", ev.Topic, ev.Partition, ev.Offset, ev.Cause)}
	if g, err := event.DecodeGrab(p.Msg.Value); err == nil {
		r.Key = ev.Topic + ":" + g.RequestID
		r.SessionID, r.PrizeID, r.RequestID, r.UserID = g.SessionID, g.PrizeID, g.RequestID, g.UserID
	} else if f, err := event.DecodeFeedback(p.Msg.Value); err == nil {
		r.RequestID = f.RequestID
		if sid, pid, _, err := seckill.ParseRequestID(f.RequestID); err == nil {
			r.SessionID, r.PrizeID = sid, pid
		}
	}
	return r
}

// StaleReport is the case of a reservation still without an order after age. The evidence
// names the reservation's stock bucket when it is 1 or above (absent: bucket 0, as for a
// prize without buckets), so the replay looks for it on that bucket's keys.
func StaleReport(sessionID, prizeID int64, r stock.Reservation, age time.Duration) store.CaseReport {
	evidence := map[string]any{"admitted_at": r.AdmittedAt.UTC(), "age_seconds": int64(age.Seconds()),
		"session_id": sessionID, "prize_id": prizeID, "request_id": r.RequestID, "user_id": r.UserID}
	if r.Bucket > 0 {
		evidence["bucket"] = r.Bucket
	}
	return store.CaseReport{Kind: seckill.CaseStaleReservation, Key: r.RequestID, SessionID: sessionID, PrizeID: prizeID,
		RequestID: r.RequestID, UserID: r.UserID,
		Detail:   fmt.Sprintf("admitted %s ago and re-published, still no order", age.Round(time.Second)),
		Evidence: evidence}
}

// recorder is what the detectors need from the workbench's store.
type recorder interface {
	Record(ctx context.Context, at time.Time, reports ...store.CaseReport) error
}

// deadLetterWriter writes dead-letter envelopes: an *event.DeadLetters.
type deadLetterWriter interface {
	Write(ctx context.Context, poison ...event.Poison) error
}

// DeadLetters writes dead letters and records a case for each, so every poison message is
// both on the dead-letter topic (for tools) and on the workbench (for a person).
type DeadLetters struct {
	w     deadLetterWriter
	cases recorder
	now   func() time.Time
	log   *slog.Logger
}

// NewDeadLetters returns DeadLetters writing with w and recording cases with cases.
func NewDeadLetters(w deadLetterWriter, cases recorder, now func() time.Time, log *slog.Logger) *DeadLetters {
	return &DeadLetters{w: w, cases: cases, now: now, log: log}
}

// Write sends the envelopes, then records the cases, retrying MySQL until it answers or ctx
// ends. It returns an error (and the caller must not commit the offsets) unless both
// happened: the messages then come back, are dead-lettered again (a duplicate on the topic)
// and recorded under the same keys (one case).
func (d *DeadLetters) Write(ctx context.Context, poison ...event.Poison) error {
	if len(poison) == 0 {
		return nil
	}
	if err := d.w.Write(ctx, poison...); err != nil {
		return err
	}
	reports := make([]store.CaseReport, len(poison))
	for i, p := range poison {
		reports[i] = DeadLetterReport(p)
	}
	err := retry.Until(ctx, func(rctx context.Context) error { return d.cases.Record(rctx, d.now(), reports...) }, func(err error) {
		d.log.Warn("dead letters written; recording their exception cases failed, retrying", "count", len(reports), "error", err.Error())
	})
	if err != nil {
		return fmt.Errorf("dead letters written, their cases not recorded: %w", err)
	}
	return nil
}
