package main

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/seckill-pipeline/seckill/gateway/clientip"
	"github.com/seckill-pipeline/seckill/gateway/jsonapi"
	"github.com/seckill-pipeline/seckill/gateway/ratelimit"
	"github.com/seckill-pipeline/seckill/pkg/ops"
)

// readiness serves the public /readyz. It is cheap: one round of dependency checks serves
// every probe for ttl, concurrent probes share the round in progress, and each client IP is
// rate limited, so a probe flood never becomes a flood of Redis pings and Kafka metadata
// requests. It says only ready or not: the checks' error text (addresses, driver messages)
// goes to the log, and the admin listener's /readyz shows it per dependency.
type readiness struct {
	checks  map[string]ops.Check
	ttl     time.Duration
	timeout time.Duration // for one round of checks
	limit   *ratelimit.Keyed
	clients *clientip.Proxies // whose address the limit is keyed by
	now     func() time.Time
	log     *slog.Logger

	mu        sync.Mutex // held during a round, so concurrent probes wait for its result
	checkedAt time.Time
	checked   bool
	failing   []string // names of the failing checks, sorted; empty when ready
}

func newReadiness(checks map[string]ops.Check, limit *ratelimit.Keyed, clients *clientip.Proxies, now func() time.Time, log *slog.Logger) *readiness {
	return &readiness{checks: checks, ttl: time.Second, timeout: 2 * time.Second, limit: limit, clients: clients, now: now, log: log}
}

func (rd *readiness) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if ok, wait := rd.limit.Allow(clientip.Bucket(rd.clients.Of(r))); !ok {
		ratelimit.TooMany(w, wait)
		return
	}
	if !rd.ready(r.Context()) {
		w.Header().Set("Retry-After", "1")
		jsonapi.WriteError(w, http.StatusServiceUnavailable, "not_ready", "not ready to serve grabs; retry shortly")
		return
	}
	jsonapi.Write(w, http.StatusOK, map[string]string{"status": "ready"})
}

// ready returns the last result if it is younger than ttl, else runs every check once.
func (rd *readiness) ready(ctx context.Context) bool {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if rd.checked && rd.now().Sub(rd.checkedAt) < rd.ttl {
		return len(rd.failing) == 0
	}
	// The result is shared, so the probe that happens to run the round must not cut it short
	// by going away. The checks run side by side, so a hung dependency neither eats the
	// others' time nor gets them reported as failing.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rd.timeout)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	var failing []string
	reasons := map[string]string{}
	for name, check := range rd.checks {
		wg.Go(func() {
			if err := check(cctx); err != nil {
				mu.Lock()
				failing = append(failing, name)
				reasons[name] = err.Error()
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(failing)
	// Log changes only: a dependency down for minutes is one line, not one per probe.
	switch {
	case len(failing) > 0 && !slices.Equal(failing, rd.failing):
		rd.log.Warn("not ready", "failing", failing, "reasons", reasons)
	case len(failing) == 0 && len(rd.failing) > 0:
		rd.log.Info("ready again")
	}
	rd.failing, rd.checked, rd.checkedAt = failing, true, rd.now()
	return len(failing) == 0
}
