package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
)

// A gateway that verifies the identity provider's public keys, from a file
// (SECKILL_JWT_JWKS_FILE) or the provider's URL (SECKILL_JWT_JWKS_URL), and holds no
// secret: a token of a key in the set is a user, an HS256 token is not, and a key rotation
// takes effect while it runs (a key taken out stops its tokens, cached or not; a bad
// document or a failed fetch keeps the last good set). A key set that cannot be read stops
// the start, named.
func TestKeySetTokensAndRotation(t *testing.T) {
	keyA, keyB := newECKey(t), newECKey(t)
	for _, source := range []string{"file", "url"} {
		t.Run(source, func(t *testing.T) {
			var publish func(doc []byte)
			vars := map[string]string{"SECKILL_JWT_SECRET": ""}
			if source == "file" {
				file := filepath.Join(t.TempDir(), "jwks.json")
				publish = func(doc []byte) { renameInto(t, file, doc) }
				vars["SECKILL_JWT_JWKS_FILE"] = file
			} else {
				var served atomic.Value
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					doc := served.Load().([]byte)
					if string(doc) == "500" {
						http.Error(w, "provider down", http.StatusInternalServerError)
						return
					}
					w.Write(doc)
				}))
				t.Cleanup(srv.Close)
				publish = func(doc []byte) { served.Store(doc) }
				vars["SECKILL_JWT_JWKS_URL"], vars["SECKILL_JWT_JWKS_REFRESH"] = srv.URL+"/.well-known/jwks.json", "1s"
			}
			publish(jwksOf(t, map[string]*ecdsa.PrivateKey{"a": keyA}))
			pub, _ := startGateway(t, vars)
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
			publish(jwksOf(t, map[string]*ecdsa.PrivateKey{"b": keyB}))
			waitStatus(t, poll, tokA, http.StatusUnauthorized)
			waitStatus(t, poll, tokB, http.StatusNotFound)
			for _, bad := range []string{`{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`, "500"} {
				publish([]byte(bad))
				time.Sleep(2500 * time.Millisecond) // two reloads
				if got := poll(tokB); got != http.StatusNotFound {
					t.Fatalf("after %q, key b's token: %d, want 404 (the last good set kept)", bad, got)
				}
			}
		})
	}

	bad := filepath.Join(t.TempDir(), "bad.json")
	renameInto(t, bad, []byte("{"))
	for name, vars := range map[string]map[string]string{
		"a file that is not a key set": {"SECKILL_JWT_JWKS_FILE": bad},
		"a URL that does not answer":   {"SECKILL_JWT_JWKS_URL": "http://" + stacktest.FreeAddr(t) + "/jwks.json"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		vars["SECKILL_ADMIN_TOKEN"] = testAdminToken
		vars["SECKILL_GATEWAY_ADDR"], vars["SECKILL_ADMIN_ADDR"] = stacktest.FreeAddr(t), stacktest.FreeAddr(t)
		err := run(ctx, stacktest.Getenv(vars), io.Discard)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "SECKILL_JWT_JWKS_") {
			t.Errorf("start with %s: %v, want an error naming the key set's variable", name, err)
		}
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

// jwksOf is the public JWKS of keys.
func jwksOf(t *testing.T, keys map[string]*ecdsa.PrivateKey) []byte {
	t.Helper()
	var set jose.JSONWebKeySet
	for kid, k := range keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.Public(), KeyID: kid, Use: "sig", Algorithm: "ES256"})
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// renameInto writes body to path by a rename, as a mounted Secret changes.
func renameInto(t *testing.T, path string, body []byte) {
	t.Helper()
	if err := os.WriteFile(path+".new", body, 0o600); err != nil {
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
