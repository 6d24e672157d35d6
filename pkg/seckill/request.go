package seckill

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MaxKeyLen bounds a client's Idempotency-Key.
const MaxKeyLen = 64

// ValidKey reports whether k can be an idempotency key: 8 to 64 characters of
// [A-Za-z0-9_.:-], which covers UUIDs and ULIDs and keeps keys safe in logs and Redis.
func ValidKey(k string) bool {
	if len(k) < 8 || len(k) > MaxKeyLen {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

// RequestID is the system-wide id of one grab: the session, the prize and the idempotency
// key. Carrying the session×prize lets a status poll find the grab's Redis keys without
// another lookup; the key makes client retries land on the same id. The gateway passes a
// key it generated; a client's Idempotency-Key goes through UserRequestID first.
func RequestID(sessionID, prizeID int64, key string) string {
	return fmt.Sprintf("%d-%d-%s", sessionID, prizeID, key)
}

// UserRequestID is the request id of user's grab sent with the client's Idempotency-Key
// key: RequestID with, as its key, the first 32 hex digits of SHA-256(user, NUL, key).
//
// A key is scoped to its user. Used raw, one key named one grab whoever sent it: another
// user sending it was refused as a conflict, or, on a prize with stock buckets, admitted in
// their own home bucket under the same request id, so one of two 202s never became an
// order (issue 39). Derived per user, the same user's retry lands on the same id and
// another user's same key on another. The session-prize-key form is kept, so every parser,
// Redis key and MySQL column reads it as before, as it still reads ids made from raw keys.
// The digest is no secret and need not be: an id grants nothing (polls and repeats check
// the owner), and 128 bits make two users meet on one id by chance negligible. Its shape
// differs from the UUIDv7 generated for a grab sent without a key. The
// values are pinned (TestUserRequestIDIsPinned): a retry must land where its first attempt
// did, whichever gateway version answers it.
func UserRequestID(sessionID, prizeID int64, user, key string) string {
	h := sha256.New()
	h.Write([]byte(user))
	h.Write([]byte{0}) // neither a user id nor a key holds NUL: the split is unambiguous
	h.Write([]byte(key))
	var sum [sha256.Size]byte
	return RequestID(sessionID, prizeID, hex.EncodeToString(h.Sum(sum[:0])[:16]))
}

// DrawRequestID is the request id of user's unit in a draw (package draw): the id the
// winner's reservation, grab event and order carry, and the one the entrant polls. One per
// user and draw, so the draw admitting a winner twice (a reconciler killed and its
// successor repeating the step) is the admission script's "seen", never a second unit. Its
// key "draw.<32 hex digits of SHA-256("seckill-draw", NUL, user)>" is a shape no client's
// Idempotency-Key becomes (those go through UserRequestID: 32 hex digits), which is what
// lets the admission script tell the draw's reservations from grabs, and the order event
// say that its order came from a draw.
func DrawRequestID(sessionID, prizeID int64, user string) string {
	sum := sha256.Sum256([]byte("seckill-draw\x00" + user))
	return RequestID(sessionID, prizeID, drawKeyPrefix+hex.EncodeToString(sum[:16]))
}

const drawKeyPrefix = "draw."

// IsDrawRequestID reports whether rid is a draw's request id (DrawRequestID's shape).
func IsDrawRequestID(rid string) bool {
	_, _, key, err := ParseRequestID(rid)
	return err == nil && strings.HasPrefix(key, drawKeyPrefix)
}

// ErrBadRequestID is returned for a request id that RequestID did not make.
var ErrBadRequestID = errors.New("malformed request id")

// ParseRequestID splits a request id into its session, prize and key.
func ParseRequestID(rid string) (sessionID, prizeID int64, key string, err error) {
	s, rest, ok1 := strings.Cut(rid, "-")
	p, key, ok2 := strings.Cut(rest, "-")
	if !ok1 || !ok2 || !ValidKey(key) {
		return 0, 0, "", ErrBadRequestID
	}
	sessionID, err1 := strconv.ParseInt(s, 10, 64)
	prizeID, err2 := strconv.ParseInt(p, 10, 64)
	// Only the canonical form ("7", not "07" or "+7"): one grab has exactly one id string.
	if err1 != nil || err2 != nil || sessionID <= 0 || prizeID <= 0 ||
		strconv.FormatInt(sessionID, 10) != s || strconv.FormatInt(prizeID, 10) != p {
		return 0, 0, "", ErrBadRequestID
	}
	return sessionID, prizeID, key, nil
}

// ValidUserID reports whether u can be a user id: 1 to 64 printable ASCII characters
// without '|' (the gate's record separator).
func ValidUserID(u string) bool {
	if len(u) == 0 || len(u) > 64 {
		return false
	}
	for i := 0; i < len(u); i++ {
		if u[i] <= ' ' || u[i] > '~' || u[i] == '|' {
			return false
		}
	}
	return true
}
