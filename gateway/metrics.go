package main

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/seckill-pipeline/seckill/pkg/auth"
)

// metrics are the series of what main wires beside the grab path (gateway/grab registers its
// own): the schedule cache's reloads, the workbench's case actions and the admin listener's
// refused credentials, registered on the registry main creates as they are made
// (promauto.With).
type metrics struct {
	scheduleErrors prometheus.Counter
	scheduleLoaded prometheus.Gauge
	caseActions    *prometheus.CounterVec
	// adminAuthFailures counts the admin listener's refused credentials by reason.
	adminAuthFailures *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	m := &metrics{
		scheduleErrors: f.NewCounter(prometheus.CounterOpts{Name: "seckill_gateway_schedule_reload_errors_total",
			Help: "Failed reloads of the session schedule cache (the last good copy keeps serving)."}),
		// A reload that hangs fails nothing and counts no error: only the time of the last
		// good reload shows a schedule that stopped moving (new sessions then answer 409).
		scheduleLoaded: f.NewGauge(prometheus.GaugeOpts{Name: "seckill_gateway_schedule_loaded_timestamp_seconds",
			Help: "Unix time of the last successful reload of the session schedule cache."}),
		caseActions: f.NewCounterVec(prometheus.CounterOpts{Name: "seckill_exception_actions_total",
			Help: "Operator actions on exception cases, by action (replay, resolve, dismiss), kind and result (done, refused)."},
			[]string{"action", "kind", "result"}),
		adminAuthFailures: f.NewCounterVec(prometheus.CounterOpts{Name: "seckill_gateway_admin_auth_failures_total",
			Help: "Admin listener requests refused for their credential, by reason: missing, invalid_token, forbidden (the role does not allow the route), throttled (too many invalid tokens from the client)."},
			[]string{"reason"}),
	}
	// Every reason from the start, so a rate over the first failures is not lost to a
	// series that appeared with them.
	for _, reason := range []string{"missing", "invalid_token", "forbidden", "throttled"} {
		m.adminAuthFailures.WithLabelValues(reason)
	}
	return m
}

// newJWTMetrics registers the JWT secret rotation's series (jwtkeys.go): two read from v at
// each scrape, and the reload failures counter it returns.
func newJWTMetrics(reg prometheus.Registerer, v *auth.Verifier) prometheus.Counter {
	f := promauto.With(reg)
	f.NewCounterFunc(prometheus.CounterOpts{Name: "seckill_gateway_jwt_previous_verified_total",
		Help: "User tokens verified with the previous JWT secret (a rotation's overlap); once it stops rising the previous secret can go."},
		func() float64 { return float64(v.PreviousVerified()) })
	f.NewGaugeFunc(prometheus.GaugeOpts{Name: "seckill_gateway_jwt_previous_secret",
		Help: "1 while a previous JWT secret is accepted (SECKILL_JWT_SECRET_PREVIOUS), else 0."},
		func() float64 {
			if v.HasPrevious() {
				return 1
			}
			return 0
		})
	return f.NewCounter(prometheus.CounterOpts{Name: "seckill_gateway_secret_reload_errors_total",
		Help: "Re-reads of the JWT secret or key set files that failed (the keys read before stay in force)."})
}
