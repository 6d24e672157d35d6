package event

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

func TestGrabRoundTrip(t *testing.T) {
	g := seckill.Grab{RequestID: seckill.RequestID(12, 3, "0193a6b2-key"), UserID: "alice",
		SessionID: 12, PrizeID: 3, AdmittedAt: time.Date(2026, 11, 29, 10, 0, 0, 123456789, time.UTC)}
	m, err := EncodeGrab(g)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Key) != "12:3" {
		t.Fatalf("key %q", m.Key)
	}
	got, err := DecodeGrab(m.Value)
	if err != nil || got != g {
		t.Fatalf("decoded %+v, %v; want %+v", got, err, g)
	}
}

func TestDecodeGrabPoison(t *testing.T) {
	tests := []struct {
		name, value string
		want        error
	}{
		{"not json", `{{{`, ErrMalformed},
		{"no version", `{"request_id":"1-2-abcdefgh"}`, ErrMalformed},
		{"future version", `{"v":2,"request_id":"1-2-abcdefgh"}`, ErrUnknownVersion},
		{"bad request id", `{"v":1,"request_id":"x","user_id":"u","session_id":1,"prize_id":2,"admitted_at":"2026-11-29T10:00:00Z"}`, ErrMalformed},
		{"mismatched ids", `{"v":1,"request_id":"1-3-abcdefgh","user_id":"u","session_id":1,"prize_id":2,"admitted_at":"2026-11-29T10:00:00Z"}`, ErrMalformed},
		{"no user", `{"v":1,"request_id":"1-2-abcdefgh","user_id":"","session_id":1,"prize_id":2,"admitted_at":"2026-11-29T10:00:00Z"}`, ErrMalformed},
		{"no time", `{"v":1,"request_id":"1-2-abcdefgh","user_id":"u","session_id":1,"prize_id":2}`, ErrMalformed},
		{"wrong type", `{"v":1,"request_id":"1-2-abcdefgh","user_id":"u","session_id":"one","prize_id":2,"admitted_at":"2026-11-29T10:00:00Z"}`, ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := DecodeGrab([]byte(tc.value)); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

// A grab admitted in bucket b ≥ 1 is keyed "session:prize:b" and carries its bucket; one in
// bucket 0 (every grab of a prize without buckets) is keyed and encoded as before buckets.
func TestGrabBucketRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 29, 10, 0, 0, 123456789, time.UTC)
	for _, tc := range []struct {
		bucket int
		key    string
		body   string
	}{
		{0, "12:3", `{"v":1,"request_id":"12-3-0193a6b2-key","user_id":"alice","session_id":12,"prize_id":3,"admitted_at":"2026-11-29T10:00:00.123456789Z"}`},
		{5, "12:3:5", `{"v":1,"request_id":"12-3-0193a6b2-key","user_id":"alice","session_id":12,"prize_id":3,"bucket":5,"admitted_at":"2026-11-29T10:00:00.123456789Z"}`},
	} {
		g := seckill.Grab{RequestID: seckill.RequestID(12, 3, "0193a6b2-key"), UserID: "alice",
			SessionID: 12, PrizeID: 3, Bucket: tc.bucket, AdmittedAt: at}
		m, err := EncodeGrab(g)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Key) != tc.key || string(m.Value) != tc.body {
			t.Fatalf("bucket %d: key %q body %s; want %q %s", tc.bucket, m.Key, m.Value, tc.key, tc.body)
		}
		got, err := DecodeGrab(m.Value)
		if err != nil || got != g {
			t.Fatalf("bucket %d: decoded %+v, %v; want %+v", tc.bucket, got, err, g)
		}
	}
	for _, bad := range []string{`-1`, `1024`, `"2"`, `1.5`} {
		v := `{"v":1,"request_id":"1-2-abcdefgh","user_id":"u","session_id":1,"prize_id":2,"bucket":` + bad + `,"admitted_at":"2026-11-29T10:00:00Z"}`
		if _, err := DecodeGrab([]byte(v)); !errors.Is(err, ErrMalformed) {
			t.Errorf("bucket %s: err %v, want malformed", bad, err)
		}
	}
}

// ParseGrabKey reads back exactly what BucketPartitionKey writes, and nothing else: a key
// of another shape is not a grab's, so the balancer leaves it to murmur2 and the gateway's
// unpublished counts skip it.
func TestParseGrabKeyIsBucketPartitionKeysInverse(t *testing.T) {
	for _, c := range []struct {
		s, p int64
		b    int
	}{{1, 2, 0}, {1, 2, 1}, {123, 456, 7}, {-3, -4, 5}, {math.MaxInt64, math.MinInt64, 0}, {9, 9, 1 << 30}} {
		key := BucketPartitionKey(c.s, c.p, c.b)
		s, p, b, ok := ParseGrabKey(key)
		if !ok || s != c.s || p != c.p || b != c.b {
			t.Errorf("ParseGrabKey(%q) = %d, %d, %d, %v; want %d, %d, %d", key, s, p, b, ok, c.s, c.p, c.b)
		}
	}
	for _, k := range []string{"", "1", "1:", ":2", "1:2:", "1:2:0", "1:2:01", "1:2:+1", "1:2:-1", "01:2", "1:02",
		"-0:2", "+1:2", "1:2:3:4", "a:2", "1:b", "1::3", "1:2:1073741825", "1:2:99999999999999999999",
		"9223372036854775808:1", "-9223372036854775809:1", "order-1:2:3", "1 :2"} {
		if s, p, b, ok := ParseGrabKey([]byte(k)); ok {
			t.Errorf("ParseGrabKey(%q) = %d, %d, %d, ok; want not a grab's key", k, s, p, b)
		}
	}
	key := BucketPartitionKey(123, 456, 7)
	if n := testing.AllocsPerRun(100, func() { ParseGrabKey(key) }); n != 0 {
		t.Errorf("ParseGrabKey allocates %v times, want 0 (the balancer calls it per message)", n)
	}
}
