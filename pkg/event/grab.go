package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// GrabV1 is the grab event schema version this code writes and reads.
const GrabV1 = 1

// grabEvent is the grab topic's JSON payload (schema v1). Field names are part of the
// contract with every consumer: change them only with a new version.
type grabEvent struct {
	V         int    `json:"v"`
	RequestID string `json:"request_id"`
	UserID    string `json:"user_id"`
	SessionID int64  `json:"session_id"`
	PrizeID   int64  `json:"prize_id"`
	// Bucket is the stock bucket that admitted the grab (docs/design.md), written only
	// for buckets 1 and up: absent is bucket 0, which is also a prize without buckets, so
	// every event of a prize without buckets stays byte for byte what it was. Additive: v1.
	Bucket     int       `json:"bucket,omitempty"`
	AdmittedAt time.Time `json:"admitted_at"`
}

// Decoding errors. A message that fails with either is a poison message: retrying cannot
// help, so it goes to the dead-letter topic.
var (
	ErrMalformed      = errors.New("malformed event")
	ErrUnknownVersion = errors.New("unknown event schema version")
)

// PartitionKey is the Kafka key of a session×prize: every event of one prize lands on one
// partition, so one consumer worker owns the prize's hot stock row.
func PartitionKey(sessionID, prizeID int64) []byte {
	b := make([]byte, 0, 41) // two int64s and the colon
	b = strconv.AppendInt(b, sessionID, 10)
	b = append(b, ':')
	return strconv.AppendInt(b, prizeID, 10)
}

// BucketPartitionKey is the Kafka key of stock bucket b of a session×prize: PartitionKey's
// for bucket 0, "session:prize:b" for b ≥ 1, so the buckets of one hot prize spread over
// partitions and consumer workers (docs/design.md).
func BucketPartitionKey(sessionID, prizeID int64, bucket int) []byte {
	if bucket == 0 {
		return PartitionKey(sessionID, prizeID)
	}
	b := make([]byte, 0, 52)
	b = strconv.AppendInt(b, sessionID, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, prizeID, 10)
	b = append(b, ':')
	return strconv.AppendInt(b, int64(bucket), 10)
}

// ParseGrabKey reads a key BucketPartitionKey writes: "session:prize", or "session:prize:b"
// for stock bucket b ≥ 1. Only the canonical decimal form it writes counts (no leading
// zeros, no plus sign, no "-0", no bucket 0 spelled out, nothing out of range), so no other
// key is ever read as a grab's, and a key parsed and written again is the same bytes. It
// allocates nothing: the grab balancer calls it for every message produced.
func ParseGrabKey(key []byte) (sessionID, prizeID int64, bucket int, ok bool) {
	s, rest, found := bytes.Cut(key, []byte{':'})
	if !found {
		return 0, 0, 0, false
	}
	p, b, bucketed := bytes.Cut(rest, []byte{':'})
	if sessionID, ok = canonicalInt(s); !ok {
		return 0, 0, 0, false
	}
	if prizeID, ok = canonicalInt(p); !ok {
		return 0, 0, 0, false
	}
	if !bucketed {
		return sessionID, prizeID, 0, true
	}
	if len(b) == 0 || b[0] == '-' {
		return 0, 0, 0, false
	}
	n, ok := canonicalInt(b)
	if !ok || n < 1 || n > maxBucketKey {
		return 0, 0, 0, false
	}
	return sessionID, prizeID, int(n), true
}

// maxBucketKey bounds the bucket a key may name, far above any prize's bucket count.
const maxBucketKey = 1 << 30

// canonicalInt parses s if it is an int64 exactly as strconv.AppendInt writes it.
func canonicalInt(s []byte) (int64, bool) {
	neg := len(s) > 0 && s[0] == '-'
	digits := s
	if neg {
		digits = s[1:]
	}
	if len(digits) == 0 || len(digits) > 19 || (digits[0] == '0' && (len(digits) > 1 || neg)) {
		return 0, false
	}
	var n uint64
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0') // 19 digits cannot overflow a uint64
	}
	switch {
	case !neg && n <= math.MaxInt64:
		return int64(n), true
	case neg && n <= math.MaxInt64+1:
		return int64(-n), true
	}
	return 0, false
}

// GrabKey is the Kafka key of a grab's event: its bucket's (BucketPartitionKey).
func GrabKey(g seckill.Grab) []byte { return BucketPartitionKey(g.SessionID, g.PrizeID, g.Bucket) }

