package seckill_test

import (
	"strings"
	"testing"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// The derivation is pinned: a client's retry must land on the request id of its first
// attempt whichever gateway version answers each, so changing it is changing the API.
// The values are the first 32 hex digits of `printf '%s\0%s' user key | sha256sum`.
func TestUserRequestIDIsPinned(t *testing.T) {
	for _, c := range []struct {
		user, key, want string
	}{
		{"alice", "alice-key-0001", "7-3-0082df5c44f669b6265fcbeddb084338"},
		{"bob", "alice-key-0001", "7-3-929a333c4544162887d2f4d4571bebc6"},
		{"u1", "01937f3c-5b2a-7c4e-9a1d-2f6b8e0c4d71", "7-3-a2ee285ef8f0d201157ca372fe291052"},
		{"user-42", "k12345-00000007", "7-3-dcbf3e0d17d61ad5ffc2e7c898232138"},
	} {
		if got := seckill.UserRequestID(7, 3, c.user, c.key); got != c.want {
			t.Errorf("UserRequestID(7, 3, %q, %q) = %s, want %s", c.user, c.key, got, c.want)
		}
	}
}

// A key names a grab per user: the same user and key give the same id, a different user or
// key another one, and every id parses back to its session and prize with a valid key of
// another shape than a raw key or a generated UUIDv7.
func TestUserRequestID(t *testing.T) {
	const key = "shared-key-0001"
	for _, c := range []struct {
		name       string
		user, key  string
		sameAsBase bool
	}{
		{"same user, same key", "alice", key, true},
		{"another user, same key", "bob", key, false},
		{"same user, another key", "alice", "shared-key-0002", false},
		{"the same bytes split elsewhere", "alices", "hared-key-0001", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := seckill.UserRequestID(11, 22, "alice", key)
			rid := seckill.UserRequestID(11, 22, c.user, c.key)
			if (rid == base) != c.sameAsBase {
				t.Fatalf("%s vs %s: equal = %v, want %v", rid, base, rid == base, c.sameAsBase)
			}
			sid, pid, k, err := seckill.ParseRequestID(rid)
			if err != nil || sid != 11 || pid != 22 {
				t.Fatalf("ParseRequestID(%s) = %d %d %q %v", rid, sid, pid, k, err)
			}
			if len(k) != 32 || strings.Trim(k, "0123456789abcdef") != "" || !seckill.ValidKey(k) {
				t.Fatalf("derived key %q: want 32 lowercase hex digits", k)
			}
			if rid == seckill.RequestID(11, 22, c.key) {
				t.Fatalf("%s is the raw key's request id", rid)
			}
		})
	}
}
