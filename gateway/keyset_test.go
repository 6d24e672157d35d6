package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
)

// A gateway that verifies the identity provider's public keys (SECKILL_JWT_JWKS_FILE) and
// holds no secret: a token of a key in the set is a user, an HS256 token is not, and a key
// rotation in the file takes effect while it runs (a key taken out stops its tokens, cached
// or not; a bad file keeps the last good set). A key set that does not parse stops the
// start, named.
func TestKeySetTokensAndRotation(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "jwks.json")
	keyA, keyB := newECKey(t), newECKey(t)
	writeJWKS(t, file, map[string]*ecdsa.PrivateKey{"a": keyA})
	pub, _ := startGateway(t, map[string]string{"SECKILL_JWT_SECRET": "", "SECKILL_JWT_JWKS_FILE": file})
	poll := func(token string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+pub+"/api/v1/grabs/1-1-someone-key-0001", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	tokA, tokB := esToken(t, keyA, "a"), esToken(t, keyB, "b")
	hs, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claimsFor("mallory")).SignedString([]byte("test-jwt-secret-0123456789-0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	// 404: the user was verified and has no such grab; 401: the token was refused.
	if got := poll(tokA); got != http.StatusNotFound {
		t.Fatalf("token of key a: %d, want 404 (verified)", got)
	}
	for name, tok := range map[string]string{"key b, not in the set": tokB, "HS256": hs} {
		if got := poll(tok); got != http.StatusUnauthorized {
			t.Fatalf("%s: %d, want 401", name, got)
		}
	}
	writeJWKS(t, file, map[string]*ecdsa.PrivateKey{"b": keyB})
	waitStatus(t, poll, tokA, http.StatusUnauthorized)
	waitStatus(t, poll, tokB, http.StatusNotFound)
	if err := os.WriteFile(file, []byte(`{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // two reloads
	if got := poll(tokB); got != http.StatusNotFound {
		t.Fatalf("after a bad key set file, key b's token: %d, want 404 (the last good set kept)", got)
	}

	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = run(ctx, stacktest.Getenv(map[string]string{"SECKILL_ADMIN_TOKEN": testAdminToken, "SECKILL_JWT_JWKS_FILE": bad,
		"SECKILL_GATEWAY_ADDR": stacktest.FreeAddr(t), "SECKILL_ADMIN_ADDR": stacktest.FreeAddr(t)}), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "SECKILL_JWT_JWKS_FILE") {
		t.Fatalf("start with an unreadable key set: %v, want an error naming SECKILL_JWT_JWKS_FILE", err)
	}
}

func newECKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// writeJWKS writes the public keys as a JWKS, renamed into place as a mounted Secret changes.
func writeJWKS(t *testing.T, path string, keys map[string]*ecdsa.PrivateKey) {
	t.Helper()
	var set jose.JSONWebKeySet
	for kid, k := range keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.Public(), KeyID: kid, Use: "sig", Algorithm: "ES256"})
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".new", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}

func claimsFor(user string) jwt.RegisteredClaims {
	now := time.Now()
	return jwt.RegisteredClaims{Subject: user, Issuer: "seckill", Audience: jwt.ClaimStrings{"seckill-gateway"},
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour))}
}

func esToken(t *testing.T, k *ecdsa.PrivateKey, kid string) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, claimsFor("alice"))
	tok.Header["kid"] = kid
	s, err := tok.SignedString(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func waitStatus(t *testing.T, poll func(string) int, token string, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for got := poll(token); got != want; got = poll(token) {
		if time.Now().After(deadline) {
			t.Fatalf("status %d 10 s after the key set changed, want %d", got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
