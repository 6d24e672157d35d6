// Command dashboard generates the seckill Grafana dashboard (deploy/monitoring/dashboard/
// seckill.json) with the Grafana Foundation SDK, so the dashboard is reviewed as code and
// the JSON is never edited by hand:
//
//	go run ./deploy/monitoring/dashboard -o deploy/monitoring/dashboard/seckill.json   (make dashboard)
//	go run ./deploy/monitoring/dashboard -check http://127.0.0.1:19090                (make dashboard-check)
//	go run ./deploy/monitoring/dashboard -check http://127.0.0.1:19091 -crowd 75s -require-data
//	                                                      (make dashboard-check PROFILE=cluster)
//
// -check runs every panel's queries against a Prometheus and fails on any query error,
// listing the queries that returned nothing (a metric that does not exist yet, or a typo).
// -require-data fails on those too, except the few queries marked below as empty on a healthy
// pipeline (each says why). -crowd D first drives a crowd through the running services for D
// (a sale of its own, grabs through the public address, status polls; see crowd.go) and goes
// on while the queries run, so rates and latencies have something to show.
// make lint regenerates the JSON to a temporary file and fails when it differs from the
// checked-in copy.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// checkOptions are the flags of -check.
type checkOptions struct {
	url           string
	requireData   bool
	crowd         time.Duration
	rate          int
	public, admin string
}

func main() {
	out := flag.String("o", "", "write the dashboard JSON to this file (default: standard output)")
	var o checkOptions
	flag.StringVar(&o.url, "check", "", "instead of writing, run every panel query against this Prometheus URL")
	flag.BoolVar(&o.requireData, "require-data", false, "with -check: fail on a query that returns nothing (unless marked as empty when healthy)")
	flag.DurationVar(&o.crowd, "crowd", 0, "with -check: drive a crowd through the services this long before the queries run (and while they run)")
	flag.IntVar(&o.rate, "rate", 30, "with -crowd: users a second")
	flag.StringVar(&o.public, "gateway", env("SECKILL_GATEWAY_ADDR", "127.0.0.1:8080"), "with -crowd: the public address (HAProxy's on the cluster profile)")
	flag.StringVar(&o.admin, "admin", env("SECKILL_ADMIN_ADDR", "127.0.0.1:8081"), "with -crowd: a gateway's admin listener")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *out, o); err != nil {
		fmt.Fprintln(os.Stderr, "dashboard:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out string, o checkOptions) error {
	b, quiet := build()
	d, err := b.Build()
	if err != nil {
		return err
	}
	if o.url != "" {
		return check(ctx, d, quiet, o)
	}
	j, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return err
	}
	j = append(j, '\n')
	if out == "" {
		_, err = os.Stdout.Write(j)
		return err
	}
	return os.WriteFile(out, j, 0o644)
}

// check runs the queries (checkQueries), after and while a crowd runs when o.crowd is set.
func check(ctx context.Context, d dashboard.Dashboard, quiet map[string]string, o checkOptions) error {
	if !o.requireData {
		quiet = nil
	}
	if o.crowd <= 0 {
		return checkQueries(d, o.url, o.requireData, quiet, os.Stdout)
	}
	c, err := newCrowd(o.public, o.admin, o.rate)
	if err != nil {
		return err
	}
	session, prizes, err := c.sale(ctx)
	if err != nil {
		return fmt.Errorf("crowd: %w", err)
	}
	cctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.run(cctx, session, prizes)
	}()
	defer func() {
		stop()
		<-done
		fmt.Println("crowd:", c.summary())
	}()
	fmt.Printf("crowd: %d users a second through %s for %s before the queries run\n", o.rate, c.public, o.crowd)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(o.crowd):
	}
	return checkQueries(d, o.url, o.requireData, quiet, os.Stdout)
}

// ds is the Prometheus chosen in the dashboard's datasource variable.
var ds = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}

// sel restricts per session×prize series to the sessions picked in the variable.
const sel = `session_id=~"$session"`

