// Package sessionstore keeps the operator console's sessions server-side, in Redis, so that
// signing out revokes a session (a copied cookie is refused afterwards), an idle session ends,
// and every gateway of a replicated deployment sees the same sessions: a session signed in on
// one replica holds on the others, and signing out on one ends it on all.
//
// A session is one key, sk:console:session:<SHA-256 of its id>, whose value is its absolute
// end (Unix ms) and whose TTL is the shorter of the idle timeout and what is left of the
// absolute lifetime; each use extends the TTL, never past the absolute end. The id itself is
// never stored, so whoever reads Redis cannot present a session.
package sessionstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// keyPrefix is under the services' Redis ACL key pattern (~sk:*).
const keyPrefix = "sk:console:session:"

// touch extends a live session's TTL to min(idle, absolute end - now), or ends it if that is
// not positive; 0 for a session that does not exist (signed out, idle too long, past its
// end). One script, so a sign-out between the read and the extension cannot be undone.
var touch = redis.NewScript(`
local ends = redis.call('GET', KEYS[1])
if not ends then return 0 end
local ttl = math.min(tonumber(ARGV[1]), tonumber(ends) - tonumber(ARGV[2]))
if ttl <= 0 then
  redis.call('DEL', KEYS[1])
  return 0
end
redis.call('PEXPIRE', KEYS[1], ttl)
return 1
`)

// Redis is the console's session store in Redis.
type Redis struct {
	rdb redis.UniversalClient
}

// New returns the store on rdb.
func New(rdb redis.UniversalClient) *Redis {
	return &Redis{rdb: rdb}
}

func key(id string) string {
	sum := sha256.Sum256([]byte(id))
	return keyPrefix + hex.EncodeToString(sum[:])
}

// Create starts session id at now: it ends after idle without use, and at end in any case.
func (s *Redis) Create(ctx context.Context, id string, now, end time.Time, idle time.Duration) error {
	ttl := min(idle, end.Sub(now))
	if ttl <= 0 {
		return fmt.Errorf("console session: ends before it starts")
	}
	if err := s.rdb.Set(ctx, key(id), end.UnixMilli(), ttl).Err(); err != nil {
		return fmt.Errorf("console session create: %w", err)
	}
	return nil
}

// Touch reports whether session id is live at now and, if so, extends its idle timeout.
func (s *Redis) Touch(ctx context.Context, id string, now time.Time, idle time.Duration) (bool, error) {
	n, err := touch.Run(ctx, s.rdb, []string{key(id)}, idle.Milliseconds(), now.UnixMilli()).Int()
	if err != nil {
		return false, fmt.Errorf("console session touch: %w", err)
	}
	return n == 1, nil
}

// Revoke ends session id (nothing if it already ended).
func (s *Redis) Revoke(ctx context.Context, id string) error {
	if err := s.rdb.Del(ctx, key(id)).Err(); err != nil {
		return fmt.Errorf("console session revoke: %w", err)
	}
	return nil
}
