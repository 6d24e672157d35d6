// Command firedrill makes real alerts fire: it drives the services of `make run` (and, for
// the scenarios that say so, the servers of the local stack) into a fault, waits until the
// local Prometheus (make monitor) reports each alert the scenario should raise as firing in
// /api/v1/alerts, prints it, and undoes the fault. It exits non-zero when an alert has not
// fired in time, or when a fault undone did not leave the stack healthy again. -scenario all
// runs every scenario of the profile in turn and prints, per alert, whether it reached firing
// and after how long.
//
//	go run ./deploy/monitoring/firedrill -scenario conflicts   (SeckillConflictRateHigh)
//	go run ./deploy/monitoring/firedrill -scenario all
//	go run ./deploy/monitoring/firedrill -profile cluster -scenario all
//
// -profile single (the default) drives `make run` and `make monitor`; -profile cluster drives
// `make run PROFILE=cluster` (through its HAProxy) and `make monitor PROFILE=cluster`, and
// faults the cluster profile's nodes (cluster.go). The single profile's scenarios (scenarios
// below lists them with their alerts):
//   - conflicts: a sale with a steady crowd while another MySQL writer bumps the stock row's
//     version, as the chaos suite's conflict storm does: the consumers' optimistic lock
//     conflicts, retries and compensates.
//   - soldout: Redis is given more stock than MySQL (drift injected into the admission gate's
//     key), so MySQL rejects the excess sold_out.
//   - relay: the grab topic's max.message.bytes is set below any grab event, so every
//     produce to it is refused; a crowd then fills the gateway's relay beyond its queue
//     (start make run with a small SECKILL_RELAY_QUEUE, e.g. 50, for the drops).
//   - lease-stuck: a MySQL session of the drill's own holds a write lock on exception_cases,
//     which every reconcile run reads: the run hangs while its holder keeps the lease.
//   - mysql-readonly, mysql-down, kafka-down: act on the local stack's servers (the single
//     profile's, found through SECKILL_STATE_DIR, default .state): SET GLOBAL read_only, or
//     stop MariaDB or the Kafka broker, and bring them back with `deploy/local/stack up`.
//     Never run these while tests use the stack.
//
// It creates its own activities through the admin API (SECKILL_ADMIN_TOKEN), signs user
// tokens with SECKILL_JWT_SECRET, and reaches MySQL, Redis and Kafka through the stack's
// variables: run it with the profile's env file (.state/env, .state/cluster/env) and
// .state/dev-secrets loaded (make firedrill does).
package main

import (
	"bytes"
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
	"syscall"
	"time"

	"github.com/seckill-pipeline/seckill/internal/adminclient"
	"github.com/seckill-pipeline/seckill/pkg/auth"
	"github.com/seckill-pipeline/seckill/pkg/config"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "firedrill:", err)
		os.Exit(1)
	}
}

func env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

type drill struct {
	gateway, admin, prom string
	adminToken           string
	signer               *auth.Signer
	http                 *http.Client
	common               config.Common
	stack, state         string // the stack script and its state folder (server faults)
	rate, grabs          int
}

// scenario is a fault and the alerts it must raise. start installs the fault (and starts
// any load); the stop it returns ends the load and undoes the fault, with a context of its
// own, whatever happened meanwhile.
type scenario struct {
	name   string
	alerts []string
	watch  string // a PromQL expression printed while waiting
	start  func(d *drill, ctx context.Context) (stop func(), err error)

	profile string        // the stack profile it runs on: single (the default) or cluster
	timeout time.Duration // how long its alerts may take to fire; 0: the -timeout flag
	// healthy, when set, is a PromQL expression that returns a sample only while the stack
	// is healthy in the scenario's respect: it must hold before the fault is installed, and
	// again (with the scenario's alerts resolved) once the fault is undone.
	healthy string
}

