package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-pipeline/seckill/pkg/auth"
	"github.com/seckill-pipeline/seckill/pkg/config"
)

// jwtReloadEvery is how often the JWT secret files are read again. Kubernetes rewrites a
// mounted Secret within about a minute of its change (the kubelet's sync period plus its
// cache); reading two small files a second adds nothing to that and costs nothing.
const jwtReloadEvery = time.Second

// newVerifier builds the user-token verifier cfg describes: the identity provider's key set
// (from keys, the production path), the HS256 secrets (development), or both. It returns
// the key set document it read too (nil: none). The gateway signs nothing.
func newVerifier(ctx context.Context, cfg config.Gateway, keys *keySetSource) (*auth.Verifier, []byte, error) {
	var ks *auth.KeySet
	var doc []byte
	if keys != nil {
		var err error
		if doc, err = keys.load(ctx, time.Now()); err != nil {
			return nil, nil, err
		}
		if ks, err = auth.ParseKeySet(doc); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", keys, err)
		}
	}
	var v *auth.Verifier
	var err error
	if cfg.JWTSecret == "" {
		v, err = auth.NewKeySetVerifier(ks, cfg.JWTIssuer, cfg.JWTAudience, time.Now)
	} else {
		v, err = auth.NewVerifier([]byte(cfg.JWTSecret), cfg.JWTIssuer, cfg.JWTAudience, time.Now)
		// During a rotation the previous secret's tokens are accepted too (docs/operators.md,
		// Rotating secrets).
		if err == nil {
			err = v.SetSecrets([]byte(cfg.JWTSecret), []byte(cfg.JWTSecretPrevious))
		}
		if err == nil && ks != nil {
			v.SetKeySet(ks)
		}
	}
	if err != nil {
		return nil, nil, err
	}
	v.SetMaxLifetime(cfg.JWTMaxLifetime)
	return v, doc, nil
}

// keySetSource is where the identity provider's key set comes from: a file (a mounted
// Secret), read every jwtReloadEvery, or the provider's URL, fetched every refresh, and
// again jwksRetry after a failed fetch.
type keySetSource struct {
	file, url string
	refresh   time.Duration
	client    *http.Client
	next      time.Time // when the URL is fetched again
}

// The URL's limits: a fetch that hangs must not hold the reload loop, and a document is a
// few keys (a provider's set is a few KiB).
const (
	jwksTimeout  = 10 * time.Second
	jwksMaxBytes = 1 << 20
	jwksRetry    = 30 * time.Second
)

// newKeySetSource returns cfg's key set source, nil for none.
func newKeySetSource(cfg config.Gateway) *keySetSource {
	switch {
	case cfg.JWTJWKSFile != "":
		return &keySetSource{file: cfg.JWTJWKSFile}
	case cfg.JWTJWKSURL != "":
		return &keySetSource{url: cfg.JWTJWKSURL, refresh: cfg.JWTJWKSRefresh, client: &http.Client{Timeout: jwksTimeout}}
	}
	return nil
}

func (k *keySetSource) String() string {
	if k.file != "" {
		return "SECKILL_JWT_JWKS_FILE=" + k.file
	}
	return "SECKILL_JWT_JWKS_URL=" + k.url
}

// load returns the key set document, or nil (and no error) when the URL is not due yet.
func (k *keySetSource) load(ctx context.Context, now time.Time) ([]byte, error) {
	if k.file != "" {
		doc, err := os.ReadFile(k.file)
		if err != nil {
			return nil, fmt.Errorf("SECKILL_JWT_JWKS_FILE: %w", err)
		}
		return doc, nil
	}
	if now.Before(k.next) {
		return nil, nil
	}
	doc, err := k.fetch(ctx)
	if err != nil {
		k.next = now.Add(min(jwksRetry, k.refresh))
		return nil, fmt.Errorf("%s: %w", k, err)
	}
	k.next = now.Add(k.refresh)
	return doc, nil
}