// build returns the dashboard and the queries that return nothing on a healthy pipeline under
// a crowd (expression → why), which -require-data lets be empty: counters whose labels exist
// only once something went wrong, and gauges absent while all is well.
func build() (*dashboard.DashboardBuilder, map[string]string) {
	quiet := map[string]string{}
	// calm is q for such a query.
	calm := func(expr, legend, why string) *prometheus.DataqueryBuilder {
		quiet[expr] = why
		return q(expr, legend)
	}
	d := dashboard.NewDashboardBuilder("Seckill pipeline").
		Uid("seckill-pipeline").
		Description("Flash-sale pipeline: gateway admission, consumer persistence, reconciler. Generated by deploy/monitoring/dashboard (make dashboard); do not edit the JSON.").
		Tags([]string{"seckill", "generated"}).
		Refresh("10s").
		Time("now-1h", "now").
		Timezone(common.TimeZoneBrowser).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Prometheus").Type("prometheus")).
		WithVariable(dashboard.NewQueryVariableBuilder("session").Label("Session").
			Datasource(ds).
			Query(dashboard.StringOrMap{String: cog.ToPtr("label_values(seckill_reconciler_stock_units, session_id)")}).
			Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
			Multi(true).IncludeAll(true).AllValue(".*"))

	// The four signals of the design, first: stock accuracy, optimistic-lock conflicts,
	// compensation backlog, average processing latency.
	d.WithRow(dashboard.NewRowBuilder("The four signals")).
		WithPanel(bigNumber("Redis stock accuracy", "percentunit",
			"1 − units Redis is off by (the reconciler's drift check) ÷ units offered in the sessions in scope. 100 % = Redis admits exactly what MySQL can sell.",
			"seckill:stock_accuracy:ratio", steps("red", 0.99, "green")).Decimals(2)).
		WithPanel(bigNumber("Optimistic-lock conflict rate", "percentunit",
			"Conflicts ÷ persistence transactions over 1 minute, all consumers. Alert above 5 % (SeckillConflictRateHigh).",
			"seckill:consumer_conflict_rate:ratio_rate1m", steps("green", 0.05, "red")).Decimals(1)).
		WithPanel(bigNumber("Compensation backlog", "short",
			"Grab events on the compensation topic not replayed yet. Alert when above 0 for 5 minutes.",
			"max(seckill_reconciler_compensation_backlog)", steps("green", 1, "orange"))).
		WithPanel(bigNumber("Average processing latency", "s",
			"Mean time from admission in the gateway to the order committed in MySQL, over 5 minutes.",
			"sum(rate(seckill_consumer_admission_to_order_seconds_sum[5m])) / sum(rate(seckill_consumer_admission_to_order_seconds_count[5m]))",
			steps("green", 1, "orange", 5, "red")))

	d.WithRow(dashboard.NewRowBuilder("Stock per session×prize")).
		WithPanel(series("Stock left: MySQL vs Redis", "short",
			"left_stock in MySQL and the admission gate's left in Redis, side by side. Redis runs ahead by the reservations pending.",
			q(`max by (session_id, prize_id, source) (seckill_reconciler_stock_left{`+sel+`})`, "s{{session_id}} p{{prize_id}} {{source}}"))).
		WithPanel(series("Drift (Redis − expected)", "short",
			"Per checked session×prize: Redis left minus (MySQL left − reservations not yet orders). 0 is right; >0 Redis would admit what MySQL refuses.",
			q(`max by (session_id, prize_id) (seckill_reconciler_drift{`+sel+`})`, "s{{session_id}} p{{prize_id}}"),
			calm(`max by (session_id, prize_id) (seckill_reconciler_drift_uncorrected_runs{`+sel+`})`, "s{{session_id}} p{{prize_id}} uncorrected runs",
				"the gauge exists only while drift stays uncorrected"))).
		WithPanel(series("Sold and pending reservations", "short",
			"Sold = MySQL total − left. Pending = admitted in Redis, outcome not settled yet.",
			q(`max by (session_id, prize_id) (seckill_reconciler_stock_sold{`+sel+`})`, "s{{session_id}} p{{prize_id}} sold"),
			q(`max by (session_id, prize_id) (seckill_reconciler_reservations_pending{`+sel+`})`, "s{{session_id}} p{{prize_id}} pending")))

	d.WithRow(dashboard.NewRowBuilder("Admissions")).
		WithPanel(stacked("Admissions by outcome", "reqps", "Grab requests per second by the gateway's verdict.",
			q(`sum by (outcome) (rate(seckill_gateway_grabs_total[$__rate_interval]))`, "{{outcome}}"))).
		WithPanel(stacked("Responses by status code", "reqps", "Public API answers per second by HTTP status (grab and status routes).",
			q(`sum by (code) (rate(seckill_gateway_responses_total[$__rate_interval]))`, "{{code}}"))).
		WithPanel(series("Gateway 5xx share", "percentunit", "Share of the public API's answers that are 5xx (alert above 5 % for 2 minutes).",
			q(`seckill:gateway_5xx:ratio_rate1m`, "5xx share")))

	d.WithRow(dashboard.NewRowBuilder("Latency per stage")).
		WithPanel(tracedPercentiles("HTTP grab", `seckill_gateway_request_duration_seconds_bucket{route="grab"}`)).
		WithPanel(percentiles("HTTP status poll", `seckill_gateway_request_duration_seconds_bucket{route="status"}`)).
		WithPanel(tracedPercentiles("Redis admission script", `seckill_gateway_redis_duration_seconds_bucket{op="reserve"}`)).
		WithPanel(tracedPercentiles("Kafka ack (acks=all)", `seckill_gateway_kafka_produce_duration_seconds_bucket`)).
		WithPanel(percentiles("MySQL transaction", `seckill_consumer_tx_duration_seconds_bucket`)).
		WithPanel(percentiles("Order events published (per batch)", `seckill_consumer_order_events_publish_duration_seconds_bucket`)).
		WithPanel(percentiles("Admission → order committed", `seckill_consumer_admission_to_order_seconds_bucket`)).
		WithPanel(series("Admission → order by path latency", "s",
			"p50 and p99 per path that made the order: grab (the consumers), compensation (the reconciler's replay), workbench (an event a person replayed).",
			q(`histogram_quantile(0.5, sum by (le, path) (rate(seckill_consumer_admission_to_order_seconds_bucket[$__rate_interval])))`, "p50 {{path}}"),
			q(`histogram_quantile(0.99, sum by (le, path) (rate(seckill_consumer_admission_to_order_seconds_bucket[$__rate_interval])))`, "p99 {{path}}")))

	d.WithRow(dashboard.NewRowBuilder("Consumers")).
		WithPanel(series("Consumer lag per grab partition", "short",
			"End offset − the group's committed offset, read from the broker. Alert when growing for 2 minutes.",
			q(`seckill:consumer_lag:max`, "partition {{partition}}"))).
		WithPanel(series("Transactions, conflicts and retries", "ops", "Per second, all consumers.",
			q(`sum(rate(seckill_consumer_transactions_total[$__rate_interval]))`, "transactions"),
			q(`sum(rate(seckill_consumer_conflicts_total[$__rate_interval]))`, "conflicts"),
			calm(`sum by (tier) (rate(seckill_consumer_retries_total[$__rate_interval]))`, "retry {{tier}}",
				"a tier's series appears at its first retry (a conflict or a MySQL error)"))).
		WithPanel(stacked("Orders written", "ops", "New orders per second by status and reason. rejected/sold_out means Redis ran ahead of MySQL.",
			q(`sum by (status, reason) (rate(seckill_consumer_orders_total[$__rate_interval]))`, "{{status}} {{reason}}")))

	d.WithRow(dashboard.NewRowBuilder("Events")).
		WithPanel(series("Order events: published vs pending", "short",
			"Published per second to the order topic, and orders committed whose event is not published yet (the outbox).",
			q(`sum(rate(seckill_consumer_order_events_published_total[$__rate_interval]))`, "published/s"),
			q(`max(seckill_consumer_outbox_pending)`, "pending"))).
		WithPanel(series("Grab events: gateway relay", "short",
			"Grab events Kafka did not acknowledge in time, held by the relay; published later, or dropped (the reconciler re-publishes those).",
			q(`sum(seckill_gateway_relay_pending)`, "pending"),
			q(`sum(rate(seckill_gateway_kafka_produce_errors_total[$__rate_interval]))`, "produce errors/s"),
			q(`sum(rate(seckill_gateway_relay_published_total[$__rate_interval]))`, "relayed/s"),
			q(`sum(rate(seckill_gateway_relay_dropped_total[$__rate_interval]))`, "dropped/s"))).
		WithPanel(series("Reconciler re-publishing", "short", "Stale reservations re-published or settled, and keys rebuilt, per run interval.",
			q(`sum(increase(seckill_reconciler_stale_republished_total[5m]))`, "re-published (5m)"),
			q(`sum(increase(seckill_reconciler_stale_settled_total[5m]))`, "settled (5m)"),
			q(`sum(increase(seckill_reconciler_keys_rebuilt_total[5m]))`, "keys rebuilt (5m)")))

	d.WithRow(dashboard.NewRowBuilder("Exceptions")).
		WithPanel(series("Dead letters and compensation", "short", "Messages dead-lettered and grab events compensated, per 5 minutes; compensation replay by result.",
			q(`sum by (job) (increase({__name__=~"seckill_(consumer|reconciler)_dead_letters_total"}[5m]))`, "dead letters {{job}}"),
			q(`sum(increase(seckill_consumer_compensated_total[5m]))`, "compensated"),
			calm(`sum by (result) (increase(seckill_reconciler_compensation_replayed_total[5m]))`, "replayed {{result}}",
				"a result's series appears at the first compensation event replayed"))).
		WithPanel(series("Open exception cases", "short", "Cases waiting for a person on the exceptions workbench (operator console), by kind; and operator actions on cases per 5 minutes.",
			q(`max by (kind) (seckill_exceptions_open)`, "open {{kind}}"),
			calm(`sum by (action, result) (increase(seckill_exception_actions_total[5m]))`, "{{action}} {{result}}",
				"a series appears at an operator's first action on a case"))).
		WithPanel(series("Drift found and corrected", "short", "Session×prizes found drifted, and corrected, per 5 minutes, by direction.",
			calm(`sum by (direction) (increase(seckill_reconciler_drift_found_total[5m]))`, "found {{direction}}",
				"a direction's series appears at the first drift found"),
			calm(`sum by (direction) (increase(seckill_reconciler_drift_corrected_total[5m]))`, "corrected {{direction}}",
				"a direction's series appears at the first drift corrected"))).
		WithPanel(series("Reconciler runs and lease", "short", "Runs by result per 5 minutes, seconds since a lease-holding run last ended (the lease alerts fire past 3 intervals), and whether a run holds the lease now.",
			q(`sum by (result) (increase(seckill_reconciler_runs_total[5m]))`, "{{result}}"),
			q(`time() - max(seckill_reconciler_last_run_timestamp_seconds)`, "s since a run held the lease"),
			q(`3 * max(seckill_reconciler_interval_seconds)`, "3 intervals"),
			q(`max(seckill_reconciler_lease_held)`, "lease held now"))).
		WithPanel(series("Errors", "short", "Redis errors in the gateway, outcomes not settled in Redis, mismatched redeliveries, schedule reload failures; per 5 minutes.",
			calm(`sum by (op) (increase(seckill_gateway_redis_errors_total[5m]))`, "redis {{op}}",
				"an operation's series appears at its first Redis error"),
			q(`sum(increase(seckill_consumer_settle_errors_total[5m]))`, "settle errors"),
			q(`sum(increase(seckill_consumer_mismatched_redeliveries_total[5m]))`, "mismatched redeliveries"),
			q(`sum(increase(seckill_gateway_schedule_reload_errors_total[5m]))`, "schedule reload errors"))).
		WithPanel(series("Redis memory", "bytes", "Used vs maxmemory (noeviction: at maxmemory admissions fail). From prometheus-redis-exporter.",
			q(`max by (instance) (redis_memory_used_bytes)`, "used {{instance}}"),
			q(`max by (instance) (redis_memory_max_bytes)`, "maxmemory {{instance}}"))).
		WithPanel(series("Payment timeouts", "short", "Unpaid orders cancelled by the payment timeout, and due ones a run left for later because evidence may be unread (feedback_behind: unread reports on the order's feedback partition; relay_behind: order.created not published), per 5 minutes. Alert when deferrals go on for 10 minutes (SeckillPaymentTimeoutsDeferred).",
			q(`sum(increase(seckill_reconciler_payment_timeouts_total[5m]))`, "timed out"),
			q(`sum by (reason) (increase(seckill_reconciler_payment_timeouts_deferred_total[5m]))`, "deferred {{reason}}")))

	// The servers, from their exporters: every target Prometheus scrapes, the Kafka brokers
	// (the JMX exporter agent, deploy/monitoring/kafka-jmx.yml) and the Redis nodes
	// (prometheus-redis-exporter). The local single stack's Prometheus scrapes no broker.
	d.WithRow(dashboard.NewRowBuilder("Kafka brokers")).
		WithPanel(series("Instances up by job", "short",
			"Targets answering Prometheus's scrape, per job (gateways, consumers, reconcilers, Redis nodes, brokers), against how many it scrapes.",
			q(`sum by (job) (up)`, "{{job}} up"),
			q(`count by (job) (up)`, "{{job}} scraped"))).
		WithPanel(series("Brokers and controller", "short",
			"Brokers scraped, the active controller (KRaft: exactly 1 in the cluster; 0 = no quorum), brokers registered and fenced as the controller sees them.",
			q(`sum(up{job="kafka"})`, "brokers up"),
			q(`sum(kafka_controller_kafkacontroller_activecontrollercount)`, "active controllers"),
			q(`max(kafka_controller_kafkacontroller_activebrokercount)`, "registered brokers"),
			q(`max(kafka_controller_kafkacontroller_fencedbrokercount)`, "fenced brokers"))).
		WithPanel(series("Partitions at risk", "short",
			"Under-replicated partitions per broker (fewer in-sync replicas than replicas), partitions under min.insync.replicas (acks=all writes to them fail: grabs wait in the gateways' relay), and offline partitions (no leader).",
			q(`max by (node) (kafka_server_replicamanager_underreplicatedpartitions)`, "under-replicated {{node}}"),
			q(`sum(kafka_server_replicamanager_underminisrpartitioncount)`, "under min ISR"),
			q(`max(kafka_controller_kafkacontroller_offlinepartitionscount)`, "offline"))).
		WithPanel(series("Broker request time p99", "ms",
			"99th percentile of the time a request spends in a broker (Kafka's own, over about the last 5 minutes), worst broker: Produce is the gateway's acks=all write, FetchConsumer the consumers' read, FetchFollower replication.",
			q(`max by (request) (kafka_network_requestmetrics_totaltimems{quantile="0.99", request=~"Produce|FetchConsumer|FetchFollower"})`, "{{request}}"))).
		WithPanel(series("Messages in per topic", "ops",
			"Messages written to the leaders per second, by topic (replication not counted).",
			q(`sum by (topic) (rate(kafka_server_brokertopicmetrics_messagesin_total[$__rate_interval]))`, "{{topic}}"))).
		WithPanel(series("Leaders, ISR changes and load per broker", "short",
			"Partition leaders per broker (uneven after a failover until leaders are rebalanced), in-sync replica set shrinks and expands per 5 minutes, and the request handlers' idle share (near 0: saturated).",
			q(`max by (node) (kafka_server_replicamanager_leadercount)`, "leaders {{node}}"),
			q(`sum(increase(kafka_server_replicamanager_isrshrinks_total[5m]))`, "ISR shrinks (5m)"),
			q(`sum(increase(kafka_server_replicamanager_isrexpands_total[5m]))`, "ISR expands (5m)"),
			q(`min by (node) (kafka_server_kafkarequesthandlerpool_requesthandleravgidle_ratio)`, "handlers idle {{node}}")))

	d.WithRow(dashboard.NewRowBuilder("Redis nodes")).
		WithPanel(series("Nodes up and roles", "short",
			"Each Redis node the exporter reaches (1 up), nodes per role (a primary killed comes back as a replica of the one promoted in its place), and the cluster state as the nodes see it (1 = ok, every slot served; worst node).",
			q(`min by (instance) (redis_up)`, "up {{instance}}"),
			q(`count by (role) (redis_instance_info)`, "{{role}} nodes"),
			q(`min(redis_cluster_state)`, "cluster state"))).
		WithPanel(series("Commands per node", "ops", "Commands processed per second by each node (the admission script runs on the primary owning the prize's slot).",
			q(`sum by (instance) (rate(redis_commands_processed_total[$__rate_interval]))`, "{{instance}}"))).
		WithPanel(series("Replication and clients", "short", "Replicas connected to each primary, and clients connected to each node.",
			q(`max by (instance) (redis_connected_slaves)`, "replicas of {{instance}}"),
			q(`max by (instance) (redis_connected_clients)`, "clients {{instance}}")))

	// The servers as the pipeline sees them (the reconciler's probes and the gateways' own
	// view of MySQL): no exporter needed.
	d.WithRow(dashboard.NewRowBuilder("Servers")).
		WithPanel(series("MySQL", "short", "1 = yes. Up: the reconcilers' probe answered; read-only: writes fail (1290) and orders wait.",
			q(`min(seckill_reconciler_mysql_up)`, "up"),
			q(`max(seckill_reconciler_mysql_read_only)`, "read-only"))).
		WithPanel(series("Kafka", "short", "Up: a broker answered the reconcilers' metadata request. Brokers down: holding the pipeline's replicas but not alive. Partitions per topic under-replicated, or refusing writes (below min.insync.replicas, or leaderless).",
			q(`min(seckill_reconciler_kafka_up)`, "up"),
			q(`max(seckill_reconciler_kafka_brokers_down)`, "brokers down"),
			q(`max by (topic) (seckill_reconciler_kafka_partitions_under_replicated)`, "under-replicated {{topic}}"),
			q(`max by (topic) (seckill_reconciler_kafka_partitions_below_min_isr)`, "below min ISR {{topic}}"))).
		WithPanel(series("Gateway schedule age", "s", "Seconds since each gateway last reloaded the session schedule from MySQL (alert above 60 s for a minute: new sessions answer 409 not_open).",
			q(`time() - max by (instance) (seckill_gateway_schedule_loaded_timestamp_seconds)`, "{{instance}}")))
	return d, quiet
}

