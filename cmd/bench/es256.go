package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"
)

// es256Tokens are user tokens as an identity provider signs them on the production path
// (ES256, a key of its JWKS), for the ceiling that measures their verification: a key made
// for the run, its public JWKS in a file the strategy server reads.
type es256Tokens struct {
	key    *ecdsa.PrivateKey
	jwks   string // the file
	signed []string
}

func newES256Tokens(dir string) (*es256Tokens, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("es256 bench key: %w", err)
	}
	doc, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: key.Public(), KeyID: "bench", Use: "sig", Algorithm: "ES256"}}})
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "bench-jwks.json")
	if err := os.WriteFile(path, doc, 0o600); err != nil {
		return nil, fmt.Errorf("es256 bench key set: %w", err)
	}
	return &es256Tokens{key: key, jwks: path}, nil
}

// tokens is bench.tokens for ES256: user i's token for i < n, each a new user (so each
// request is a verification, not a cache hit), signed outside the measured windows.
func (e *es256Tokens) tokens(n int) (func(i int) string, error) {
	now := time.Now()
	for i := len(e.signed); i < n; i++ {
		t := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.RegisteredClaims{Subject: "bench-" + strconv.Itoa(i), Issuer: "seckill",
			Audience: jwt.ClaimStrings{"seckill-gateway"}, IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(2 * time.Hour))})
		t.Header["kid"] = "bench"
		s, err := t.SignedString(e.key)
		if err != nil {
			return nil, fmt.Errorf("sign an es256 bench token: %w", err)
		}
		e.signed = append(e.signed, s)
	}
	signed := e.signed
	return func(i int) string { return signed[i%len(signed)] }, nil
}
