package grab

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/seckill-pipeline/seckill/gateway/admission"
)

// metrics are the grab path's Prometheus series, registered on the registry main creates as
// they are made (promauto.With), so none can be defined and left unregistered.
type metrics struct {
	grabs         *prometheus.CounterVec
	responses     *prometheus.CounterVec
	latency       *prometheus.HistogramVec
	redis         *prometheus.HistogramVec
	redisErrors   *prometheus.CounterVec
	produce       prometheus.Histogram
	produceErrors prometheus.Counter
	relayPending  prometheus.Gauge
	relayed       prometheus.Counter
	relayDropped  prometheus.Counter
	soldOutHits   prometheus.Counter
	inflight      prometheus.Gauge
	replicaWaits  *prometheus.CounterVec

	// The series of the public answers, resolved once: before the open and after the last
	// unit those answers are most of the traffic, and a label lookup per request is a cost
	// answering them first exists to avoid.
	soldOutGrabs prometheus.Counter // grabs{outcome="sold_out"}
	notOpenGrabs prometheus.Counter // grabs{outcome="not_open"}
	// grabs{outcome="overloaded"}: under a crowd above capacity the refusal is the answer
	// most requests get.
	overloadedGrabs prometheus.Counter
	grab409         prometheus.Counter  // responses{route="grab",code="409"}
	grabLatency     prometheus.Observer // latency{route="grab"}
}

func newMetrics(reg prometheus.Registerer, gate *admission.Gate) *metrics {
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
		replicaWaits: f.NewCounterVec(prometheus.CounterOpts{Name: "seckill_gateway_replica_waits_total",
			Help: "Waits for a Redis replica to hold a reservation after a failed produce, by result (confirmed: 202; timeout, gone, error: 503)."},
			[]string{"result"}),
	}
	m.soldOutGrabs = m.grabs.WithLabelValues("sold_out")
	m.notOpenGrabs = m.grabs.WithLabelValues("not_open")
	m.overloadedGrabs = m.grabs.WithLabelValues("overloaded")
	m.grab409 = m.responses.WithLabelValues("grab", "409")
	m.grabLatency = m.latency.WithLabelValues("grab")
	f.NewGaugeFunc(prometheus.GaugeOpts{Name: "seckill_gateway_admission_limit",
		Help: "Grabs the adaptive admission limit lets do their Redis and Kafka work at once now."},
		func() float64 { return float64(gate.Limit()) })
	f.NewGaugeFunc(prometheus.GaugeOpts{Name: "seckill_gateway_admission_inflight",
		Help: "Grabs doing their Redis and Kafka work now (inside the admission limit)."},
		func() float64 { return float64(gate.InFlight()) })
	return m
}