func q(expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Datasource(ds).Expr(expr).LegendFormat(legend)
}

// steps are thresholds: a base colour, then value, colour pairs.
func steps(base string, pairs ...any) *dashboard.ThresholdsConfigBuilder {
	s := []dashboard.Threshold{{Color: base}}
	for i := 0; i+1 < len(pairs); i += 2 {
		s = append(s, dashboard.Threshold{Value: cog.ToPtr(toFloat(pairs[i])), Color: pairs[i+1].(string)})
	}
	return dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps(s)
}

func toFloat(v any) float64 {
	switch n := v.(type) {
	case int:
		return float64(n)
	case float64:
		return n
	}
	panic(fmt.Sprintf("threshold %v is not a number", v))
}

func bigNumber(title, unit, desc, expr string, th *dashboard.ThresholdsConfigBuilder) *stat.PanelBuilder {
	return stat.NewPanelBuilder().Title(title).Description(desc).Datasource(ds).Unit(unit).Height(5).Span(6).
		GraphMode(common.BigValueGraphModeArea).ColorMode(common.BigValueColorModeBackground).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"})).
		Thresholds(th).NoValue("no data").
		WithTarget(q(expr, title).RefId("A"))
}

func series(title, unit, desc string, targets ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	p := timeseries.NewPanelBuilder().Title(title).Description(desc).Datasource(ds).Unit(unit).Height(8).Span(8).
		Legend(common.NewVizLegendOptionsBuilder().ShowLegend(true).DisplayMode(common.LegendDisplayModeList).
			Placement(common.LegendPlacementBottom)).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending))
	for i, t := range targets {
		p.WithTarget(t.RefId(refID(i)))
	}
	return p
}

