package event

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
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

// An order a draw gave says so (source "draw"); a grab's order event has no source at all,
// so its bytes stay what they were.
func TestOrderEventSaysItCameFromADraw(t *testing.T) {
	at := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	o := seckill.Order{ID: 1, RequestID: seckill.DrawRequestID(7, 12, "u1"), UserID: "u1", SessionID: 7, PrizeID: 12,
		Status: seckill.OrderSucceeded, AdmittedAt: at, CreatedAt: at}
	if e := NewOrderEvent(o); e.Source != SourceDraw {
		t.Errorf("a draw's order event: source %q, want %q", e.Source, SourceDraw)
	}
	if e := NewFollowEvent(o, OrderCancelled, "buyer_cancelled", at); e.Source != SourceDraw {
		t.Errorf("a draw's cancellation event: source %q, want %q", e.Source, SourceDraw)
	}
	o.RequestID = seckill.UserRequestID(7, 12, "u1", "key-0001")
	b, err := json.Marshal(NewOrderEvent(o))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "source") {
		t.Errorf("a grab's order event names a source: %s", b)
	}
}
