package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/seckill-pipeline/seckill/internal/harness"
	"github.com/seckill-pipeline/seckill/pkg/event"
)

// The cluster profile's bench (make bench PROFILE=cluster): one seeded crowd, the same for
// every row, through HAProxy at the full pipeline (Redis Cluster, three brokers, three
// consumers, MySQL), with one gateway vs two, and the topics replicated three times with
// min ISR 2 vs held by one broker. It prints numbers; nothing is asserted on time.

type clusterRow struct {
	name     string
	gateways int
	repl     event.Replication
}

func clusterBench(ctx context.Context, out io.Writer, quick bool) error {
	bin, err := os.MkdirTemp("", "seckill-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(bin)
	if err := harness.Build(bin); err != nil {
		return err
	}
	size := harness.Full
	if quick {
		size = harness.Small
	}
	rows := []clusterRow{
		{"1 gateway, RF 3 / min ISR 2", 1, event.Replication{Factor: 3, MinInSync: 2}},
		{"2 gateways, RF 3 / min ISR 2", 2, event.Replication{Factor: 3, MinInSync: 2}},
		{"2 gateways, RF 1 (one broker)", 2, event.Replication{Factor: 1, MinInSync: 1}},
	}
	const seed = 7
	fmt.Fprintf(out, "cluster bench: %d grabs from %d users on stocks %v, %d concurrent clients, through HAProxy\n\n",
		size.Requests, size.Users, size.Stocks, size.Concurrency)
	fmt.Fprintf(out, "| %-30s | %9s | %7s | %7s | %7s | %6s | %6s | %9s |\n", "setup", "grabs/s", "p50 ms", "p99 ms", "max ms", "202s", "orders", "drain ms")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|---|")
	var rates []float64
	var cpus []map[string]float64
	for _, r := range rows {
		repl := r.repl
		c, err := harness.NewPipeline(ctx, harness.Options{Bin: bin, Stocks: size.Stocks, Limit: 1, Consumers: 3,
			Gateways: r.gateways, BehindProxy: true, Reconcilers: 1, Replication: &repl})
		if err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
		procs := clusterProcs(c, out)
		before, err := cpuTimes(procs)
		if err != nil {
			c.Close()
			return err
		}
		rate, answered, err := clusterRun(ctx, c, size, seed, r.name, out)
		if err == nil {
			var after []time.Duration
			if after, err = cpuTimes(procs); err == nil {
				cpus = append(cpus, cpuPerGrab(procs, before, after, answered))
			}
		}
		c.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
		rates = append(rates, rate)
	}
	fmt.Fprintf(out, "\n2 gateways / 1 gateway: %.2fx; RF 3 + min ISR 2 / RF 1: %.2fx (grabs/s)\n", rates[1]/rates[0], rates[1]/rates[2])
	clusterCPUTable(out, rows, cpus)
	return nil
}

// clusterCPUTable prints CPU µs per answered grab per process kind for each row, from the
// crowd's first click until its orders were drained (the cost model's replication
// columns, docs/performance.md: RF 3 against RF 1 with the same gateways).
func clusterCPUTable(out io.Writer, rows []clusterRow, cpus []map[string]float64) {
	fmt.Fprintf(out, "\nCPU µs per answered grab, crowd and drain (utime+stime from /proc; a process kind not found is left out):\n\n")
	fmt.Fprintf(out, "| %-30s |", "setup")
	for _, k := range clusterCPUKinds {
		fmt.Fprintf(out, " %10s |", k)
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "|---"+strings.Repeat("|---", len(clusterCPUKinds))+"|")
	for i, m := range cpus {
		fmt.Fprintf(out, "| %-30s |", rows[i].name)
		for _, k := range clusterCPUKinds {
			if v, ok := m["cpu_us_per_grab_"+k]; ok {
				fmt.Fprintf(out, " %10.1f |", v)
			} else {
				fmt.Fprintf(out, " %10s |", "–")
			}
		}
		fmt.Fprintln(out)
	}
}

var clusterCPUKinds = []string{"gateway", "haproxy", "consumer", "reconciler", "redis", "kafka", "mysql", "generator", "total"}

// clusterProcs are every process of one cluster row: the pipeline's own and the cluster
// profile's servers, found by their listening sockets (Redis and MySQL nodes from the
// profile's variables).
func clusterProcs(c *harness.Pipeline, out io.Writer) []cpuProc {
	pids := func(ps ...*harness.Proc) []int {
		var out []int
		for _, p := range ps {
			if p != nil {
				out = append(out, p.Pid())
			}
		}
		return out
	}
	gateways := c.Gateways
	if len(gateways) == 0 {
		gateways = []*harness.Proc{c.Gateway}
	}
	procs := []cpuProc{{"gateway", pids(gateways...)}, {"consumer", pids(c.Consumers...)},
		{"reconciler", pids(c.Reconcilers...)}, {"generator", []int{os.Getpid()}}}
	for _, s := range []struct {
		name  string
		addrs []string
	}{
		{"haproxy", []string{c.GatewayAddr}},
		{"redis", strings.Split(envOr("SECKILL_CLUSTER_REDIS_ADDR", envOr("SECKILL_REDIS_ADDR", "")), ",")},
		{"kafka", c.Brokers},
		{"mysql", strings.Split(envOr("SECKILL_CLUSTER_MYSQL_NODES", ""), ",")},
	} {
		found, err := listeners(s.addrs)
		if err != nil || len(found) == 0 {
			fmt.Fprintf(out, "CPU of %s not measured: no process found listening on %v (%v)\n", s.name, s.addrs, err)
			continue
		}
		procs = append(procs, cpuProc{s.name, found})
	}
	return procs
}

// clusterRun fires the crowd and drains its orders; it returns grabs/s and how many grabs
// were answered.
func clusterRun(ctx context.Context, c *harness.Pipeline, size harness.Size, seed uint64, name string, out io.Writer) (float64, int, error) {
	tokens := make([]string, size.Users)
	for i := range tokens {
		var err error
		if tokens[i], err = c.Token(fmt.Sprintf("crowd-%d", i)); err != nil {
			return 0, 0, err
		}
	}
	prizes := make([]int64, len(c.Prizes))
	for i, p := range c.Prizes {
		prizes[i] = p.ID
	}
	crowd := &harness.Crowd{Target: "http://" + c.GatewayAddr, Concurrency: size.Concurrency, RetryBudget: 25 * time.Second,
		Tokens: func(u int) string { return tokens[u] }, Prizes: prizes, Session: c.Session.ID}
	clicks := harness.Plan(seed, size.Requests, size.Users, len(prizes), 0.1)
	start := time.Now()
	answers := crowd.Fire(ctx, clicks, nil)
	took := time.Since(start)
	lat := make([]time.Duration, 0, len(answers))
	accepted := 0
	for _, a := range answers {
		lat = append(lat, a.Latency)
		if a.Code == 202 {
			accepted++
		}
	}
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	d := time.Now()
	if err := c.Drain(ctx, 60*time.Second); err != nil {
		return 0, 0, err
	}
	drain := time.Since(d)
	var orders int64
	if err := c.DB.Raw("SELECT COUNT(*) FROM orders").Row().Scan(&orders); err != nil {
		return 0, 0, err
	}
	rate := float64(len(answers)) / took.Seconds()
	fmt.Fprintf(out, "| %-30s | %9.0f | %7.1f | %7.1f | %7.1f | %6d | %6d | %9d |\n", name, rate, pct(0.5), pct(0.99), pct(1), accepted, orders, drain.Milliseconds())
	return rate, len(answers), nil
}