var scenarios = append([]scenario{
	{name: "soldout", alerts: []string{"SeckillSoldOutAfterAdmission"},
		watch: `sum(increase(seckill_consumer_orders_total{status="rejected", reason="sold_out"}[5m]))`, start: (*drill).soldOut},
	{name: "relay", alerts: []string{"SeckillGatewayRelayDropped"},
		watch: `sum(seckill_gateway_relay_pending)`, start: (*drill).relay},
	{name: "lease-stuck", alerts: []string{"SeckillReconcilerLeaseHolderStuck"},
		watch: `time() - max(seckill_reconciler_last_run_timestamp_seconds)`, start: (*drill).leaseStuck},
	{name: "mysql-readonly", alerts: []string{"SeckillMySQLReadOnly"}, watch: `max(seckill_reconciler_mysql_read_only)`, start: (*drill).mysqlReadOnly},
	{name: "mysql-down", alerts: []string{"SeckillMySQLUnreachable", "SeckillGatewayScheduleStale"},
		watch: `time() - min(seckill_gateway_schedule_loaded_timestamp_seconds)`, start: (*drill).mysqlDown},
	{name: "kafka-down", alerts: []string{"SeckillKafkaUnreachable"}, watch: `min(seckill_reconciler_kafka_up)`, start: (*drill).kafkaDown},
	{name: "conflicts", alerts: []string{"SeckillConflictRateHigh"}, watch: "seckill:consumer_conflict_rate:ratio_rate1m", start: (*drill).conflicts},
}, clusterScenarios...)

const (
	single  = "single"
	cluster = "cluster"
)

// profileOf is the profile a scenario runs on (single when unset).
func profileOf(s scenario) string {
	if s.profile == "" {
		return single
	}
	return s.profile
}

// scenarioNames lists the scenarios of profile.
func scenarioNames(all []scenario, profile string) string {
	var names []string
	for _, s := range all {
		if profileOf(s) == profile {
			names = append(names, s.name)
		}
	}
	return strings.Join(names, ", ")
}

