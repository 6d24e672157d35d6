package event

import (
	"encoding/json"
	"errors"
	"fmt"
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
	V          int       `json:"v"`
	RequestID  string    `json:"request_id"`
	UserID     string    `json:"user_id"`
	SessionID  int64     `json:"session_id"`
	PrizeID    int64     `json:"prize_id"`
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
	return []byte(strconv.FormatInt(sessionID, 10) + ":" + strconv.FormatInt(prizeID, 10))
}

// EncodeGrab returns the grab event message for an admitted grab.
func EncodeGrab(g seckill.Grab) (kafka.Message, error) {
	b, err := json.Marshal(grabEvent{V: GrabV1, RequestID: g.RequestID, UserID: g.UserID,
		SessionID: g.SessionID, PrizeID: g.PrizeID, AdmittedAt: g.AdmittedAt.UTC()})
	if err != nil {
		return kafka.Message{}, fmt.Errorf("encode grab %s: %w", g.RequestID, err)
	}
	return kafka.Message{
		Key:     PartitionKey(g.SessionID, g.PrizeID),
		Value:   b,
		Headers: []kafka.Header{{Key: "schema", Value: []byte("grab.v1")}},
	}, nil
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
	}
	return seckill.Grab{RequestID: e.RequestID, UserID: e.UserID, SessionID: e.SessionID,
		PrizeID: e.PrizeID, AdmittedAt: e.AdmittedAt.UTC()}, nil
}
