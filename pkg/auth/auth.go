// Package auth issues and verifies the user tokens the gateway trusts: JWTs with a required
// expiry, issuer and audience, signed by an identity provider with a key of a JWKS (RS256,
// ES256, EdDSA: the production path) or, for development, with an HS256 secret. The user id
// comes only from a verified token.
package auth

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// method is the algorithm of an HMAC secret. A token is checked only with a key of the
// algorithm it names, and an HS256 token only when a secret is set: "alg: none" and
// algorithm confusion (an RS256 public key used as an HMAC secret) never verify.
const method = "HS256"

// Verifier checks user tokens. It holds the current secret and, during a rotation, the
// previous one (SetSecrets): a token signed with either is accepted, so tokens issued before
// the identity provider switched keep working for the overlap; it signs nothing.
type Verifier struct {
	keys atomic.Pointer[keyPair]
	// setting serialises SetSecrets and SetKeySet: each builds the next pair from the one
	// in force, and two at once would lose one's change (a rotation undone by a reload).
	setting          sync.Mutex
	issuer, audience string
	now              func() time.Time
	cache            *tokenCache
	// maxLifetime caps how long a token may be valid (SetMaxLifetime; 0: no cap).
	maxLifetime time.Duration
	// previousUsed counts tokens verified with the previous secret (not cache hits): when
	// it stops moving, nothing presents the old tokens any more and the previous secret can go.
	previousUsed atomic.Uint64
}

// keyPair is one generation of keys: the HMAC secrets (current nil: HS256 tokens are
// refused) and the key set (nil: none). Cached verdicts belong to the generation that made
// them, so a key taken away stops its tokens at once, cached or not.
type keyPair struct {
	current, previous *hmacKey
	jwks              *KeySet
}

// minSecret is the shortest HS256 secret accepted (the hash's size).
const minSecret = 32

// NewVerifier returns a Verifier for tokens signed with secret by issuer for audience.
func NewVerifier(secret []byte, issuer, audience string, now func() time.Time) (*Verifier, error) {
	v := &Verifier{now: now, cache: newTokenCache(50_000), issuer: issuer, audience: audience}
	if err := v.SetSecrets(secret, nil); err != nil {
		return nil, err
	}
	return v, nil
}

// SetSecrets replaces the secrets: current, and previous (nil or empty: none) accepted too
// during a rotation. Tokens verified under the secrets before are verified again.
func (v *Verifier) SetSecrets(current, previous []byte) error {
	if len(current) < minSecret {
		return fmt.Errorf("jwt secret must be at least %d bytes", minSecret)
	}
	if len(previous) > 0 && len(previous) < minSecret {
		return fmt.Errorf("previous jwt secret must be at least %d bytes", minSecret)
	}
	k := &keyPair{current: newHMACKey(bytes.Clone(current))}
	if len(previous) > 0 {
		k.previous = newHMACKey(bytes.Clone(previous))
	}
	v.setting.Lock()
	defer v.setting.Unlock()
	if old := v.keys.Load(); old != nil {
		k.jwks = old.jwks
	}
	v.keys.Store(k)
	return nil
}

// NewKeySetVerifier returns a Verifier for tokens signed with a key of ks by issuer for
// audience; HS256 tokens are refused (no secret).
func NewKeySetVerifier(ks *KeySet, issuer, audience string, now func() time.Time) (*Verifier, error) {
	if ks == nil || ks.Len() == 0 {
		return nil, errors.New("a key set with at least one key is required")
	}
	v := &Verifier{now: now, cache: newTokenCache(50_000), issuer: issuer, audience: audience}
	v.keys.Store(&keyPair{jwks: ks})
	return v, nil
}

// SetKeySet replaces the key set (nil: none; then a verifier without a secret refuses every
// token). A key rotation is a new set holding the new key beside the old one for the
// overlap. Tokens verified under the set before are verified again.
func (v *Verifier) SetKeySet(ks *KeySet) {
	v.setting.Lock()
	defer v.setting.Unlock()
	old := v.keys.Load()
	v.keys.Store(&keyPair{current: old.current, previous: old.previous, jwks: ks})
}

// SetMaxLifetime caps the lifetime of the tokens accepted: exp minus the later of iat and
// nbf (without either, minus now) may exceed max by the clock leeway at most. A stolen token
// is then worth at most max, whatever its issuer wrote. 0 lifts the cap. Call it before the
// verifier is shared.
func (v *Verifier) SetMaxLifetime(max time.Duration) { v.maxLifetime = max }

// HasPrevious reports whether a previous secret is accepted.
func (v *Verifier) HasPrevious() bool { return v.keys.Load().previous != nil }

// HasSecret reports whether HS256 tokens are accepted (a secret is set).
func (v *Verifier) HasSecret() bool { return v.keys.Load().current != nil }

// PreviousVerified is the number of tokens verified with the previous secret so far.
func (v *Verifier) PreviousVerified() uint64 { return v.previousUsed.Load() }