// pick returns the scenarios that -profile and -scenario select: the one named (which must
// belong to the profile: a cluster fault on the single stack, or the reverse, would fault
// servers the services do not use) or, for "all", every scenario of the profile in order.
func pick(all []scenario, profile, name string) ([]scenario, error) {
	if profile != single && profile != cluster {
		return nil, fmt.Errorf("unknown profile %q: want single or cluster", profile)
	}
	var out []scenario
	for _, s := range all {
		if (name == "all" || name == s.name) && profileOf(s) == profile {
			out = append(out, s)
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	for _, s := range all {
		if s.name == name {
			return nil, fmt.Errorf("scenario %s runs on the %s profile (-profile %s), not on %s", name, profileOf(s), profileOf(s), profile)
		}
	}
	return nil, fmt.Errorf("unknown scenario %q for the %s profile: want one of %s, or all", name, profile, scenarioNames(all, profile))
}

func run(ctx context.Context) error {
	profile := flag.String("profile", single, "the stack profile the services run on: single (make run) or cluster (make run PROFILE=cluster)")
	name := flag.String("scenario", "", "a scenario of the profile, or all (default: conflicts on single, broker-down on cluster)")
	prom := flag.String("prometheus", "", "Prometheus base URL (default: make monitor's of the profile, 127.0.0.1:19090 or 19091)")
	gateway := flag.String("gateway", "", "the public grab address (default: 127.0.0.1:8080; cluster: the HAProxy, 127.0.0.1:8090)")
	admin := flag.String("admin", "", "a gateway's admin listener (default: 127.0.0.1:8081; cluster: gateway-1's, 127.0.0.1:8191)")
	timeout := flag.Duration("timeout", 6*time.Minute, "how long to wait for a scenario's alerts (scenarios whose rules wait longer have their own)")
	rate := flag.Int("rate", 40, "grabs per second (conflicts, relay)")
	grabs := flag.Int("grabs", 200, "grabs sent while the grab topic refuses writes (relay)")
	stackScript := flag.String("stack", "deploy/local/stack", "the stack script that brings stopped servers back")
	flag.Parse()
	// The addresses make run and make monitor give each profile (deploy/local/run, cluster.sh).
	defaults := map[string][3]string{
		single:  {env("SECKILL_PROMETHEUS_URL", "http://127.0.0.1:"+env("SECKILL_PROMETHEUS_PORT", "19090")), env("SECKILL_GATEWAY_ADDR", "127.0.0.1:8080"), env("SECKILL_ADMIN_ADDR", "127.0.0.1:8081")},
		cluster: {"http://127.0.0.1:" + env("SECKILL_CLUSTER_PROMETHEUS_PORT", "19091"), env("SECKILL_PROXY_ADDR", "127.0.0.1:8090"), "127.0.0.1:8191"},
	}
	def, ok := defaults[*profile]
	if !ok {
		return fmt.Errorf("unknown profile %q: want single or cluster", *profile)
	}
	if *name == "" {
		*name = map[string]string{single: "conflicts", cluster: "broker-down"}[*profile]
	}
	todo, err := pick(scenarios, *profile, *name)
	if err != nil {
		return err
	}
	secret, token := os.Getenv("SECKILL_JWT_SECRET"), os.Getenv("SECKILL_ADMIN_TOKEN")
	if secret == "" || token == "" {
		return errors.New("SECKILL_JWT_SECRET and SECKILL_ADMIN_TOKEN must be set (load .state/dev-secrets)")
	}
	common, err := config.LoadCommon(os.Getenv)
	if err != nil {
		return err
	}
	d := &drill{
		gateway: "http://" + orDefault(*gateway, def[1]),
		admin:   "http://" + orDefault(*admin, def[2]),
		prom:    orDefault(*prom, def[0]), adminToken: token,
		signer: auth.NewSigner([]byte(secret), env("SECKILL_JWT_ISSUER", "seckill"), env("SECKILL_JWT_AUDIENCE", "seckill-gateway")),
		http:   &http.Client{Timeout: 10 * time.Second},
		common: common, stack: *stackScript, state: env("SECKILL_STATE_DIR", ".state"),
		rate: *rate, grabs: *grabs,
	}
	if err := d.preflight(ctx, *profile); err != nil {
		return err
	}
	var results []result
	for i, s := range todo {
		if ctx.Err() != nil {
			break
		}
		if i > 0 {
			// A fault undone leaves services reconnecting: start the next one on a working
			// pipeline (the admin API answers and is ready).
			d.waitReady(ctx)
		}
		fmt.Printf("\n=== scenario %s (alerts: %s)\n", s.name, strings.Join(s.alerts, ", "))
		wait := *timeout
		if s.timeout > wait {
			wait = s.timeout
		}
		results = append(results, d.runScenario(ctx, s, wait)...)
	}
	fmt.Printf("\nfire drill (%s profile): alert → state in %s/api/v1/alerts\n", *profile, d.prom)
	failed := 0
	for _, r := range results {
		state := "firing after " + r.after.Round(time.Second).String()
		if !r.fired {
			state, failed = "NOT firing: "+r.why, failed+1
		}
		switch {
		case r.restored > 0:
			state += "; healthy again " + r.restored.Round(time.Second).String() + " after the undo"
		case r.unhealthy != "":
			state, failed = state+"; NOT HEALTHY AGAIN: "+r.unhealthy, failed+1
		}
		fmt.Printf("  %-36s %-15s %s\n", r.alert, r.scenario, state)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d alerts did not fire or left the stack unhealthy", failed, len(results))
	}
	return nil
}

func orDefault(v, def string) string {
	if v != "" {
		return v
	}
	return def
}

// result is one alert's outcome in a scenario.
type result struct {
	alert, scenario string
	fired           bool
	after           time.Duration
	why             string
	// For a scenario with a healthy expression: how long after the undo the stack was
	// healthy again, or why it was not.
	restored  time.Duration
	unhealthy string
}

func (d *drill) runScenario(ctx context.Context, s scenario, timeout time.Duration) []result {
	out := make([]result, len(s.alerts))
	for i, a := range s.alerts {
		out[i] = result{alert: a, scenario: s.name, why: "timed out after " + timeout.String()}
	}
	if s.healthy != "" {
		// A fault on a stack that is already unhealthy proves nothing (the alert may be
		// firing for another reason) and its undo could not be verified.
		if err := d.waitHealthy(ctx, s, 2*time.Minute); err != nil {
			for i := range out {
				out[i].why = "fault not installed: the stack is not healthy before it: " + err.Error()
			}
			fmt.Println("  fault not installed: the stack is not healthy before it:", err)
			return out
		}
	}
	fctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t0 := time.Now()
	stop, err := s.start(d, fctx)
	if err != nil {
		for i := range out {
			out[i].why = "fault not installed: " + err.Error()
		}
		fmt.Println("  fault not installed:", err)
		return out
	}
	d.waitFiring(fctx, s, t0, out)
	fmt.Printf("  undoing the %s fault\n", s.name)
	stop()
	if s.healthy == "" {
		return out
	}
	t1 := time.Now()
	// Bounded by its own budget: an interrupted drill still waits for (and reports) the undo.
	if err := d.waitHealthy(context.WithoutCancel(ctx), s, 4*time.Minute); err != nil {
		fmt.Println("  NOT HEALTHY AGAIN:", err)
		for i := range out {
			out[i].unhealthy = err.Error()
		}
		return out
	}
	fmt.Printf("  healthy again %s after the undo: %s, and %s resolved\n", time.Since(t1).Round(time.Second), s.healthy, strings.Join(s.alerts, ", "))
	for i := range out {
		out[i].restored = max(time.Since(t1), time.Second)
	}
	return out
}

// preflight fails at once, with what to start, when Prometheus does not answer or scrapes
// no reconciler (whose gauges most alerts read), rather than after a scenario's timeout.
func (d *drill) preflight(ctx context.Context, profile string) error {
	suffix := map[string]string{single: "", cluster: " PROFILE=cluster"}[profile]
	v, err := d.value(ctx, `count(up{job="seckill-reconciler"} == 1)`)
	if err != nil {
		return fmt.Errorf("no answer from Prometheus at %s (start make monitor%s): %w", d.prom, suffix, err)
	}
	if v == "none" {
		return fmt.Errorf("no reconciler up in Prometheus at %s (start make run%s)", d.prom, suffix)
	}
	return nil
}

// waitHealthy waits (at most limit) until s.healthy returns a sample and none of s's alerts
// is pending or firing.
func (d *drill) waitHealthy(ctx context.Context, s scenario, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		why := ""
		if v, err := d.value(ctx, s.healthy); err != nil {
			why = err.Error()
		} else if v == "none" {
			why = s.healthy + " does not hold"
		}
		for _, a := range s.alerts {
			if state, _, err := d.alertState(ctx, a); err == nil && state != "" && why == "" {
				why = a + " is " + state
			}
		}
		if why == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("after %s: %s", limit, why)
		case <-time.After(5 * time.Second):
		}
	}
}