func (k *keySetSource) fetch(ctx context.Context) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("answered %s", resp.Status)
	}
	doc, err := io.ReadAll(io.LimitReader(resp.Body, jwksMaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	if len(doc) > jwksMaxBytes {
		return nil, fmt.Errorf("a key set of more than %d bytes", jwksMaxBytes)
	}
	return doc, nil
}

// jwtSecrets keeps the verifier's keys in step with their files (SECKILL_JWT_SECRET_FILE,
// SECKILL_JWT_SECRET_PREVIOUS_FILE, SECKILL_JWT_JWKS_FILE), so a rotation needs no
// restart: the operator writes the old secret as the previous one and the new one as the
// current one (one Secret update), and takes the previous one away after the overlap; an
// identity provider's key set rotates by holding the new key beside the old one for the
// overlap. A secret given in the environment stays as it is. A file that cannot be read, a
// secret too short or a key set that does not parse keeps the last good keys (logged and
// counted once per change of the problem); a previous file that is absent or empty means
// no previous secret.
type jwtSecrets struct {
	currentFile, previousFile string
	keys                      *keySetSource // nil: no key set
	verifier                  *auth.Verifier
	log                       *slog.Logger
	failures                  prometheus.Counter

	current, previous []byte // the values in force
	jwks              []byte // the key set document in force
	lastErr           string
}

// newJWTSecrets returns the reloader of cfg's secret files and key set (nil when there is
// nothing to reload) and registers the rotation's metrics. jwks is the key set document the
// verifier was built with (nil: none).
func newJWTSecrets(cfg config.Gateway, v *auth.Verifier, keys *keySetSource, jwks []byte, reg prometheus.Registerer, log *slog.Logger) *jwtSecrets {
	failures := newJWTMetrics(reg, v)
	if cfg.JWTSecretFile == "" && cfg.JWTSecretPreviousFile == "" && keys == nil {
		return nil
	}
	return &jwtSecrets{currentFile: cfg.JWTSecretFile, previousFile: cfg.JWTSecretPreviousFile, keys: keys, jwks: jwks,
		verifier: v, log: log, failures: failures, current: []byte(cfg.JWTSecret), previous: []byte(cfg.JWTSecretPrevious)}
}

// Run re-reads the files every jwtReloadEvery until ctx ends.
func (s *jwtSecrets) Run(ctx context.Context) {
	t := time.NewTicker(jwtReloadEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.reload(ctx)
		}
	}
}

// reload reads the files (and the key set's URL when due) once and hands changed keys to
// the verifier.
func (s *jwtSecrets) reload(ctx context.Context) {
	// Both, whatever the other did: a broken secret file must not hold a key set rotation.
	err := errors.Join(s.reloadSecrets(), s.reloadKeySet(ctx))
	if err == nil {
		s.lastErr = ""
		return
	}
	if msg := err.Error(); msg != s.lastErr {
		s.lastErr = msg
		s.failures.Inc()
		s.log.Error("jwt keys not reloaded; keeping the keys read before", "error", msg)
	}
}

// reloadSecrets hands changed HS256 secrets to the verifier.
func (s *jwtSecrets) reloadSecrets() error {
	if s.currentFile == "" && s.previousFile == "" {
		return nil
	}
	current, previous, err := s.read()
	if err != nil || (bytes.Equal(current, s.current) && bytes.Equal(previous, s.previous)) {
		return err
	}
	if err := s.verifier.SetSecrets(current, previous); err != nil {
		return err
	}
	s.current, s.previous = current, previous
	s.log.Info("jwt secrets reloaded", "previous_secret", len(previous) > 0)
	return nil
}

// reloadKeySet hands a changed key set to the verifier.
func (s *jwtSecrets) reloadKeySet(ctx context.Context) error {
	if s.keys == nil {
		return nil
	}
	doc, err := s.keys.load(ctx, time.Now())
	if err != nil || doc == nil || bytes.Equal(doc, s.jwks) {
		return err
	}
	ks, err := auth.ParseKeySet(doc)
	if err != nil {
		return fmt.Errorf("%s: %w", s.keys, err)
	}
	s.verifier.SetKeySet(ks)
	s.jwks = doc
	s.log.Info("jwt key set reloaded", "keys", ks.Len())
	return nil
}

func (s *jwtSecrets) read() (current, previous []byte, err error) {
	current, previous = s.current, s.previous
	if s.currentFile != "" {
		v, err := config.ReadSecretFile(s.currentFile)
		if err != nil {
			return nil, nil, fmt.Errorf("SECKILL_JWT_SECRET_FILE=%s: %w", s.currentFile, err)
		}
		current = []byte(v)
	}
	if s.previousFile != "" {
		v, err := config.ReadSecretFile(s.previousFile)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("SECKILL_JWT_SECRET_PREVIOUS_FILE=%s: %w", s.previousFile, err)
		}
		previous = []byte(v)
	}
	if len(previous) == 0 {
		previous = nil
	}
	return current, previous, nil
}
