// Package ops serves the operational endpoints every deployable exposes (/healthz, /readyz,
// /metrics) and runs HTTP servers with a graceful shutdown.
package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check reports whether one dependency is usable; nil means ready.
type Check func(ctx context.Context) error

// Register mounts /healthz (the process is alive), /readyz (every check passes) and, when
// reg is not nil, /metrics (the given registry) on mux.
func Register(mux *http.ServeMux, reg *prometheus.Registry, checks map[string]Check) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		status, code := map[string]string{}, http.StatusOK
		for name, check := range checks {
			if err := check(ctx); err != nil {
				status[name] = err.Error()
				code = http.StatusServiceUnavailable
				continue
			}
			status[name] = "ok"
		}
		writeJSON(w, code, status)
	})
	if reg != nil {
		// OpenMetrics for a scraper that asks for it (Prometheus does when its exemplar
		// storage is on): the only format that carries exemplars, the trace ids of
		// tracing.Observe; the text format for every other scraper.
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true}))
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// NewServer returns an http.Server with timeouts set, so a slow or idle client cannot hold
// a connection forever.
func NewServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    16 << 10,
	}
}

// Serve listens on srv.Addr and serves until ctx ends, then shuts down gracefully within
// timeout (in-flight requests finish; new ones are refused). The listener is bound before
// Serve returns control, so a bind error is reported at once.
func Serve(ctx context.Context, srv *http.Server, timeout time.Duration) error {
	ln, err := net.Listen("tcp", srv.Addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", srv.Addr, err)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", srv.Addr, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown %s: %w", srv.Addr, err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve %s: %w", srv.Addr, err)
	}
	return nil
}
