package main

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
	"github.com/seckill-pipeline/seckill/pkg/writepath"
)

// The reconciler's Prometheus series, all of them, each registered on the registry main
// creates as it is made (promauto.With), so none can be defined and left unregistered. The
// jobs hold what they update; the series of a session×prize are deleted when it leaves the
// window (keep, track), so ended sessions do not stay on dashboards.

// runnerMetrics count every job run and show the lease (runner.go).
type runnerMetrics struct {
	runs     *prometheus.CounterVec
	duration prometheus.Histogram
	held     prometheus.Gauge
	lastRun  prometheus.Gauge
	fence    prometheus.Gauge
	interval prometheus.Gauge
}

func newRunnerMetrics(reg prometheus.Registerer) runnerMetrics {
	f := promauto.With(reg)
	m := runnerMetrics{
		runs: f.NewCounterVec(prometheus.CounterOpts{Name: "seckill_reconciler_runs_total",
			Help: "Reconciler runs by result (ok, failed, busy: another instance held the lease)."}, []string{"result"}),
		duration: f.NewHistogram(prometheus.HistogramOpts{Name: "seckill_reconciler_run_duration_seconds",
			Help: "Duration of reconciler runs that held the lease.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}),
		held: f.NewGauge(prometheus.GaugeOpts{Name: "seckill_reconciler_lease_held",
			Help: "1 while this instance holds the reconciler lease."}),
		// lease_held is 1 only during a run (milliseconds every interval), so "is anyone
		// reconciling?" is answered by when a run last held the lease: max over instances.
		lastRun: f.NewGauge(prometheus.GaugeOpts{Name: "seckill_reconciler_last_run_timestamp_seconds",
			Help: "Unix time at which this instance's last run that held the lease ended (ok or failed); 0 before its first."}),
		fence: f.NewGauge(prometheus.GaugeOpts{Name: "seckill_reconciler_lease_fence",
			Help: "Fencing number of this instance's last lease acquisition (it grows by one per acquisition by any instance)."}),
		// The alerts on runs measure silence in intervals: exported, they follow the setting.
		interval: f.NewGauge(prometheus.GaugeOpts{Name: "seckill_reconciler_interval_seconds",
			Help: "The scheduler's period between runs (SECKILL_RECONCILE_INTERVAL)."}),
	}
	for _, result := range []string{"ok", "failed", "busy"} {
		m.runs.WithLabelValues(result) // at 0 from the start, so increase() sees the first
	}
	return m
}

// driftMetrics are the drift job's (drift.go).
type driftMetrics struct {
	found     *prometheus.CounterVec
	corrected *prometheus.CounterVec
	drift     *prometheus.GaugeVec
	series    map[seckill.SessionPrize]bool // drift series set by the last run, to drop those out of scope
	// uncorrected counts, per session×prize, the consecutive runs that found drift and
	// left it in place (Redis moved under the compare-and-set, or the run failed first);
	// a series exists only while the count is above 0, so it is bounded by the drifted.
	uncorrected *prometheus.GaugeVec
	streaks     map[seckill.SessionPrize]int
	// Per stock bucket of the prizes with buckets: set by the last run, as drift is per prize.
	bucketDrift  *prometheus.GaugeVec
	bucketRun    map[driftTarget]float64
	bucketSeries map[driftTarget]bool
}

func newDriftMetrics(reg prometheus.Registerer) *driftMetrics {
	f := promauto.With(reg)
	m := &driftMetrics{
		found: f.NewCounterVec(prometheus.CounterOpts{Name: "seckill_reconciler_drift_found_total",
			Help: "Session×prizes whose Redis stock differed from MySQL's, by direction (redis_high, redis_low)."}, []string{"direction"}),
		corrected: f.NewCounterVec(prometheus.CounterOpts{Name: "seckill_reconciler_drift_corrected_total",
			Help: "Drift corrections applied to Redis, by direction."}, []string{"direction"}),
		drift: f.NewGaugeVec(prometheus.GaugeOpts{Name: "seckill_reconciler_drift",
			Help: "Redis left minus expected left, per session×prize in scope (open or ended within the key grace), at the last check."},
			[]string{"session_id", "prize_id"}),
		series: map[seckill.SessionPrize]bool{},
		uncorrected: f.NewGaugeVec(prometheus.GaugeOpts{Name: "seckill_reconciler_drift_uncorrected_runs",
			Help: "Consecutive reconciler runs that found this session×prize's Redis stock drifted and did not correct it; absent when 0."},
			[]string{"session_id", "prize_id"}),
		streaks: map[seckill.SessionPrize]int{},
		bucketDrift: f.NewGaugeVec(prometheus.GaugeOpts{Name: "seckill_reconciler_bucket_drift",
			Help: "Redis left minus expected left, per stock bucket of a prize with buckets in scope, at the last check (seckill_reconciler_drift is their sum)."},
			[]string{"session_id", "prize_id", "bucket"}),
		bucketRun:    map[driftTarget]float64{},
		bucketSeries: map[driftTarget]bool{},
	}
	return m
}

// bucket records one stock bucket's drift for this run's keep (a prize without buckets has
// only its prize series).
func (m *driftMetrics) bucket(t driftTarget, v float64) {
	if t.bucket >= 0 {
		m.bucketRun[t] = v
	}
}

// keep sets the drift series of the session×prizes checked this run and deletes the
// others, so ended sessions do not stay on dashboards forever (bounded cardinality).
func (m *driftMetrics) keep(values map[seckill.SessionPrize]float64) {
	for k := range m.series {
		if _, ok := values[k]; !ok {
			m.drift.DeleteLabelValues(labels(k)...)
			delete(m.series, k)
		}
	}
	for k, v := range values {
		m.drift.WithLabelValues(labels(k)...).Set(v)
		m.series[k] = true
	}
	for t := range m.bucketSeries {
		if _, ok := m.bucketRun[t]; !ok {
			m.bucketDrift.DeleteLabelValues(bucketLabels(t)...)
			delete(m.bucketSeries, t)
		}
	}
	for t, v := range m.bucketRun {
		m.bucketDrift.WithLabelValues(bucketLabels(t)...).Set(v)
		m.bucketSeries[t] = true
	}
	m.bucketRun = map[driftTarget]float64{}
}

func bucketLabels(t driftTarget) []string {
	return labels(seckill.SessionPrize{Session: t.sid, Prize: t.pid}, strconv.Itoa(t.bucket))
}

// track updates the uncorrected-run counts: left[k] is true when this run found k drifted
// and did not correct it, false when k was checked and is right (or was corrected). A
// session×prize not checked this run (events in flight, not loaded) keeps its count; one
// out of scope loses it.
func (m *driftMetrics) track(inScope map[seckill.SessionPrize]bool, left map[seckill.SessionPrize]bool) {
	for k, drifted := range left {
		if drifted {
			m.streaks[k]++
		} else {
			delete(m.streaks, k)
		}
	}
	for k := range m.streaks {
		if !inScope[k] {
			delete(m.streaks, k)
		}
	}
	m.uncorrected.Reset()
	for k, n := range m.streaks {
		m.uncorrected.WithLabelValues(labels(k)...).Set(float64(n))
	}
}

// stockMetrics are the stock gauges every instance samples (stockgauges.go).
type stockMetrics struct {
	left    *prometheus.GaugeVec // session_id, prize_id, source
	total   *prometheus.GaugeVec
	sold    *prometheus.GaugeVec
	pending *prometheus.GaugeVec
	series  map[seckill.SessionPrize]bool // session×prizes exported by the last sample
	redis   map[seckill.SessionPrize]bool // ... of which Redis had the keys
}

func newStockMetrics(reg prometheus.Registerer) *stockMetrics {
	f := promauto.With(reg)
	names := []string{"session_id", "prize_id"}
	m := &stockMetrics{
		left: f.NewGaugeVec(prometheus.GaugeOpts{Name: "seckill_reconciler_stock_left",
			Help: "Stock left per session×prize as each source sees it (source=mysql: left_stock; source=redis: the admission gate's left, absent while not loaded). Redis runs ahead of MySQL by the reservations pending."},
			append(names, "source")),
		total: f.NewGaugeVec(prometheus.GaugeOpts{Name: "seckill_reconciler_stock_units",
			Help: "Stock offered per session×prize (MySQL)."}, names),
		sold: f.NewGaugeVec(prometheus.GaugeOpts{Name: "seckill_reconciler_stock_sold",
			Help: "Stock sold per session×prize: MySQL total minus left_stock (the succeeded orders)."}, names),
		pending: f.NewGaugeVec(prometheus.GaugeOpts{Name: "seckill_reconciler_reservations_pending",
			Help: "Reservations admitted in Redis whose order outcome is not settled yet, per session×prize."}, names),
		series: map[seckill.SessionPrize]bool{},
		redis:  map[seckill.SessionPrize]bool{},
	}
	return m
}

// keep deletes the series of session×prizes no longer in the window (and Redis's of those
// whose keys are gone), so ended sessions leave the dashboards.
func (m *stockMetrics) keep(seen, loaded map[seckill.SessionPrize]bool) {
	for k := range m.series {
		if !seen[k] {
			m.left.DeleteLabelValues(labels(k, "mysql")...)
			m.total.DeleteLabelValues(labels(k)...)
			m.sold.DeleteLabelValues(labels(k)...)
			m.pending.DeleteLabelValues(labels(k)...)
		}
	}
	for k := range m.redis {
		if !loaded[k] {
			m.left.DeleteLabelValues(labels(k, "redis")...)
		}
	}
	m.series, m.redis = seen, loaded
}

func (m *stockMetrics) clear() { m.keep(nil, nil) }

// labels are a session×prize's label values (session_id, prize_id), then more.
func labels(k seckill.SessionPrize, more ...string) []string {
	return append([]string{strconv.FormatInt(k.Session, 10), strconv.FormatInt(k.Prize, 10)}, more...)
}

// newStaleMetrics are the stale-reservation job's (stale.go).
func newStaleMetrics(reg prometheus.Registerer) (republished, settled prometheus.Counter) {
	f := promauto.With(reg)
	republished = f.NewCounter(prometheus.CounterOpts{Name: "seckill_reconciler_stale_republished_total",
		Help: "Stale reservations re-published to the grab topic."})
	settled = f.NewCounter(prometheus.CounterOpts{Name: "seckill_reconciler_stale_settled_total",
		Help: "Reservations whose order existed, settled in Redis by the reconciler."})
	return republished, settled
}

// newRebuiltCounter is the rebuild job's (rebuild.go).
func newRebuiltCounter(reg prometheus.Registerer) prometheus.Counter {
	return promauto.With(reg).NewCounter(prometheus.CounterOpts{Name: "seckill_reconciler_keys_rebuilt_total",
		Help: "Session×prize keys rebuilt in Redis from MySQL after a loss."})
}

// compensationMetrics are the compensation replay's (compensation.go).
type compensationMetrics struct {
	replayed     *prometheus.CounterVec
	backlog      prometheus.Gauge
	admitToOrder *prometheus.HistogramVec // path: compensation or workbench
}

func newCompensationMetrics(reg prometheus.Registerer) compensationMetrics {
	f := promauto.With(reg)
	m := compensationMetrics{
		replayed: f.NewCounterVec(prometheus.CounterOpts{Name: "seckill_reconciler_compensation_replayed_total",
			Help: "Compensation events replayed, by result (succeeded, rejected, existing)."}, []string{"result"}),
		backlog: f.NewGauge(prometheus.GaugeOpts{Name: "seckill_reconciler_compensation_backlog",
			Help: "Compensation events not replayed yet."}),
		admitToOrder: writepath.NewAdmissionToOrder(reg),
	}
	m.admitToOrder.WithLabelValues(writepath.PathCompensation)
	m.admitToOrder.WithLabelValues(writepath.PathWorkbench)
	return m
}

// paymentMetrics are the payment-timeout job's (payment.go).
type paymentMetrics struct {
	cancelled prometheus.Counter
	deferred  *prometheus.CounterVec
	swept     *prometheus.CounterVec
}

func newPaymentMetrics(reg prometheus.Registerer) *paymentMetrics {
	f := promauto.With(reg)
	m := &paymentMetrics{
		cancelled: f.NewCounter(prometheus.CounterOpts{Name: "seckill_reconciler_payment_timeouts_total",
			Help: "Orders cancelled by the reconciler because they were not paid within their activity's payment timeout."}),
		deferred: f.NewCounterVec(prometheus.CounterOpts{Name: "seckill_reconciler_payment_timeouts_deferred_total",
			Help: "Unpaid orders a run did not time out because evidence may be unread, by reason: feedback_behind (unread reports on the order's feedback partition), relay_behind (order.created not published, counted from created_at). Each run counts them again while they wait."},
			[]string{"reason"}),
		swept: f.NewCounterVec(prometheus.CounterOpts{Name: "seckill_reconciler_returns_swept_total",
			Help: "Cancellations whose Redis step the reconciler completed, by result (returned, already, marked, expired)."}, []string{"result"}),
	}
	for _, r := range []string{"returned", "already", "marked", "expired"} {
		m.swept.WithLabelValues(r)
	}
	for _, r := range []string{deferFeedbackBehind, deferRelayBehind} {
		m.deferred.WithLabelValues(r)
	}
	return m
}

// newOpenCasesMetric is the open exception cases gauge every instance samples (exceptions.go).
func newOpenCasesMetric(reg prometheus.Registerer) *prometheus.GaugeVec {
	return promauto.With(reg).NewGaugeVec(prometheus.GaugeOpts{Name: "seckill_exceptions_open",
		Help: "Open exception cases on the workbench (MySQL exception_cases), by kind."}, []string{"kind"})
}

// newDeadLettersCounter counts what the reconciler's jobs dead-letter (main.go wires it).
func newDeadLettersCounter(reg prometheus.Registerer) prometheus.Counter {
	return promauto.With(reg).NewCounter(prometheus.CounterOpts{Name: "seckill_reconciler_dead_letters_total",
		Help: "Events the reconciler sent to the dead-letter topic (undecodable, or no such stock row)."})
}

// replicaMetrics are the MySQL replica gauges every instance samples (replica.go).
type replicaMetrics struct {
	lag, running, semiSync prometheus.Gauge
}

func newReplicaMetrics(reg prometheus.Registerer) replicaMetrics {
	f := promauto.With(reg)
	return replicaMetrics{
		lag: f.NewGauge(prometheus.GaugeOpts{Name: "seckill_mysql_replica_lag_seconds",
			Help: "Seconds_Behind_Master of the replica SECKILL_MYSQL_REPLICA_DSN names; -1 while it cannot say (a replication thread stopped, or not a replica)."}),
		running: f.NewGauge(prometheus.GaugeOpts{Name: "seckill_mysql_replica_running",
			Help: "1 while that replica's I/O and SQL threads both run, else 0 (stopped, broken, or the server is not a replica: after a failover it may be the primary)."}),
		semiSync: f.NewGauge(prometheus.GaugeOpts{Name: "seckill_mysql_semi_sync_active",
			Help: "1 while the writer waits for a replica's acknowledgement before a commit returns (Rpl_semi_sync_master_status ON); 0 after rpl_semi_sync_master_timeout made it asynchronous."}),
	}
}

// serverMetrics are the servers' health as every instance sees it (servers.go).
type serverMetrics struct {
	mysqlUp         prometheus.Gauge
	mysqlReadOnly   prometheus.Gauge
	kafkaUp         prometheus.Gauge
	brokersDown     prometheus.Gauge
	underReplicated *prometheus.GaugeVec // topic
	belowMinISR     *prometheus.GaugeVec // topic
}

func newServerMetrics(reg prometheus.Registerer) *serverMetrics {
	f := promauto.With(reg)
	m := &serverMetrics{
		mysqlUp: f.NewGauge(prometheus.GaugeOpts{Name: "seckill_reconciler_mysql_up",
			Help: "1 when MySQL answered this instance's last probe, 0 when it did not."}),
		mysqlReadOnly: f.NewGauge(prometheus.GaugeOpts{Name: "seckill_reconciler_mysql_read_only",
			Help: "1 when MySQL runs read-only (@@global.read_only: writes fail with error 1290), 0 when it takes writes; NaN when unreadable."}),
		kafkaUp: f.NewGauge(prometheus.GaugeOpts{Name: "seckill_reconciler_kafka_up",
			Help: "1 when a Kafka broker answered this instance's last metadata request, 0 when none did."}),
		brokersDown: f.NewGauge(prometheus.GaugeOpts{Name: "seckill_reconciler_kafka_brokers_down",
			Help: "Brokers holding replicas of the pipeline's partitions that the cluster does not list as alive; NaN when Kafka is unreachable."}),
		underReplicated: f.NewGaugeVec(prometheus.GaugeOpts{Name: "seckill_reconciler_kafka_partitions_under_replicated",
			Help: "Partitions of the topic with fewer in-sync replicas than replicas; absent when unreadable."}, []string{"topic"}),
		belowMinISR: f.NewGaugeVec(prometheus.GaugeOpts{Name: "seckill_reconciler_kafka_partitions_below_min_isr",
			Help: "Partitions of the topic that refuse acks=all writes: fewer in-sync replicas than min.insync.replicas, or no leader; absent when unreadable."}, []string{"topic"}),
	}
	return m
}

// rebalanceMetrics are the stock buckets' rebalance loop's and transfers' (rebalanceloop.go,
// transfer.go). A nil *rebalanceMetrics counts nothing (the tests' executors).
type rebalanceMetrics struct {
	rounds    *prometheus.CounterVec // result: ok, failed, busy
	transfers *prometheus.CounterVec // result: done, cancelled, failed
	units     prometheus.Counter
	wanted    prometheus.Gauge
}

func newRebalanceMetrics(reg prometheus.Registerer) *rebalanceMetrics {
	f := promauto.With(reg)
	m := &rebalanceMetrics{
		rounds: f.NewCounterVec(prometheus.CounterOpts{Name: "seckill_reconciler_rebalance_rounds_total",
			Help: "Rebalance rounds over the prizes with stock buckets of open sessions, by result (ok, failed, busy: another instance held the lease)."}, []string{"result"}),
		transfers: f.NewCounterVec(prometheus.CounterOpts{Name: "seckill_reconciler_bucket_transfers_total",
			Help: "Transfers of units between stock buckets this instance ended, by result (done; cancelled: the source was not loaded; failed: stopped by an error, the journal resumes it)."}, []string{"result"}),
		units: f.NewCounter(prometheus.CounterOpts{Name: "seckill_reconciler_bucket_units_moved_total",
			Help: "Units moved between stock buckets by the transfers this instance finished (MySQL's moved units)."}),
		wanted: f.NewGauge(prometheus.GaugeOpts{Name: "seckill_reconciler_buckets_wanted",
			Help: "Stock buckets a gateway flagged wanted (dry while units remained elsewhere) at this instance's last rebalance round."}),
	}
	for _, r := range []string{"ok", "failed", "busy"} {
		m.rounds.WithLabelValues(r)
	}
	for _, r := range []string{"done", "cancelled", "failed"} {
		m.transfers.WithLabelValues(r)
	}
	return m
}

func (m *rebalanceMetrics) round(result string) {
	if m != nil {
		m.rounds.WithLabelValues(result).Inc()
	}
}

func (m *rebalanceMetrics) ended(t store.Transfer) {
	if m == nil {
		return
	}
	m.transfers.WithLabelValues(t.State).Inc()
	if t.State == store.TransferDone {
		m.units.Add(float64(t.Units))
	}
}

func (m *rebalanceMetrics) failed() {
	if m != nil {
		m.transfers.WithLabelValues("failed").Inc()
	}
}

func (m *rebalanceMetrics) setWanted(n int64) {
	if m != nil {
		m.wanted.Set(float64(n))
	}
}
