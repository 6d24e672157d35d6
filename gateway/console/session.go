package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// sessionVersion prefixes every cookie value, so a future format can refuse old cookies by
// name instead of by a failed signature. v1 cookies (signed, but with no server-side
// session to revoke) are refused: their holders sign in again.
const sessionVersion = "v2"

// signer makes and checks session cookie values: v2.<expiry unix>.<actor>.<session id>.<hmac>.
// The actor is base64url (a name may hold characters a cookie value may not, such as ';', '"'
// or ','), the session id names the server-side session (Sessions) that sign-out revokes and
// idleness ends, and the HMAC covers everything before it: a forged or altered cookie is
// refused without asking the store. Each credential has its own MAC key, derived from the
// console's secret, the credential's name and its token's hash: a session is valid only
// while the credential it was signed in with exists unchanged, so removing or rotating an
// operator's token ends that operator's sessions, and no session names another credential.
type signer struct {
	secret []byte
}

func newSigner(secret []byte) signer {
	return signer{secret: secret}
}

var errBadSession = errors.New("invalid console session")

// key derives the MAC key of the named credential; the label keeps it from ever equalling
// a MAC computed for another purpose with the same secret.
func (s signer) key(actor string, hash [sha256.Size]byte) []byte {
	m := hmac.New(sha256.New, s.secret)
	m.Write([]byte("seckill console session key v1\x00"))
	m.Write([]byte(actor))
	m.Write([]byte{0})
	m.Write(hash[:])
	return m.Sum(nil)
}

func mac(key []byte, payload string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(payload))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// sign returns the cookie value of session id for actor (whose credential's token hashes to
// hash), valid until expiry.
func (s signer) sign(actor string, hash [sha256.Size]byte, expiry time.Time, id string) string {
	payload := fmt.Sprintf("%s.%d.%s.%s", sessionVersion, expiry.Unix(), base64.RawURLEncoding.EncodeToString([]byte(actor)), id)
	return payload + "." + mac(s.key(actor, hash), payload)
}

// sessionID returns the session id of a cookie value of this format, signed or not: signing
// out must revoke the session even when its credential is gone or its signature no longer
// checks, and naming an id is only possible to whoever holds the cookie.
func sessionID(value string) (string, bool) {
	parts := strings.Split(value, ".")
	if len(parts) != 5 || parts[0] != sessionVersion || !validID(parts[3]) {
		return "", false
	}
	return parts[3], true
}

// verify returns the actor and the session id of a value this signer made that has not
// expired at now, for a credential that still exists with the same token (hashOf).
func (s signer) verify(value string, now time.Time, hashesOf func(string) [][sha256.Size]byte) (actor, id string, err error) {
	parts := strings.Split(value, ".")
	if len(parts) != 5 || parts[0] != sessionVersion || !validID(parts[3]) {
		return "", "", fmt.Errorf("%w: malformed", errBadSession)
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || !seckill.ValidUserID(string(raw)) {
		return "", "", fmt.Errorf("%w: actor", errBadSession)
	}
	actor = string(raw)
	hashes := hashesOf(actor)
	if len(hashes) == 0 {
		return "", "", fmt.Errorf("%w: no credential %q", errBadSession, actor)
	}
	payload := strings.Join(parts[:4], ".")
	// Constant time, so the MAC cannot be learned a byte at a time from response timings;
	// every token of the credential is tried (two during a rotation).
	good := false
	for _, hash := range hashes {
		good = hmac.Equal([]byte(parts[4]), []byte(mac(s.key(actor, hash), payload))) || good
	}
	if !good {
		return "", "", fmt.Errorf("%w: bad signature", errBadSession)
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return "", "", fmt.Errorf("%w: expiry %q", errBadSession, parts[1])
	}
	if !now.Before(time.Unix(exp, 0)) {
		return "", "", fmt.Errorf("%w: expired at %s", errBadSession, time.Unix(exp, 0).UTC().Format(time.RFC3339))
	}
	return actor, parts[3], nil
}

// newID returns a fresh session id: 128 random bits, base64url.
func newID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("session id: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

func validID(id string) bool {
	b, err := base64.RawURLEncoding.DecodeString(id)
	return err == nil && len(b) == 16
}
