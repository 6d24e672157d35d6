package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/writepath"
)

// metrics are the consumer's Prometheus series.
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
	recovered     prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "seckill_consumer_batch_size",
			Help: "Grab events per session×prize transaction.", Buckets: prometheus.ExponentialBuckets(1, 2, 12)}),
		txLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "seckill_consumer_tx_duration_seconds",
			Help: "Duration of one persistence transaction.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{Name: "seckill_consumer_conflicts_total",
			Help: "Optimistic-lock conflicts, deadlocks and lock wait timeouts."}),
		// The conflict rate is conflicts_total / transactions_total: both count attempts,
		// so a batch retried three times is three transactions.
		transactions: prometheus.NewCounter(prometheus.CounterOpts{Name: "seckill_consumer_transactions_total",
			Help: "Persistence transactions attempted (each retry is one more); the denominator of the conflict rate."}),
		// From the gateway's admission (the event's admitted_at) to the commit of the order,
		// across Kafka, batching and retries: what a user waits before a poll says succeeded.
		admitToOrder: writepath.NewAdmissionToOrder(),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "seckill_consumer_retries_total",
			Help: "Persistence retries by tier (retry_now, retry_later, wait_for_db)."}, []string{"tier"}),
		compensated: prometheus.NewCounter(prometheus.CounterOpts{Name: "seckill_consumer_compensated_total",
			Help: "Grab events sent to the compensation topic after retries ran out."}),
		deadLetters: prometheus.NewCounter(prometheus.CounterOpts{Name: "seckill_consumer_dead_letters_total",
			Help: "Messages sent to the dead-letter topic."}),
		orders: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "seckill_consumer_orders_total",
			Help: "Orders written, by status and reason (rejected by the DB after Redis admitted: a drift signal)."},
			[]string{"status", "reason"}),
		redeliveries: prometheus.NewCounter(prometheus.CounterOpts{Name: "seckill_consumer_redelivered_total",
			Help: "Grab events that already had an order (redelivery after a crash or rebalance)."}),
		mismatched: prometheus.NewCounter(prometheus.CounterOpts{Name: "seckill_consumer_mismatched_redeliveries_total",
			Help: "Grab events whose request id already has an order of another user (forged or corrupted); settled under the order's owner."}),
		settleErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "seckill_consumer_settle_errors_total",
			Help: "Batches whose outcomes could not be written to Redis (the reconciler settles them)."}),
		// Both gauges are read from the servers by every instance (sampler), so they stay
		// true when processing stalls and whichever instance is scraped; they are the group's
		// and the database's values, the same on every instance: aggregate with max, not sum.
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "seckill_consumer_lag",
			Help: "The group's uncommitted messages per grab partition (end offset - committed offset), read from the broker periodically; absent when the broker could not be read."},
			[]string{"partition"}),
		outboxPending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "seckill_consumer_outbox_pending",
			Help: "Order events written to MySQL but not yet published, counted in MySQL periodically by every instance; NaN when MySQL could not be read."}),
		published: prometheus.NewCounter(prometheus.CounterOpts{Name: "seckill_consumer_order_events_published_total",
			Help: "Order events published to the order topic."}),
		recovered: prometheus.NewCounter(prometheus.CounterOpts{Name: "seckill_consumer_order_events_recovered_total",
			Help: "Order events found already on the topic after a crash or an ambiguous produce error, marked instead of re-published."}),
	}
	// Outcomes exported at 0 from the start: increase() cannot see a series' first
	// increment, so the first sold_out rejection (an alert) would go unnoticed.
	m.orders.WithLabelValues(string(seckill.OrderSucceeded), "")
	m.orders.WithLabelValues(string(seckill.OrderRejected), string(seckill.ReasonSoldOut))
	m.orders.WithLabelValues(string(seckill.OrderRejected), string(seckill.ReasonLimit))
	m.admitToOrder.WithLabelValues(writepath.PathGrab)
	m.admitToOrder.WithLabelValues(writepath.PathWorkbench)
	reg.MustRegister(m.batchSize, m.txLatency, m.conflicts, m.transactions, m.admitToOrder, m.retries, m.compensated, m.deadLetters, m.orders,
		m.redeliveries, m.mismatched, m.settleErrors, m.lag, m.outboxPending, m.published, m.recovered)
	return m
}