func stacked(title, unit, desc string, targets ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	return series(title, unit, desc, targets...).FillOpacity(30).
		Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal))
}

// percentiles plots p50, p90 and p99 of a histogram's buckets.
func percentiles(stage, buckets string) *timeseries.PanelBuilder {
	return quantiles(stage, buckets, "p50, p90 and p99 over the rate interval, all instances.", false)
}

// tracedPercentiles is percentiles with the exemplars of the histogram on the p99 line: a
// mark per observation of a sampled (traced) grab, its trace_id in the tooltip. The trace
// id is a link to the trace once the Prometheus datasource's exemplar setting names the
// tracing datasource (label trace_id); Prometheus keeps exemplars only when it runs with
// --enable-feature=exemplar-storage.
func tracedPercentiles(stage, buckets string) *timeseries.PanelBuilder {
	return quantiles(stage, buckets, "p50, p90 and p99 over the rate interval, all instances. "+
		"Marks on p99: sampled grabs (exemplars); their trace_id opens the trace when the Prometheus datasource links exemplars to the tracing datasource.", true)
}

func quantiles(stage, buckets, desc string, exemplars bool) *timeseries.PanelBuilder {
	p := series(stage+" latency", "s", desc)
	for i, pct := range []string{"0.5", "0.9", "0.99"} {
		t := q(fmt.Sprintf(`histogram_quantile(%s, sum by (le) (rate(%s[$__rate_interval])))`, pct, buckets),
			"p"+strings.TrimPrefix(pct, "0.")).RefId(refID(i))
		if exemplars && pct == "0.99" { // once: each query would mark the same exemplars again
			t.Exemplar(true)
		}
		p.WithTarget(t)
	}
	return p
}

