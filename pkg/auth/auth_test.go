package auth

import (
	"crypto/rand"
	"crypto/rsa"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

var (
	secret = []byte("0123456789abcdef0123456789abcdef")
	now    = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
)

func sign(t *testing.T, m jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(m, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func good() jwt.MapClaims {
	return jwt.MapClaims{"sub": "alice", "iss": "seckill", "aud": "seckill-gateway",
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
}

func with(k string, v any) jwt.MapClaims {
	c := good()
	if v == nil {
		delete(c, k)
	} else {
		c[k] = v
	}
	return c
}

func TestVerifierMatrix(t *testing.T) {
	v, err := NewVerifier(secret, "seckill", "seckill-gateway", func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	valid := sign(t, jwt.SigningMethodHS256, secret, good())
	parts := strings.Split(valid, ".")
	tampered := parts[0] + "." + parts[1] + "." + strings.Repeat("A", len(parts[2]))
	none := sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, good())

	tests := []struct {
		name, token string
		ok          bool
	}{
		{"valid", valid, true},
		{"alg none", none, false},
		{"wrong alg HS512", sign(t, jwt.SigningMethodHS512, secret, good()), false},
		{"wrong alg RS256", sign(t, jwt.SigningMethodRS256, rsaKey, good()), false},
		{"expired", sign(t, jwt.SigningMethodHS256, secret, with("exp", now.Add(-time.Minute).Unix())), false},
		{"missing exp", sign(t, jwt.SigningMethodHS256, secret, with("exp", nil)), false},
		{"wrong issuer", sign(t, jwt.SigningMethodHS256, secret, with("iss", "evil")), false},
		{"wrong audience", sign(t, jwt.SigningMethodHS256, secret, with("aud", "other")), false},
		{"issued in the future", sign(t, jwt.SigningMethodHS256, secret, with("iat", now.Add(time.Hour).Unix())), false},
		{"other secret", sign(t, jwt.SigningMethodHS256, []byte("another-secret-another-secret-xx"), good()), false},
		{"tampered signature", tampered, false},
		{"missing subject", sign(t, jwt.SigningMethodHS256, secret, with("sub", nil)), false},
		{"subject with separator", sign(t, jwt.SigningMethodHS256, secret, with("sub", "a|b")), false},
		{"garbage", "not.a.jwt", false},
		{"empty", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			user, err := v.User(tc.token)
			if tc.ok && (err != nil || user != "alice") {
				t.Fatalf("valid token refused: %v", err)
			}
			if !tc.ok && err == nil {
				t.Fatalf("token accepted as %q", user)
			}
		})
	}
}

func TestSignerRoundTrip(t *testing.T) {
	v, _ := NewVerifier(secret, "iss", "aud", func() time.Time { return now })
	tok, err := NewSigner(secret, "iss", "aud").Token("bob", now, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if u, err := v.User(tok); err != nil || u != "bob" {
		t.Fatalf("%q %v", u, err)
	}
	if _, err := NewVerifier([]byte("short"), "i", "a", time.Now); err == nil {
		t.Fatal("short secret accepted")
	}
}

// A cached token still expires: the cache never outlives the token's exp.
func TestCachedTokenExpires(t *testing.T) {
	clock := now
	v, _ := NewVerifier(secret, "seckill", "seckill-gateway", func() time.Time { return clock })
	tok := sign(t, jwt.SigningMethodHS256, secret, with("exp", now.Add(time.Minute).Unix()))
	for range 2 { // the second answer comes from the cache
		if u, err := v.User(tok); err != nil || u != "alice" {
			t.Fatalf("%q %v", u, err)
		}
	}
	clock = now.Add(2 * time.Minute)
	if _, err := v.User(tok); err == nil {
		t.Fatal("expired token accepted from the cache")
	}
	// A tampered copy of a cached token is a different key: it is verified, and refused.
	if _, err := v.User(tok[:len(tok)-2] + "xx"); err == nil {
		t.Fatal("tampered token accepted")
	}
}

func TestTokenCacheBounded(t *testing.T) {
	c := newTokenCache(10)
	for i := range 100 {
		c.put(string(rune('a'+i%26))+string(rune(i)), nil, "u", now.Add(time.Hour))
	}
	if len(c.cur) > 10 || len(c.prev) > 10 {
		t.Fatalf("cache grew to %d + %d", len(c.cur), len(c.prev))
	}
}

// A rotation: tokens of the previous secret are accepted while it is set, expired ones of it
// are still refused, and once it is taken away its tokens are refused at once, even those
// the cache had answered for.
func TestRotationWithPreviousSecret(t *testing.T) {
	old, next := secret, []byte("fedcba9876543210fedcba9876543210")
	other := []byte("another-secret-another-secret-xx")
	v, err := NewVerifier(old, "seckill", "seckill-gateway", func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	oldTok := sign(t, jwt.SigningMethodHS256, old, good())
	newTok := sign(t, jwt.SigningMethodHS256, next, good())
	oldExpired := sign(t, jwt.SigningMethodHS256, old, with("exp", now.Add(-time.Minute).Unix()))
	otherTok := sign(t, jwt.SigningMethodHS256, other, good())
	accepts := func(step, tok string, want bool) {
		t.Helper()
		_, err := v.User(tok)
		if (err == nil) != want {
			t.Fatalf("%s: accepted=%v (%v), want %v", step, err == nil, err, want)
		}
	}
	accepts("before", oldTok, true) // now cached
	accepts("before", newTok, false)

	if err := v.SetSecrets(next, old); err != nil {
		t.Fatal(err)
	}
	if !v.HasPrevious() {
		t.Fatal("HasPrevious = false during the overlap")
	}
	accepts("overlap, new", newTok, true)
	accepts("overlap, old", oldTok, true)
	accepts("overlap, old again (cached)", oldTok, true)
	accepts("overlap, old expired", oldExpired, false)
	accepts("overlap, other", otherTok, false)
	if n := v.PreviousVerified(); n != 1 {
		t.Fatalf("PreviousVerified = %d, want 1 (one fresh verification, one cache hit)", n)
	}

	if err := v.SetSecrets(next, nil); err != nil {
		t.Fatal(err)
	}
	accepts("after, old (was cached)", oldTok, false)
	accepts("after, new", newTok, true)
	if v.HasPrevious() {
		t.Fatal("HasPrevious = true after the overlap")
	}

	for _, tc := range []struct {
		name              string
		current, previous []byte
	}{
		{"short current", []byte("short"), nil},
		{"short previous", next, []byte("short")},
	} {
		if err := v.SetSecrets(tc.current, tc.previous); err == nil {
			t.Fatalf("%s: accepted", tc.name)
		}
	}
	accepts("after refused changes", newTok, true)
}

// A token valid for longer than the cap is refused, however its issuer signed it: counted
// from the later of iat and nbf, or from now without either.
func TestMaxLifetime(t *testing.T) {
	v, err := NewVerifier(secret, "seckill", "seckill-gateway", func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	v.SetMaxLifetime(time.Hour)
	claims := func(kv ...any) jwt.MapClaims {
		c := jwt.MapClaims{"sub": "alice", "iss": "seckill", "aud": "seckill-gateway"}
		for i := 0; i < len(kv); i += 2 {
			c[kv[i].(string)] = kv[i+1]
		}
		return c
	}
	for _, tc := range []struct {
		name string
		c    jwt.MapClaims
		ok   bool
	}{
		{"one hour from iat", claims("iat", now.Unix(), "exp", now.Add(time.Hour).Unix()), true},
		{"one hour and the leeway", claims("iat", now.Unix(), "exp", now.Add(time.Hour+leeway).Unix()), true},
		{"two hours from iat", claims("iat", now.Unix(), "exp", now.Add(2*time.Hour).Unix()), false},
		{"a year from iat", claims("iat", now.Unix(), "exp", now.Add(365*24*time.Hour).Unix()), false},
		{"issued long ago, one hour from nbf", claims("iat", now.Add(-10*time.Hour).Unix(), "nbf", now.Unix(), "exp", now.Add(time.Hour).Unix()), true},
		{"two hours from nbf", claims("nbf", now.Unix(), "exp", now.Add(2*time.Hour).Unix()), false},
		{"no iat or nbf, exp within the cap", claims("exp", now.Add(30*time.Minute).Unix()), true},
		{"no iat or nbf, exp beyond the cap", claims("exp", now.Add(3*time.Hour).Unix()), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := v.User(sign(t, jwt.SigningMethodHS256, secret, tc.c))
			if tc.ok != (err == nil) {
				t.Fatalf("err %v, want ok=%v", err, tc.ok)
			}
			if !tc.ok && !strings.Contains(err.Error(), "exceeds the maximum 1h0m0s") {
				t.Fatalf("err %v, want it to name the cap", err)
			}
		})
	}
}
