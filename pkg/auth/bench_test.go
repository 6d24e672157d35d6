package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"strconv"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// BenchmarkVerify prints what one token check costs a grab: `go test -run X -bench Verify
// ./pkg/auth/`. "uncached" presents a new token each time (a flash crowd's first request);
// "cached" the same token again (its retries and polls). ES256 is golang-jwt's verification
// with the key given, the cost an asymmetric production path would add before the cache;
// the cache itself (SHA-256 of the token, one map lookup) does not depend on the algorithm.
func BenchmarkVerify(b *testing.B) {
	const n = 4096
	clock := func() time.Time { return now }
	claims := func(i int) jwt.MapClaims {
		return jwt.MapClaims{"sub": "user-" + strconv.Itoa(i), "iss": "seckill", "aud": "seckill-gateway",
			"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	}
	hs := make([]string, n)
	for i := range hs {
		hs[i], _ = jwt.NewWithClaims(jwt.SigningMethodHS256, claims(i)).SignedString(secret)
	}
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	es := make([]string, n)
	for i := range es {
		es[i], _ = jwt.NewWithClaims(jwt.SigningMethodES256, claims(i)).SignedString(ec)
	}
	b.Run("HS256/uncached", func(b *testing.B) {
		v, _ := NewVerifier(secret, "seckill", "seckill-gateway", clock)
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			v.cache = newTokenCache(1) // every token is new
			if _, err := v.User(hs[i%n]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("HS256/cached", func(b *testing.B) {
		v, _ := NewVerifier(secret, "seckill", "seckill-gateway", clock)
		for _, t := range hs {
			_, _ = v.User(t)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := v.User(hs[i%n]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ES256/uncached", func(b *testing.B) {
		p := jwt.NewParser(jwt.WithValidMethods([]string{"ES256"}), jwt.WithExpirationRequired(),
			jwt.WithIssuer("seckill"), jwt.WithAudience("seckill-gateway"), jwt.WithTimeFunc(clock), jwt.WithLeeway(leeway))
		key := func(*jwt.Token) (any, error) { return &ec.PublicKey, nil }
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := p.Parse(es[i%n], key); err != nil {
				b.Fatal(err)
			}
		}
	})
}
