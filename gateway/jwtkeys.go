package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-pipeline/seckill/pkg/auth"
	"github.com/seckill-pipeline/seckill/pkg/config"
)

// jwtReloadEvery is how often the JWT secret files are read again. Kubernetes rewrites a
// mounted Secret within about a minute of its change (the kubelet's sync period plus its
// cache); reading two small files a second adds nothing to that and costs nothing.
const jwtReloadEvery = time.Second

// jwtSecrets keeps the verifier's secrets in step with their files
// (SECKILL_JWT_SECRET_FILE, SECKILL_JWT_SECRET_PREVIOUS_FILE), so a rotation needs no
// restart: the operator writes the old secret as the previous one and the new one as the
// current one (one Secret update), and takes the previous one away after the overlap. A
// secret given in the environment stays as it is. A current file that cannot be read or is
// too short keeps the last good secrets (logged and counted once per change of the problem);
// a previous file that is absent or empty means no previous secret.
type jwtSecrets struct {
	currentFile, previousFile string
	verifier                  *auth.Verifier
	log                       *slog.Logger
	failures                  prometheus.Counter

	current, previous []byte // the values in force
	lastErr           string
}

// newJWTSecrets returns the reloader of cfg's secret files (nil when neither is a file) and
// registers the rotation's metrics.
func newJWTSecrets(cfg config.Gateway, v *auth.Verifier, reg prometheus.Registerer, log *slog.Logger) *jwtSecrets {
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "seckill_gateway_jwt_previous_verified_total",
			Help: "User tokens verified with the previous JWT secret (a rotation's overlap); once it stops rising the previous secret can go."},
			func() float64 { return float64(v.PreviousVerified()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "seckill_gateway_jwt_previous_secret",
			Help: "1 while a previous JWT secret is accepted (SECKILL_JWT_SECRET_PREVIOUS), else 0."},
			func() float64 {
				if v.HasPrevious() {
					return 1
				}
				return 0
			}))
	failures := prometheus.NewCounter(prometheus.CounterOpts{Name: "seckill_gateway_secret_reload_errors_total",
		Help: "Re-reads of the JWT secret files that failed (the secrets read before stay in force)."})
	reg.MustRegister(failures)
	if cfg.JWTSecretFile == "" && cfg.JWTSecretPreviousFile == "" {
		return nil
	}
	return &jwtSecrets{currentFile: cfg.JWTSecretFile, previousFile: cfg.JWTSecretPreviousFile, verifier: v, log: log,
		failures: failures, current: []byte(cfg.JWTSecret), previous: []byte(cfg.JWTSecretPrevious)}
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

// reload reads the files once and hands changed secrets to the verifier.
func (s *jwtSecrets) reload() {
	current, previous, err := s.read()
	if err == nil && (!bytes.Equal(current, s.current) || !bytes.Equal(previous, s.previous)) {
		if err = s.verifier.SetSecrets(current, previous); err == nil {
			s.current, s.previous = current, previous
			s.lastErr = ""
			s.log.Info("jwt secrets reloaded", "previous_secret", len(previous) > 0)
			return
		}
	}
	if err == nil {
		s.lastErr = ""
		return
	}
	if msg := err.Error(); msg != s.lastErr {
		s.lastErr = msg
		s.failures.Inc()
		s.log.Error("jwt secrets not reloaded; keeping the secrets read before", "error", msg)
	}
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
