package main

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/seckill-pipeline/seckill/pkg/retry"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
	"github.com/seckill-pipeline/seckill/pkg/writepath"
)

// The consumer's Prometheus series, all of them: the grab processor's (metrics) and the
// feedback processor's (feedbackMetrics). Each is registered on the registry main creates as
// it is made (promauto.With), so none can be defined and left unregistered.

// metrics are the grab processor's series.
type metrics struct {
	batchSize     prometheus.Histogram
	txLatency     prometheus.Histogram
	conflicts     prometheus.Counter
	transactions  prometheus.Counter
	admitToOrder  *prometheus.HistogramVec // path: grab or workbench
	retries       *prometheus.CounterVec
	compensated   prometheus.Counter
	deadLetters   prometheus.Counter
	orders        *prometheus.CounterVec
	redeliveries  prometheus.Counter
	mismatched    prometheus.Counter
	settleErrors  prometheus.Counter
	lag           *prometheus.GaugeVec
	outboxPending prometheus.Gauge
	published     prometheus.Counter
	publishTook   prometheus.Histogram
	recovered     prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	m := &metrics{
		batchSize: f.NewHistogram(prometheus.HistogramOpts{Name: "seckill_consumer_batch_size",
			Help: "Grab events per session×prize transaction.", Buckets: prometheus.ExponentialBuckets(1, 2, 12)}),
		txLatency: f.NewHistogram(prometheus.HistogramOpts{Name: "seckill_consumer_tx_duration_seconds",
			Help: "Duration of one persistence transaction.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		conflicts: f.NewCounter(prometheus.CounterOpts{Name: "seckill_consumer_conflicts_total",
			Help: "Optimistic-lock conflicts, deadlocks and lock wait timeouts."}),
		// The conflict rate is conflicts_total / transactions_total: both count attempts,
		// so a batch retried three times is three transactions.
		transactions: f.NewCounter(prometheus.CounterOpts{Name: "seckill_consumer_transactions_total",
			Help: "Persistence transactions attempted (each retry is one more); the denominator of the conflict rate."}),
		// From the gateway's admission (the event's admitted_at) to the commit of the order,
		// across Kafka, batching and retries: what a user waits before a poll says succeeded.
		admitToOrder: writepath.NewAdmissionToOrder(reg),
		retries: f.NewCounterVec(prometheus.CounterOpts{Name: "seckill_consumer_retries_total",
			Help: "Persistence retries by tier (retry_now, retry_later, wait_for_db)."}, []string{"tier"}),
		compensated: f.NewCounter(prometheus.CounterOpts{Name: "seckill_consumer_compensated_total",
			Help: "Grab events sent to the compensation topic after retries ran out."}),
		deadLetters: f.NewCounter(prometheus.CounterOpts{Name: "seckill_consumer_dead_letters_total",
			Help: "Messages sent to the dead-letter topic."}),
		orders: f.NewCounterVec(prometheus.CounterOpts{Name: "seckill_consumer_orders_total",
			Help: "Orders written, by status and reason (rejected by the DB after Redis admitted: a drift signal)."},
			[]string{"status", "reason"}),
		redeliveries: f.NewCounter(prometheus.CounterOpts{Name: "seckill_consumer_redelivered_total",
			Help: "Grab events that already had an order (redelivery after a crash or rebalance)."}),
		mismatched: f.NewCounter(prometheus.CounterOpts{Name: "seckill_consumer_mismatched_redeliveries_total",
			Help: "Grab events whose request id already has an order of another user (forged or corrupted); settled under the order's owner."}),
		settleErrors: f.NewCounter(prometheus.CounterOpts{Name: "seckill_consumer_settle_errors_total",
			Help: "Batches whose outcomes could not be written to Redis (the reconciler settles them)."}),
		// Both gauges are read from the servers by every instance (sampler), so they stay
		// true when processing stalls and whichever instance is scraped; they are the group's
		// and the database's values, the same on every instance: aggregate with max, not sum.
		lag: f.NewGaugeVec(prometheus.GaugeOpts{Name: "seckill_consumer_lag",
			Help: "The group's uncommitted messages per grab partition (end offset - committed offset), read from the broker periodically; absent when the broker could not be read."},
			[]string{"partition"}),
		outboxPending: f.NewGauge(prometheus.GaugeOpts{Name: "seckill_consumer_outbox_pending",
			Help: "Order events written to MySQL but not yet published, counted in MySQL periodically by every instance; NaN when MySQL could not be read."}),
		// The batch path's step after each commit (publish, progress row) runs before the next
		// batch's transaction, so with one hot partition it is part of every batch's time.
		publishTook: f.NewHistogram(prometheus.HistogramOpts{Name: "seckill_consumer_order_events_publish_duration_seconds",
			Help:    "Duration of publishing one committed batch's order events and recording its progress.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		published: f.NewCounter(prometheus.CounterOpts{Name: "seckill_consumer_order_events_published_total",
			Help: "Order events published to the order topic."}),
		recovered: f.NewCounter(prometheus.CounterOpts{Name: "seckill_consumer_order_events_recovered_total",
			Help: "Order events found already on the topic after a crash or an ambiguous produce error, marked instead of re-published."}),
	}
	// Outcomes exported at 0 from the start: increase() cannot see a series' first
	// increment, so the first sold_out rejection (an alert) would go unnoticed.
	m.orders.WithLabelValues(string(seckill.OrderSucceeded), "")
	m.orders.WithLabelValues(string(seckill.OrderRejected), string(seckill.ReasonSoldOut))
	m.orders.WithLabelValues(string(seckill.OrderRejected), string(seckill.ReasonLimit))
	m.admitToOrder.WithLabelValues(writepath.PathGrab)
	m.admitToOrder.WithLabelValues(writepath.PathWorkbench)
	return m
}

