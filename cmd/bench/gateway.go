package main

import (
	"context"
	"fmt"
	"time"

	"github.com/seckill-pipeline/seckill/internal/load"
	"github.com/seckill-pipeline/seckill/pkg/config"
)

// How many grabs per second does the gateway admit, and what latency does a client see as
// the offered load approaches that? The gateway with Redis and Kafka and no consumers
// (admission alone): a closed-loop sweep finds the max; then an open loop at 10, 25, 50, 75
// and 90 % of that max, each request timed from when it was due. Around every open-loop
// level the bench scrapes the gateway's own histograms (the admin listener's /metrics) for
// the per-stage breakdown.

// gatewayConcurrencies are the closed-loop client counts swept for the max.
var gatewayConcurrencies = []int{64, 256, 768}

// levelSeconds is how long each open-loop level offers load.
func (b *bench) levelSeconds() float64 {
	if b.quick {
		return 2
	}
	return 6
}

func (b *bench) gateway(ctx context.Context, rep int) ([]measured, error) {
	c, adminAddr, done, err := b.curvePipeline(ctx, 9_000_000)
	if err != nil {
		return nil, err
	}
	defer done()
	// Without consumers every admission stays a reservation; the reconciler would spend the
	// run re-checking them. Admission alone is measured here.
	_ = c.Reconciler.Stop(10 * time.Second)
	metricsURL, adminToken := "http://"+adminAddr+"/metrics", c.Env["SECKILL_ADMIN_TOKEN"]
	grabURL := fmt.Sprintf("http://%s/api/v1/sessions/%d/prizes/%d/grab", c.GatewayAddr, c.Session.ID, c.Prizes[0].ID)
	url := func(int) string { return grabURL }
	pid := c.Gateway.Pid()
	procs := b.cpuProcs(pid, envOr("SECKILL_REDIS_ADDR", config.DefaultRedisAddr), c.Brokers)

	next := b.userFeed()

	var best load.Summary
	var bestConc int
	var cpu map[string]float64
	for _, conc := range gatewayConcurrencies {
		s, per, err := b.closedWindow(ctx, conc, url, next, "gw", procs, nil)
		if err != nil {
			return nil, err
		}
		b.logf("  closed loop, concurrency %d: %s; %s", conc, s, cpuLine(per))
		if s.ThroughputPS > best.ThroughputPS {
			best, bestConc, cpu = s, conc, per
		}
	}
	if best.ThroughputPS == 0 {
		return nil, fmt.Errorf("gateway served nothing in the closed loop")
	}
	// VmHWM right after the closed loop: the peak RSS at the max rate.
	rss, err := peakRSSMB(pid)
	if err != nil {
		return nil, err
	}
	gs := sampleFrom(best)
	gs.Extra["concurrency"] = bestConc
	for k, v := range cpu {
		gs.Extra[k] = v
	}
	gs.Extra["gateway_peak_rss_mb"] = rss
	out := []measured{{keyGatewayMax, "gateway: grabs/s, closed loop (best of 64, 256, 768 clients)", gs}}

	for _, pct := range openLevels {
		before, err := scrape(ctx, metricsURL, adminToken)
		if err != nil {
			return nil, err
		}
		sm, err := b.openLevel(ctx, pct, best.ThroughputPS, url, next, "open")
		if err != nil {
			return nil, err
		}
		after, err := scrape(ctx, metricsURL, adminToken)
		if err != nil {
			return nil, err
		}
		if err := stageExtras(gatewayStages(), before, after, sm.Extra); err != nil {
			return nil, err
		}
		out = append(out, measured{keyOpen(pct), fmt.Sprintf("gateway: open loop at %d%% of max", pct), sm})
		if err := pause(ctx, time.Second); err != nil {
			return nil, err
		}
	}
	if b.profileDir != "" {
		if err := b.profileGateway(ctx, adminAddr, adminToken, bestConc, best.ThroughputPS, url, next, rep); err != nil {
			return out, err
		}
	}
	return out, nil
}