// ErrInvalid wraps every reason a token is refused.
var ErrInvalid = errors.New("invalid token")

// User verifies a token and returns its subject, the user id. A token verified before is
// answered from a bounded cache until its expiry: a crowd retrying and polling presents the
// same token many times, and parsing it is a large part of a grab's CPU. Only tokens that
// passed every check are cached, keyed by the whole token (signature included), with the
// secrets that verified them.
func (v *Verifier) User(token string) (string, error) {
	k := v.keys.Load()
	key := sha256.Sum256([]byte(token)) // hashed once for the lookup and the entry
	if user, ok := v.cache.getKey(key, k, v.now()); ok {
		return user, nil
	}
	c, err := v.verify(token, k)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if !seckill.ValidUserID(c.sub) {
		return "", fmt.Errorf("%w: subject is not a valid user id", ErrInvalid)
	}
	v.cache.putKey(key, k, c.sub, c.exp)
	return c.sub, nil
}

// verify checks a token's form, signature and claims (see verify.go).
func (v *Verifier) verify(tok string, k *keyPair) (claims, error) {
	var scratch [768]byte
	t, _, err := decodeToken(tok, scratch[:0], v.issuer, v.audience)
	if err != nil {
		return claims{}, err
	}
	previous := false
	switch {
	case t.alg != method:
		if k.jwks == nil {
			return claims{}, fmt.Errorf("%s tokens are not accepted (no key set)", t.alg)
		}
		if err := k.jwks.check(t.alg, t.kid, t.input, t.sig); err != nil {
			return claims{}, err
		}
	case k.current == nil:
		return claims{}, errors.New("HS256 tokens are not accepted (no secret; tokens come signed by a key of the key set)")
	case !k.current.matches(t.input, t.sig):
		// Only a signature that does not match the current secret is tried with the
		// previous one; an expired or misaddressed token is refused as it is.
		if k.previous == nil || !k.previous.matches(t.input, t.sig) {
			return claims{}, errSignature
		}
		previous = true
	}
	now := v.now()
	if err := t.claims.validate(now, v.issuer); err != nil {
		return claims{}, err
	}
	if err := t.claims.lifetimeWithin(now, v.maxLifetime); err != nil {
		return claims{}, err
	}
	if previous {
		v.previousUsed.Add(1)
	}
	return t.claims, nil
}

// tokenCache remembers verified tokens in two generations of at most max entries each:
// when the current one is full the older one is dropped, so memory stays bounded. Keys are
// the tokens' SHA-256, not the tokens: a fraction of the memory, and no credential kept.
type tokenCache struct {
	mu        sync.Mutex
	max       int
	cur, prev map[[sha256.Size]byte]cachedUser
}

type cachedUser struct {
	user string
	exp  time.Time
	keys *keyPair // the secrets that verified it
}

func newTokenCache(max int) *tokenCache {
	return &tokenCache{max: max, cur: map[[sha256.Size]byte]cachedUser{}, prev: map[[sha256.Size]byte]cachedUser{}}
}

// getKey returns the user of a cached token by the token's hash (Verify hashes it once).
func (c *tokenCache) getKey(k [sha256.Size]byte, keys *keyPair, now time.Time) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.cur[k]
	if !ok {
		if e, ok = c.prev[k]; ok {
			c.cur[k] = e
		}
	}
	if !ok || e.keys != keys || !now.Before(e.exp) {
		return "", false
	}
	return e.user, true
}

func (c *tokenCache) put(token string, keys *keyPair, user string, exp time.Time) {
	c.putKey(sha256.Sum256([]byte(token)), keys, user, exp)
}

// putKey is put with the token's hash already computed.
func (c *tokenCache) putKey(k [sha256.Size]byte, keys *keyPair, user string, exp time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.cur) >= c.max {
		c.prev, c.cur = c.cur, make(map[[sha256.Size]byte]cachedUser, len(c.cur))
	}
	c.cur[k] = cachedUser{user: user, exp: exp, keys: keys}
}

// Signer issues user tokens (for the demo, tests, the load generator and the invariant
// harness; production tokens come from the shop's identity provider with the same secret).
type Signer struct {
	secret           []byte
	issuer, audience string
}

// NewSigner returns a Signer.
func NewSigner(secret []byte, issuer, audience string) *Signer {
	return &Signer{secret: secret, issuer: issuer, audience: audience}
}

// Token returns a token for user valid from now for ttl.
func (s *Signer) Token(user string, now time.Time, ttl time.Duration) (string, error) {
	claims := jwt.RegisteredClaims{
		Subject:   user,
		Issuer:    s.issuer,
		Audience:  jwt.ClaimStrings{s.audience},
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(s.secret)
	if err != nil {
		return "", fmt.Errorf("sign token for %s: %w", user, err)
	}
	return tok, nil
}
