package event

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// checkEncoding fails t unless the hand-written encoding is json.Marshal's, byte for byte.
func checkEncoding(t *testing.T, g seckill.Grab) {
	t.Helper()
	want, wantErr := json.Marshal(grabEvent{V: GrabV1, RequestID: g.RequestID, UserID: g.UserID,
		SessionID: g.SessionID, PrizeID: g.PrizeID, Bucket: g.Bucket, AdmittedAt: g.AdmittedAt.UTC()})
	got, err := appendGrabEvent(nil, g)
	if (err == nil) != (wantErr == nil) || !bytes.Equal(got, want) {
		t.Fatalf("grab %+v: encoded %s (%v), json.Marshal %s (%v)", g, got, err, want, wantErr)
	}
	key := strconv.FormatInt(g.SessionID, 10) + ":" + strconv.FormatInt(g.PrizeID, 10)
	if k := PartitionKey(g.SessionID, g.PrizeID); string(k) != key {
		t.Fatalf("partition key %q, want %q", k, key)
	}
	if g.Bucket != 0 {
		key += ":" + strconv.Itoa(g.Bucket)
	}
	if k := GrabKey(g); string(k) != key {
		t.Fatalf("grab key %q, want %q", k, key)
	}
}

func TestGrabEncodingIsJSONMarshals(t *testing.T) {
	at := time.Date(2026, 11, 29, 12, 0, 0, 123456789, time.FixedZone("x", 3600))
	for _, g := range []seckill.Grab{
		{RequestID: "12:34:bench-key-000001", UserID: "alice", SessionID: 12, PrizeID: 34, AdmittedAt: at},
		{RequestID: `a"b\c<d>e&f`, UserID: "é\x00\xff\u2028", SessionID: -1, PrizeID: 9223372036854775807, AdmittedAt: at.Truncate(time.Second)},
		{RequestID: "", UserID: "", AdmittedAt: time.Time{}},
		{RequestID: "a<b", UserID: "c>d", AdmittedAt: at}, {RequestID: "a&b", UserID: `\`, AdmittedAt: at},
		{RequestID: "a\x7fb", UserID: "tab\tx", AdmittedAt: at}, {RequestID: `q"`, UserID: "~", AdmittedAt: at},
		{RequestID: "r", UserID: "u", AdmittedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		{RequestID: "r", UserID: "u", AdmittedAt: time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)},
		{RequestID: "r", UserID: "u", AdmittedAt: time.UnixMilli(1_800_000_000_120)},
		{RequestID: "12:34:k", UserID: "alice", SessionID: 12, PrizeID: 34, Bucket: 1, AdmittedAt: at},
		{RequestID: "12:34:k", UserID: "alice", SessionID: 12, PrizeID: 34, Bucket: 1023, AdmittedAt: at},
		{RequestID: "r", UserID: "u", Bucket: -7, AdmittedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		checkEncoding(t, g)
	}
}

func FuzzGrabEncoding(f *testing.F) {
	f.Add("12:34:k", "alice", int64(12), int64(34), int64(1_800_000_000), int64(5), 0)
	f.Add(`<"\>`, "\xff", int64(-1), int64(0), int64(-62135596800), int64(0), 3)
	f.Fuzz(func(t *testing.T, rid, user string, session, prize, sec, nsec int64, bucket int) {
		checkEncoding(t, seckill.Grab{RequestID: rid, UserID: user, SessionID: session, PrizeID: prize,
			Bucket: bucket, AdmittedAt: time.Unix(sec, nsec)})
	})
}
