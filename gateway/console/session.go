package console

import (
	"crypto/hmac"
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
// name instead of by a failed signature.
const sessionVersion = "v1"

// signer makes and checks session cookie values: v1.<expiry unix>.<actor>.<hmac>. The actor is
// base64url (a name may hold characters a cookie value may not, such as ';', '"' or ','), and
// the HMAC covers everything before it. Each credential has its own MAC key, derived from the
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

// sign returns the cookie value for actor (whose credential's token hashes to hash), valid
// until expiry.
func (s signer) sign(actor string, hash [sha256.Size]byte, expiry time.Time) string {
	payload := fmt.Sprintf("%s.%d.%s", sessionVersion, expiry.Unix(), base64.RawURLEncoding.EncodeToString([]byte(actor)))
	return payload + "." + mac(s.key(actor, hash), payload)
}

// verify returns the actor of a value this signer made that has not expired at now, for a
// credential that still exists with the same token (hashOf).
func (s signer) verify(value string, now time.Time, hashesOf func(string) [][sha256.Size]byte) (string, error) {
	parts := strings.Split(value, ".")
	if len(parts) != 4 || parts[0] != sessionVersion {
		return "", fmt.Errorf("%w: malformed", errBadSession)
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || !seckill.ValidUserID(string(raw)) {
		return "", fmt.Errorf("%w: actor", errBadSession)
	}
	actor := string(raw)
	hashes := hashesOf(actor)
	if len(hashes) == 0 {
		return "", fmt.Errorf("%w: no credential %q", errBadSession, actor)
	}
	payload := strings.Join(parts[:3], ".")
	// Constant time, so the MAC cannot be learned a byte at a time from response timings;
	// every token of the credential is tried (two during a rotation).
	good := false
	for _, hash := range hashes {
		good = hmac.Equal([]byte(parts[3]), []byte(mac(s.key(actor, hash), payload))) || good
	}
	if !good {
		return "", fmt.Errorf("%w: bad signature", errBadSession)
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return "", fmt.Errorf("%w: expiry %q", errBadSession, parts[1])
	}
	if !now.Before(time.Unix(exp, 0)) {
		return "", fmt.Errorf("%w: expired at %s", errBadSession, time.Unix(exp, 0).UTC().Format(time.RFC3339))
	}
	return actor, nil
}
