package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
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
// (SECKILL_JWT_JWKS_FILE, the production path), the HS256 secrets (development), or both.
// The gateway signs nothing.
func newVerifier(cfg config.Gateway) (*auth.Verifier, error) {
	var ks *auth.KeySet
	if cfg.JWTJWKSFile != "" {
		doc, err := os.ReadFile(cfg.JWTJWKSFile)
		if err != nil {
			return nil, fmt.Errorf("SECKILL_JWT_JWKS_FILE: %w", err)
		}
		if ks, err = auth.ParseKeySet(doc); err != nil {
			return nil, fmt.Errorf("SECKILL_JWT_JWKS_FILE=%s: %w", cfg.JWTJWKSFile, err)
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
		return nil, err
	}
	v.SetMaxLifetime(cfg.JWTMaxLifetime)
	return v, nil
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
	currentFile, previousFile, jwksFile string
	verifier                            *auth.Verifier
	log                                 *slog.Logger
	failures                            prometheus.Counter

	current, previous []byte // the values in force
	jwks              []byte // the key set document in force
	lastErr           string
}

// newJWTSecrets returns the reloader of cfg's key files (nil when none is a file) and
// registers the rotation's metrics. jwks is the key set document the verifier was built
// with (nil: none).
func newJWTSecrets(cfg config.Gateway, v *auth.Verifier, reg prometheus.Registerer, log *slog.Logger) *jwtSecrets {
	failures := newJWTMetrics(reg, v)
	if cfg.JWTSecretFile == "" && cfg.JWTSecretPreviousFile == "" && cfg.JWTJWKSFile == "" {
		return nil
	}
	s := &jwtSecrets{currentFile: cfg.JWTSecretFile, previousFile: cfg.JWTSecretPreviousFile, jwksFile: cfg.JWTJWKSFile,
		verifier: v, log: log, failures: failures, current: []byte(cfg.JWTSecret), previous: []byte(cfg.JWTSecretPrevious)}
	if s.jwksFile != "" {
		s.jwks, _ = os.ReadFile(s.jwksFile) // newVerifier read and parsed it a moment ago
	}
	return s
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
			s.reload()
		}
	}
}

// reload reads the files once and hands changed keys to the verifier.
func (s *jwtSecrets) reload() {
	err := s.reloadSecrets()
	if err == nil {
		err = s.reloadKeySet()
	}
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
func (s *jwtSecrets) reloadKeySet() error {
	if s.jwksFile == "" {
		return nil
	}
	doc, err := os.ReadFile(s.jwksFile)
	if err != nil {
		return fmt.Errorf("SECKILL_JWT_JWKS_FILE: %w", err)
	}
	if bytes.Equal(doc, s.jwks) {
		return nil
	}
	ks, err := auth.ParseKeySet(doc)
	if err != nil {
		return fmt.Errorf("SECKILL_JWT_JWKS_FILE=%s: %w", s.jwksFile, err)
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
