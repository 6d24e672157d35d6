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
// the HMAC covers everything before it.
type signer struct {
	key []byte
}

// newSigner keys the HMAC with a key derived from the admin token, so rotating the token
// ends every console session without a session store; the label keeps the derived key from
// ever equalling a MAC computed for another purpose with the same token.
func newSigner(adminToken string) signer {
	m := hmac.New(sha256.New, []byte(adminToken))
	m.Write([]byte("seckill console session key v1"))
	return signer{key: m.Sum(nil)}
}

var errBadSession = errors.New("invalid console session")

func (s signer) mac(payload string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(payload))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// sign returns the cookie value for actor, valid until expiry.
func (s signer) sign(actor string, expiry time.Time) string {
	payload := fmt.Sprintf("%s.%d.%s", sessionVersion, expiry.Unix(), base64.RawURLEncoding.EncodeToString([]byte(actor)))
	return payload + "." + s.mac(payload)
}

// verify returns the actor of a value this signer made that has not expired at now.
func (s signer) verify(value string, now time.Time) (string, error) {
	parts := strings.Split(value, ".")
	if len(parts) != 4 || parts[0] != sessionVersion {
		return "", fmt.Errorf("%w: malformed", errBadSession)
	}
	payload := strings.Join(parts[:3], ".")
	// Constant time, so the MAC cannot be learned a byte at a time from response timings.
	if !hmac.Equal([]byte(parts[3]), []byte(s.mac(payload))) {
		return "", fmt.Errorf("%w: bad signature", errBadSession)
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return "", fmt.Errorf("%w: expiry %q", errBadSession, parts[1])
	}
	if !now.Before(time.Unix(exp, 0)) {
		return "", fmt.Errorf("%w: expired at %s", errBadSession, time.Unix(exp, 0).UTC().Format(time.RFC3339))
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || !seckill.ValidUserID(string(raw)) {
		return "", fmt.Errorf("%w: actor", errBadSession)
	}
	return string(raw), nil
}
