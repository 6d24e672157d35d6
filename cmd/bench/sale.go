package main

import (
	"context"
	"fmt"
	"time"

	"github.com/seckill-pipeline/seckill/internal/harness"
	"github.com/seckill-pipeline/seckill/internal/load"
)

// How long after the last admission is the last order committed, in a whole sale? A
// 10,000-stock prize (1,000 with -quick), 20 % more grabs than stock (after one warm-up
// grab has come out as an order, so the consumers hold their partitions), through gateway,
// Kafka, two consumers and MySQL with the reconciler running. The consumers' histograms
// (scraped before and after) give the persistence stages; /proc gives every process's
// peak RSS.

const saleConsumers = 2

func (b *bench) sale(ctx context.Context, rep int) ([]measured, error) {
	stockN := 10_000
	if b.quick {
		stockN = 1000
	}
	// One unit more than the crowd's stock, for the warm-up grab.
	c, err := harness.NewPipeline(ctx, harness.Options{Bin: b.bin, Stocks: []int{stockN + 1}, Limit: 1, Consumers: 0,
		GatewayEnv: map[string]string{"SECKILL_RATE_PER_USER": "0", "SECKILL_JWT_SECRET": b.secret}})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	metricsURLs, err := b.startConsumers(ctx, c, saleConsumers, c.Env)
	if err != nil {
		return nil, err
	}
	scrapeAll := func() ([]series, error) {
		var all []series
		for _, u := range metricsURLs {
			ss, err := scrape(ctx, u, "")
			if err != nil {
				return nil, err
			}
			all = append(all, ss...)
		}
		return all, nil
	}

	requests := stockN * 12 / 10
	token, err := b.tokens(requests)
	if err != nil {
		return nil, err
	}
	url := fmt.Sprintf("http://%s/api/v1/sessions/%d/prizes/%d/grab", c.GatewayAddr, c.Session.ID, c.Prizes[0].ID)
	// A healthy consumer may not hold its partitions yet (the group's first rebalance takes
	// seconds): one grab must come out as an order before the sale starts, or the sale
	// would time the group joining.
	if err := b.warmUp(ctx, c, url); err != nil {
		return nil, err
	}
	before, err := scrapeAll()
	if err != nil {
		return nil, err
	}
	s := load.Run(ctx, load.Options{Requests: requests, Concurrency: concurrency},
		b.httpGrab(func(int) string { return url }, token, "sale"))
	deadline := time.Now().Add(2 * time.Minute)
	var sold int64
	for sold < int64(stockN)+1 && time.Now().Before(deadline) {
		if err := c.DB.Raw("SELECT COUNT(*) FROM orders WHERE status = 'succeeded'").Scan(&sold).Error; err != nil {
			return nil, fmt.Errorf("count sold orders (a failed count must not read as 'oversold 0'): %w", err)
		}
		if err := pause(ctx, 20*time.Millisecond); err != nil {
			return nil, err
		}
	}
	after, err := scrapeAll()
	if err != nil {
		return nil, err
	}
	var span struct{ LastAdmitted, LastCreated time.Time }
	if err := c.DB.Raw("SELECT MAX(admitted_at) AS last_admitted, MAX(created_at) AS last_created FROM orders").Scan(&span).Error; err != nil {
		return nil, fmt.Errorf("read the sale's span: %w", err)
	}
	lag := span.LastCreated.Sub(span.LastAdmitted).Seconds()
	b.logf("  %s; sold %d; last order %.3fs after the last admission", s, sold, lag)

	sc := sampleFrom(s)
	sc.Oversold = max(0, sold-int64(stockN)-1)
	sc.Extra["stock"] = stockN
	sc.Extra["sold"] = sold - 1 // the warm-up grab's order is not the crowd's
	sc.Extra["last_admission_to_last_order_s"] = lag
	if err := stageExtras(consumerStages(), before, after, sc.Extra); err != nil {
		return nil, err
	}
	if sc.Extra["gateway_peak_rss_mb"], err = peakRSSMB(c.Gateway.Pid()); err != nil {
		return nil, err
	}
	if sc.Extra["reconciler_peak_rss_mb"], err = peakRSSMB(c.Reconciler.Pid()); err != nil {
		return nil, err
	}
	var consumerRSS float64
	for _, p := range c.Consumers {
		mb, err := peakRSSMB(p.Pid())
		if err != nil {
			return nil, err
		}
		consumerRSS = max(consumerRSS, mb)
	}
	sc.Extra["consumer_peak_rss_mb"] = consumerRSS
	name := fmt.Sprintf("whole sale through the pipeline (stock %d, %d grabs, %d consumers)", stockN, requests, saleConsumers)
	return []measured{{keySale, name, sc}}, nil
}

// warmUp grabs one unit as a user outside the crowd and waits for its order in MySQL.
func (b *bench) warmUp(ctx context.Context, c *harness.Pipeline, url string) error {
	tok, err := b.signer.Token("bench-warm-up", time.Now(), time.Hour)
	if err != nil {
		return err
	}
	code, err := b.httpGrab(func(int) string { return url }, func(int) string { return tok }, "warm")(ctx, 0)
	if err != nil {
		return fmt.Errorf("warm-up grab: %w", err)
	}
	if code != 202 {
		return fmt.Errorf("warm-up grab answered %d", code)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		var n int64
		if err := c.DB.Raw("SELECT COUNT(*) FROM orders").Scan(&n).Error; err != nil {
			return fmt.Errorf("count the warm-up order: %w", err)
		}
		if n > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the warm-up grab was not persisted within 90 s")
		}
		if err := pause(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}
