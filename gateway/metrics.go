package main

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/seckill-pipeline/seckill/pkg/auth"
)

// metrics are the gateway's Prometheus series, all of them, registered on the registry main
// creates as they are made (promauto.With), so none can be defined and left unregistered.
type metrics struct {
	grabs          *prometheus.CounterVec
	responses      *prometheus.CounterVec
	latency        *prometheus.HistogramVec
	redis          *prometheus.HistogramVec
	redisErrors    *prometheus.CounterVec
	produce        prometheus.Histogram
	produceErrors  prometheus.Counter
	relayPending   prometheus.Gauge
	relayed        prometheus.Counter
	relayDropped   prometheus.Counter
	soldOutHits    prometheus.Counter
	inflight       prometheus.Gauge
	scheduleErrors prometheus.Counter
	scheduleLoaded prometheus.Gauge
	caseActions    *prometheus.CounterVec
	replicaWaits   *prometheus.CounterVec
	// adminAuthFailures counts the admin listener's refused credentials by reason.
	adminAuthFailures *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	fast := []float64{.0002, .0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5}
	m := &metrics{
		grabs: f.NewCounterVec(prometheus.CounterOpts{Name: "seckill_gateway_grabs_total",
			Help: "Grab requests by outcome."}, []string{"outcome"}),
		// Status codes are a small fixed set (the public API's contract), so route×code is
		// bounded: the 5xx share is the gateway's error rate.
		responses: f.NewCounterVec(prometheus.CounterOpts{Name: "seckill_gateway_responses_total",
			Help: "Public API responses by route (grab, status) and HTTP status code."}, []string{"route", "code"}),
		latency: f.NewHistogramVec(prometheus.HistogramOpts{Name: "seckill_gateway_request_duration_seconds",
			Help: "Grab and status request latency by route.", Buckets: fast}, []string{"route"}),
		redis: f.NewHistogramVec(prometheus.HistogramOpts{Name: "seckill_gateway_redis_duration_seconds",
			Help: "Redis call latency by operation.", Buckets: fast}, []string{"op"}),
		redisErrors: f.NewCounterVec(prometheus.CounterOpts{Name: "seckill_gateway_redis_errors_total",
			Help: "Redis call errors by operation."}, []string{"op"}),
		produce: f.NewHistogram(prometheus.HistogramOpts{Name: "seckill_gateway_kafka_produce_duration_seconds",
			Help: "Time until Kafka acknowledged a grab event (acks=all).", Buckets: fast}),
		produceErrors: f.NewCounter(prometheus.CounterOpts{Name: "seckill_gateway_kafka_produce_errors_total",
			Help: "Grab events Kafka did not acknowledge in time (handed to the relay)."}),
		relayPending: f.NewGauge(prometheus.GaugeOpts{Name: "seckill_gateway_relay_pending",
			Help: "Grab events waiting in the gateway's relay for Kafka."}),
		relayed: f.NewCounter(prometheus.CounterOpts{Name: "seckill_gateway_relay_published_total",
			Help: "Grab events the relay published after the first attempt failed."}),
		relayDropped: f.NewCounter(prometheus.CounterOpts{Name: "seckill_gateway_relay_dropped_total",
			Help: "Grab events the relay could not hold (queue full or shutdown); the reconciler re-publishes their reservations."}),
		soldOutHits: f.NewCounter(prometheus.CounterOpts{Name: "seckill_gateway_soldout_flag_hits_total",
			Help: "Grabs answered sold out from the local flag without Redis."}),
		inflight: f.NewGauge(prometheus.GaugeOpts{Name: "seckill_gateway_inflight_requests",
			Help: "Grab and status requests being served."}),
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
		replicaWaits: f.NewCounterVec(prometheus.CounterOpts{Name: "seckill_gateway_replica_waits_total",
			Help: "Waits for a Redis replica to hold a reservation after a failed produce, by result (confirmed: 202; timeout, gone, error: 503)."},
			[]string{"result"}),
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