// waitFiring polls Prometheus until every alert of s is firing or ctx ends, printing the
// watched expression meanwhile and each alert's entry once it fires.
func (d *drill) waitFiring(ctx context.Context, s scenario, t0 time.Time, out []result) {
	fmt.Printf("  waiting for %s to fire (Prometheus %s)\n", strings.Join(s.alerts, ", "), d.prom)
	for {
		pending := 0
		var states []string
		for i := range out {
			if out[i].fired {
				states = append(states, out[i].alert+": firing")
				continue
			}
			state, body, err := d.alertState(ctx, out[i].alert)
			if err != nil && ctx.Err() == nil {
				fmt.Println("  alerts unreadable:", err)
			}
			states = append(states, out[i].alert+": "+orInactive(state))
			if state == "firing" {
				out[i].fired, out[i].after = true, time.Since(t0)
				fmt.Printf("\n  GET %s/api/v1/alerts (%s):\n%s\n\n", d.prom, out[i].alert, indent(body))
				continue
			}
			pending++
		}
		v, _ := d.value(ctx, s.watch)
		fmt.Printf("  %4.0fs  %s = %s  %s\n", time.Since(t0).Seconds(), s.watch, v, strings.Join(states, ", "))
		if pending == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
	}
}

func indent(s string) string { return "    " + strings.ReplaceAll(s, "\n", "\n    ") }