// EncodeGrab returns the grab event message for an admitted grab.
func EncodeGrab(g seckill.Grab) (kafka.Message, error) {
	// Room for the whole event at once: the field names and punctuation (about 80 bytes), two
	// int64s, an RFC 3339 time with nanoseconds and the two ids. A fixed 160 bytes was too
	// little for a gateway's request ids (a UUID key), and the buffer was copied once more.
	b, err := appendGrabEvent(make([]byte, 0, 160+len(g.RequestID)+len(g.UserID)), g)
	if err != nil {
		return kafka.Message{}, fmt.Errorf("encode grab %s: %w", g.RequestID, err)
	}
	return kafka.Message{
		Key:     GrabKey(g),
		Value:   b,
		Headers: []kafka.Header{{Key: "schema", Value: []byte("grab.v1")}},
	}, nil
}

// appendGrabEvent appends the event's JSON, byte for byte what json.Marshal writes for
// grabEvent (a test holds it to that), without reflection: it is on every grab's path.
func appendGrabEvent(b []byte, g seckill.Grab) ([]byte, error) {
	at := g.AdmittedAt.UTC()
	if y := at.Year(); y < 0 || y > 9999 {
		// Out of RFC 3339's range: json.Marshal's own error says so.
		return json.Marshal(grabEvent{V: GrabV1, RequestID: g.RequestID, UserID: g.UserID,
			SessionID: g.SessionID, PrizeID: g.PrizeID, Bucket: g.Bucket, AdmittedAt: at})
	}
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, GrabV1, 10)
	b = append(b, `,"request_id":`...)
	b = appendJSONString(b, g.RequestID)
	b = append(b, `,"user_id":`...)
	b = appendJSONString(b, g.UserID)
	b = append(b, `,"session_id":`...)
	b = strconv.AppendInt(b, g.SessionID, 10)
	b = append(b, `,"prize_id":`...)
	b = strconv.AppendInt(b, g.PrizeID, 10)
	if g.Bucket != 0 {
		b = append(b, `,"bucket":`...)
		b = strconv.AppendInt(b, int64(g.Bucket), 10)
	}
	b = append(b, `,"admitted_at":"`...)
	b = at.AppendFormat(b, time.RFC3339Nano)
	return append(b, `"}`...), nil
}

// appendJSONString appends s quoted as encoding/json quotes it (HTML-safe, invalid UTF-8
// replaced). Request and user ids are printable ASCII, so the plain loop is the common case;
// anything else is handed to json.Marshal.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// DecodeGrab parses a grab event and checks it is complete and consistent.
func DecodeGrab(value []byte) (seckill.Grab, error) {
	// One pass: V is a pointer so "no version" and "version 0" differ; the version is
	// checked before any other field is trusted.
	var e struct {
		V *int `json:"v"`
		grabEvent
	}
	if err := json.Unmarshal(value, &e); err != nil {
		return seckill.Grab{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if e.V == nil {
		return seckill.Grab{}, fmt.Errorf("%w: no schema version", ErrMalformed)
	}
	if *e.V != GrabV1 {
		return seckill.Grab{}, fmt.Errorf("%w: %d", ErrUnknownVersion, *e.V)
	}
	sid, pid, _, err := seckill.ParseRequestID(e.RequestID)
	switch {
	case err != nil:
		return seckill.Grab{}, fmt.Errorf("%w: request id %q", ErrMalformed, e.RequestID)
	case sid != e.SessionID || pid != e.PrizeID:
		return seckill.Grab{}, fmt.Errorf("%w: request id %q does not match session %d prize %d", ErrMalformed, e.RequestID, e.SessionID, e.PrizeID)
	case !seckill.ValidUserID(e.UserID):
		return seckill.Grab{}, fmt.Errorf("%w: user id %q", ErrMalformed, e.UserID)
	case e.AdmittedAt.IsZero():
		return seckill.Grab{}, fmt.Errorf("%w: no admission time", ErrMalformed)
	case e.Bucket < 0 || e.Bucket >= seckill.MaxBuckets:
		return seckill.Grab{}, fmt.Errorf("%w: bucket %d", ErrMalformed, e.Bucket)
	}
	return seckill.Grab{RequestID: e.RequestID, UserID: e.UserID, SessionID: e.SessionID,
		PrizeID: e.PrizeID, Bucket: e.Bucket, AdmittedAt: e.AdmittedAt.UTC()}, nil
}