// The processor's metrics observe the write path (writepath.Observer).

func (m *metrics) Attempted(took time.Duration) {
	m.transactions.Inc()
	m.txLatency.Observe(took.Seconds())
}

// Persisted records a committed group (its admission → order times are recorded by Process,
// which has the messages that say whose replay each event is).
func (m *metrics) Persisted(_ seckill.SessionPrize, events int, res store.PersistResult, _ time.Time) {
	m.batchSize.Observe(float64(events))
	m.redeliveries.Add(float64(res.Existing))
	for _, o := range res.Outcomes {
		if !o.Before {
			m.orders.WithLabelValues(string(o.Status), string(o.Reason)).Inc()
		}
	}
}

// Failed counts a failed attempt: contention as a conflict, and the retry it leads to.
func (m *metrics) Failed(act retry.Action) {
	switch act {
	case retry.Now, retry.Later:
		m.conflicts.Inc()
		m.retries.WithLabelValues(act.String()).Inc()
	case retry.WaitForDB:
		m.retries.WithLabelValues(act.String()).Inc()
	case retry.Compensate:
		m.conflicts.Inc()
	}
}

func (m *metrics) Mismatched()   { m.mismatched.Inc() }
func (m *metrics) SettleFailed() { m.settleErrors.Inc() }

// feedbackMetrics are the feedback processor's series.
type feedbackMetrics struct {
	reports    *prometheus.CounterVec
	exceptions *prometheus.CounterVec
	returned   *prometheus.CounterVec
	stepErrors prometheus.Counter
}

func newFeedbackMetrics(reg prometheus.Registerer) *feedbackMetrics {
	f := promauto.With(reg)
	m := &feedbackMetrics{
		reports: f.NewCounterVec(prometheus.CounterOpts{Name: "seckill_consumer_feedback_total",
			Help: "Order feedback reports consumed, by kind (paid, cancelled) and result (applied, duplicate, refund, exception)."},
			[]string{"kind", "result"}),
		exceptions: f.NewCounterVec(prometheus.CounterOpts{Name: "seckill_exception_cases_total",
			Help: "Reports recorded as exception cases (MySQL exception_cases), by kind (unknown_order, cancel_after_paid, paid_after_cancel, feedback_for_rejected)."},
			[]string{"kind"}),
		returned: f.NewCounterVec(prometheus.CounterOpts{Name: "seckill_consumer_units_returned_total",
			Help: "Cancelled orders' Redis steps, by result (returned: back on sale; already: done before; marked: outcome only, after the session)."},
			[]string{"result"}),
		stepErrors: f.NewCounter(prometheus.CounterOpts{Name: "seckill_consumer_return_errors_total",
			Help: "Redis returns that failed or found no keys after the cancellation committed (the reconciler's sweep completes them)."}),
	}
	for _, r := range []string{"returned", "already", "marked"} {
		m.returned.WithLabelValues(r)
	}
	return m
}