// waitReady waits (at most two minutes) until the admin listener's /readyz says every
// dependency answers.
func (d *drill) waitReady(ctx context.Context) {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.admin+"/readyz", nil)
		if err == nil {
			if resp, err := d.http.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
	}
	fmt.Println("  the gateway is not ready yet; going on")
}

// sale creates an activity whose one session opens in a few seconds, preheats it and waits
// until it is open; it returns the session and prize ids.
func (d *drill) sale(ctx context.Context, name string, stockN int) (session, prize int64, err error) {
	start := time.Now().Add(3 * time.Second).UTC().Truncate(time.Second)
	s, err := d.adminClient().CreateSale(ctx, name, start, 20*time.Minute, []adminclient.Prize{{Name: "drill prize", Stock: stockN}})
	if err != nil {
		return 0, 0, err
	}
	session, prize = s.Session, s.Prizes[0]
	fmt.Printf("  activity %d: session %d, prize %d, stock %d, opens %s\n", s.Activity, session, prize, stockN, start.Format(time.RFC3339))
	select {
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	case <-time.After(time.Until(start) + 500*time.Millisecond):
	}
	return session, prize, nil
}

func (d *drill) adminClient() *adminclient.Client {
	return &adminclient.Client{Base: d.admin, Token: d.adminToken, HTTP: d.http}
}

// grab sends one grab as user and returns the HTTP status.
func (d *drill) grab(ctx context.Context, session, prize int64, user string) (int, error) {
	tok, err := d.signer.Token(user, time.Now(), time.Hour)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost,
		fmt.Sprintf("%s/api/v1/sessions/%d/prizes/%d/grab", d.gateway, session, prize), nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := d.http.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

func orInactive(s string) string {
	if s == "" {
		return "inactive"
	}
	return s
}

func (d *drill) get(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.prom+path, nil)
	if err != nil {
		return err
	}
	resp, err := d.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(out)
}

// alertState returns the alert's state in /api/v1/alerts and its entry as indented JSON.
func (d *drill) alertState(ctx context.Context, alert string) (string, string, error) {
	var body struct {
		Data struct {
			Alerts []map[string]any `json:"alerts"`
		} `json:"data"`
	}
	if err := d.get(ctx, "/api/v1/alerts", &body); err != nil {
		return "", "", err
	}
	// Several entries (one per instance or topic): a firing one wins.
	var best map[string]any
	for _, a := range body.Data.Alerts {
		if labels, _ := a["labels"].(map[string]any); labels["alertname"] == alert {
			if best == nil || a["state"] == "firing" {
				best = a
			}
		}
	}
	if best == nil {
		return "", "", nil
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	_ = enc.Encode(best)
	state, _ := best["state"].(string)
	return state, strings.TrimSpace(b.String()), nil
}

func (d *drill) value(ctx context.Context, expr string) (string, error) {
	var body struct {
		Data struct {
			Result []struct {
				Value []any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := d.get(ctx, "/api/v1/query?query="+url.QueryEscape(expr), &body); err != nil {
		return "", err
	}
	if len(body.Data.Result) == 0 || len(body.Data.Result[0].Value) < 2 {
		return "none", nil
	}
	return fmt.Sprint(body.Data.Result[0].Value[1]), nil
}