// refID names a panel's i-th query as Grafana does: A, B, C...
func refID(i int) string { return string(rune('A' + i)) }

// checkQueries runs every panel's queries against the Prometheus at base, with the
// dashboard's variables replaced by what Grafana would send, and fails on a query error and,
// with requireData, on a query that returned nothing and is not in quiet.
func checkQueries(d dashboard.Dashboard, base string, requireData bool, quiet map[string]string, w io.Writer) error {
	client := &http.Client{Timeout: 10 * time.Second}
	var failed []string
	for _, p := range d.Panels {
		if p.Panel == nil {
			continue
		}
		for _, t := range p.Panel.Targets {
			pq, ok := t.(prometheus.Dataquery)
			if !ok {
				return fmt.Errorf("panel %v: query of type %T, not Prometheus", p.Panel.Title, t)
			}
			expr := strings.NewReplacer("$__rate_interval", "1m", "$session", ".*").Replace(pq.Expr)
			n, err := instant(client, base, expr)
			title := ""
			if p.Panel.Title != nil {
				title = *p.Panel.Title
			}
			switch {
			case err != nil:
				failed = append(failed, fmt.Sprintf("%s: %s: %v", title, expr, err))
				fmt.Fprintf(w, "ERROR  %-40s %s: %v\n", title, expr, err)
			case n == 0 && quiet[pq.Expr] != "":
				fmt.Fprintf(w, "quiet  %-40s %s (empty when healthy: %s)\n", title, expr, quiet[pq.Expr])
			case n == 0 && requireData:
				failed = append(failed, fmt.Sprintf("%s: %s: no data", title, expr))
				fmt.Fprintf(w, "EMPTY  %-40s %s\n", title, expr)
			case n == 0:
				fmt.Fprintf(w, "empty  %-40s %s\n", title, expr)
			default:
				fmt.Fprintf(w, "%5d  %-40s %s\n", n, title, expr)
			}
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d queries failed:\n%s", len(failed), strings.Join(failed, "\n"))
	}
	fmt.Fprintln(w, "every query ran")
	return nil
}

// instant runs one instant query and returns how many series it returned.
func instant(c *http.Client, base, expr string) (int, error) {
	resp, err := c.Get(strings.TrimSuffix(base, "/") + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, fmt.Errorf("HTTP %d: %w", resp.StatusCode, err)
	}
	if body.Status != "success" {
		return 0, errors.New(body.Error)
	}
	var vec []json.RawMessage
	if err := json.Unmarshal(body.Data.Result, &vec); err != nil {
		return 1, nil // a scalar result
	}
	return len(vec), nil
}
