package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"
)

type signingKey struct {
	kid    string
	method jwt.SigningMethod
	priv   crypto.Signer
}

func newSigningKeys(t *testing.T) []signingKey {
	t.Helper()
	r, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	e, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, d, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return []signingKey{{"rsa-1", jwt.SigningMethodRS256, r}, {"ec-1", jwt.SigningMethodES256, e}, {"ed-1", jwt.SigningMethodEdDSA, d}}
}

// jwks is the public JWKS of keys, as an identity provider publishes it.
func jwks(t *testing.T, keys ...signingKey) []byte {
	t.Helper()
	var set jose.JSONWebKeySet
	for _, k := range keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.priv.Public(), KeyID: k.kid, Use: "sig", Algorithm: k.method.Alg()})
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func signWith(t *testing.T, k signingKey, kid, user string, now time.Time, ttl time.Duration) string {
	t.Helper()
	tok := jwt.NewWithClaims(k.method, jwt.RegisteredClaims{Subject: user, Issuer: "idp", Audience: jwt.ClaimStrings{"seckill"},
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(ttl))})
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(k.priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Tokens signed by a key of the set verify under the algorithm of that key; everything
// else is refused: an unknown key, a key named for another algorithm, an HS256 token when
// the gateway holds no secret (whatever it was signed with, the public key's bytes too),
// "alg: none", and a token signed by a key taken out of the set, even one verified before.
func TestKeySetVerification(t *testing.T) {
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	keys := newSigningKeys(t)
	ks, err := ParseKeySet(jwks(t, keys...))
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewKeySetVerifier(ks, "idp", "seckill", func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	v.SetMaxLifetime(2 * time.Hour)
	for _, k := range keys {
		if user, err := v.User(signWith(t, k, k.kid, "alice", now, time.Hour)); err != nil || user != "alice" {
			t.Errorf("%s token: %q %v", k.method.Alg(), user, err)
		}
	}
	pub, err := x509.MarshalPKIXPublicKey(keys[0].priv.Public())
	if err != nil {
		t.Fatal(err)
	}
	hs := func(secret []byte) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{Subject: "mallory", Issuer: "idp",
			Audience: jwt.ClaimStrings{"seckill"}, ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour))}).SignedString(secret)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	none := "eyJhbGciOiJub25lIn0." + strings.Split(hs([]byte("x")), ".")[1] + "."
	for name, tok := range map[string]string{
		"unknown kid":                    signWith(t, keys[0], "rsa-9", "bob", now, time.Hour),
		"no kid":                         signWith(t, keys[1], "", "bob", now, time.Hour),
		"an EC key named as another's":   signWith(t, keys[1], "rsa-1", "bob", now, time.Hour),
		"HS256 with the RSA key's bytes": hs(pub),
		"HS256 with any secret":          hs([]byte(strings.Repeat("s", 32))),
		"alg none":                       none,
		"lifetime over the cap":          signWith(t, keys[2], "ed-1", "bob", now, 3*time.Hour),
		"expired":                        signWith(t, keys[2], "ed-1", "bob", now.Add(-2*time.Hour), time.Hour),
	} {
		if user, err := v.User(tok); err == nil {
			t.Errorf("%s: accepted as %q", name, user)
		}
	}
	// Rotation: the set without rsa-1; its token, verified (and cached) above, is refused.
	rotated, err := ParseKeySet(jwks(t, keys[1:]...))
	if err != nil {
		t.Fatal(err)
	}
	v.SetKeySet(rotated)
	if _, err := v.User(signWith(t, keys[0], "rsa-1", "alice", now, time.Hour)); err == nil {
		t.Error("a token of a key taken out of the set was accepted")
	}
	if _, err := v.User(signWith(t, keys[1], "ec-1", "alice", now, time.Hour)); err != nil {
		t.Errorf("a token of a key kept in the set: %v", err)
	}
	// A verifier with a secret (development) still checks key-set tokens by their key.
	dev, _ := NewVerifier([]byte(strings.Repeat("d", 32)), "idp", "seckill", func() time.Time { return now })
	dev.SetKeySet(ks)
	if _, err := dev.User(signWith(t, keys[0], "rsa-1", "carol", now, time.Hour)); err != nil {
		t.Errorf("key-set token on a verifier with a secret too: %v", err)
	}
	if _, err := dev.User(hs(pub)); err == nil {
		t.Error("HS256 token signed with the RSA key's bytes accepted by a verifier with a secret")
	}
}

// A JWKS the gateway would be wrong to trust is refused with the reason.
func TestParseKeySetRefuses(t *testing.T) {
	keys := newSigningKeys(t)
	weak, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	doc := func(ks ...jose.JSONWebKey) []byte {
		b, err := json.Marshal(jose.JSONWebKeySet{Keys: ks})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	pub := func(i int) crypto.PublicKey { return keys[i].priv.Public() }
	for name, tc := range map[string]struct {
		doc  []byte
		want string
	}{
		"not JSON":      {[]byte("{"), "jwks"},
		"no keys":       {doc(), "no keys"},
		"no kid":        {doc(jose.JSONWebKey{Key: pub(0)}), "no kid"},
		"private key":   {doc(jose.JSONWebKey{Key: keys[1].priv, KeyID: "p"}), "private key"},
		"twice":         {doc(jose.JSONWebKey{Key: pub(0), KeyID: "a"}, jose.JSONWebKey{Key: pub(1), KeyID: "a"}), "twice"},
		"encryption":    {doc(jose.JSONWebKey{Key: pub(0), KeyID: "a", Use: "enc"}), "not signatures"},
		"weak RSA":      {doc(jose.JSONWebKey{Key: weak.Public(), KeyID: "a"}), "1024 bits"},
		"P-384":         {doc(jose.JSONWebKey{Key: p384.Public(), KeyID: "a"}), "P-384"},
		"alg not a fit": {doc(jose.JSONWebKey{Key: pub(1), KeyID: "a", Algorithm: "RS256"}), "does not fit"},
	} {
		if _, err := ParseKeySet(tc.doc); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, tc.want)
		}
	}
	if _, err := NewKeySetVerifier(nil, "i", "a", time.Now); err == nil {
		t.Error("a verifier without keys was made")
	}
}
