package grab

import (
	"errors"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// FuzzParseGrab feeds arbitrary path ids, Idempotency-Key headers and bodies to the grab
// request parser. It must never panic, and whatever it accepts must be well-formed: positive
// ids, a key that round-trips through the request id (raw, as ids made before keys were
// derived per user) and whose derived request id parses, a body that was an empty JSON object.
// `go test` runs the seed corpus; `go test -fuzz FuzzParseGrab ./gateway/grab` explores.
func FuzzParseGrab(f *testing.F) {
	seeds := []struct{ session, prize, key, body string }{
		{"1", "2", "", ""},
		{"1", "2", "0193a6b2-7c1e-7000-8000-000000000000", "{}"},
		{"0", "2", "", ""},
		{"-1", "2", "abcdefgh", ""},
		{"99999999999999999999", "1", "", ""},
		{"1", "2", "short", ""},
		{"1", "2", "has space in it", ""},
		{"1", "2", "abcdefgh|pipe", ""},
		{"1", "2", "", `{"quantity":1}`},
		{"1", "2", "", `{} {}`},
		{"1", "2", "", `[]`},
		{"1", "2", "", `{"a":` + strings.Repeat("[", 600)},
		{"1", "2", "", "\x00\xff"},
		{"1e3", "0x10", "", ""},
	}
	for _, s := range seeds {
		f.Add(s.session, s.prize, s.key, s.body)
	}
	f.Fuzz(func(t *testing.T, session, prize, key, body string) {
		r := httptest.NewRequest("POST", "/grab", strings.NewReader(body))
		r.SetPathValue("session", session)
		r.SetPathValue("prize", prize)
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		in, err := parseGrab(httptest.NewRecorder(), r)
		if err != nil {
			var verr seckill.ValidationError
			if errors.As(err, &verr) && len(verr) == 0 {
				t.Fatal("empty validation error")
			}
			return
		}
		if in.SessionID <= 0 || in.PrizeID <= 0 || strconv.FormatInt(in.SessionID, 10) != session ||
			strconv.FormatInt(in.PrizeID, 10) != prize {
			t.Fatalf("accepted ids %q/%q as %d/%d", session, prize, in.SessionID, in.PrizeID)
		}
		if in.Key != "" {
			sid, pid, k, err := seckill.ParseRequestID(seckill.RequestID(in.SessionID, in.PrizeID, in.Key))
			if err != nil || sid != in.SessionID || pid != in.PrizeID || k != in.Key {
				t.Fatalf("key %q does not round-trip: %v", in.Key, err)
			}
			// The id the gateway makes of it (the key derived per user) parses too.
			rid := seckill.UserRequestID(in.SessionID, in.PrizeID, "fuzz-user", in.Key)
			if sid, pid, _, err := seckill.ParseRequestID(rid); err != nil || sid != in.SessionID || pid != in.PrizeID {
				t.Fatalf("the request id %q of key %q does not parse: %v", rid, in.Key, err)
			}
		}
		if len(body) > grabBodyLimit {
			t.Fatalf("accepted a %d-byte body", len(body))
		}
	})
}

// FuzzParseRequestID: parsing never panics and accepts only what RequestID produces.
func FuzzParseRequestID(f *testing.F) {
	for _, s := range []string{"1-2-abcdefgh", "1-2-", "--", "0-1-abcdefgh", "1-2-abc-def-ghi", "x-y-z", "9223372036854775808-1-abcdefgh"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rid string) {
		sid, pid, key, err := seckill.ParseRequestID(rid)
		if err != nil {
			return
		}
		if seckill.RequestID(sid, pid, key) != rid {
			t.Fatalf("%q parsed to %d/%d/%q which does not rebuild it", rid, sid, pid, key)
		}
	})
}
