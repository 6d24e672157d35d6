package main

import "github.com/prometheus/client_golang/prometheus"

// metrics are the gateway's Prometheus series, registered on the registry main creates.
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
}

func newMetrics(reg prometheus.Registerer) *metrics {
	fast := []float64{.0002, .0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5}
	m := &metrics{
		grabs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "seckill_gateway_grabs_total",
			Help: "Grab requests by outcome."}, []string{"outcome"}),
		// Status codes are a small fixed set (the public API's contract), so route×code is
		// bounded: the 5xx share is the gateway's error rate.
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "seckill_gateway_responses_total",
			Help: "Public API responses by route (grab, status) and HTTP status code."}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "seckill_gateway_request_duration_seconds",
			Help: "Grab and status request latency by route.", Buckets: fast}, []string{"route"}),
		redis: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "seckill_gateway_redis_duration_seconds",
			Help: "Redis call latency by operation.", Buckets: fast}, []string{"op"}),
		redisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "seckill_gateway_redis_errors_total",
			Help: "Redis call errors by operation."}, []string{"op"}),
		produce: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "seckill_gateway_kafka_produce_duration_seconds",
			Help: "Time until Kafka acknowledged a grab event (acks=all).", Buckets: fast}),
		produceErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "seckill_gateway_kafka_produce_errors_total",
			Help: "Grab events Kafka did not acknowledge in time (handed to the relay)."}),
		relayPending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "seckill_gateway_relay_pending",
			Help: "Grab events waiting in the gateway's relay for Kafka."}),
		relayed: prometheus.NewCounter(prometheus.CounterOpts{Name: "seckill_gateway_relay_published_total",
			Help: "Grab events the relay published after the first attempt failed."}),
		relayDropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "seckill_gateway_relay_dropped_total",
			Help: "Grab events the relay could not hold (queue full or shutdown); the reconciler re-publishes their reservations."}),
		soldOutHits: prometheus.NewCounter(prometheus.CounterOpts{Name: "seckill_gateway_soldout_flag_hits_total",
			Help: "Grabs answered sold out from the local flag without Redis."}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "seckill_gateway_inflight_requests",
			Help: "Grab and status requests being served."}),
		scheduleErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "seckill_gateway_schedule_reload_errors_total",
			Help: "Failed reloads of the session schedule cache (the last good copy keeps serving)."}),
		// A reload that hangs fails nothing and counts no error: only the time of the last
		// good reload shows a schedule that stopped moving (new sessions then answer 409).
		scheduleLoaded: prometheus.NewGauge(prometheus.GaugeOpts{Name: "seckill_gateway_schedule_loaded_timestamp_seconds",
			Help: "Unix time of the last successful reload of the session schedule cache."}),
		caseActions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "seckill_exception_actions_total",
			Help: "Operator actions on exception cases, by action (replay, resolve, dismiss), kind and result (done, refused)."},
			[]string{"action", "kind", "result"}),
		replicaWaits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "seckill_gateway_replica_waits_total",
			Help: "Waits for a Redis replica to hold a reservation after a failed produce, by result (confirmed: 202; timeout, gone, error: 503)."},
			[]string{"result"}),
	}
	reg.MustRegister(m.grabs, m.responses, m.latency, m.redis, m.redisErrors, m.produce, m.produceErrors, m.relayPending,
		m.relayed, m.relayDropped, m.soldOutHits, m.inflight, m.scheduleErrors, m.scheduleLoaded, m.caseActions, m.replicaWaits)
	return m
}
