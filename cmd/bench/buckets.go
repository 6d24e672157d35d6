package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"

	"github.com/seckill-pipeline/seckill/internal/harness"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/stock"
)

// Does one hot prize go faster when its stock is split into buckets (docs/design.md)? The
// buckets step answers on each profile what that profile can show:
//
//   - single profile: Kafka → MySQL orders/s of one hot prize with 1, 2 and 4 buckets, one
//     consumer (drainHotPrize, persistence.go). Each bucket is its own grab partition,
//     consumer worker and stock row, so the one serial part becomes n side by side.
//   - cluster profile (make bench PROFILE=cluster BENCH_FLAGS='-only buckets'): gateway
//     admissions/s of one hot prize whose one bucket is on one Redis primary, against three
//     buckets on three different primaries; two gateways behind HAProxy, no consumers
//     (admission alone, as the gateway step).
//
// Within a repetition the bucket counts run in rotated order (1, 2, 4; then 2, 4, 1; ...),
// so drift over time does not favour one of them; ratios to one bucket are computed within
// the repetition. CPU per order (or per grab) per process is reported for each count, for
// the cost model. Placement is the product's (docs/design.md, Placement): a prize's N ≤ P
// buckets are on N grab partitions (event.GrabBalancer), and N buckets' hash tags on the N
// primaries of an evenly split cluster of N (stock.BucketKeysFor). The step takes the first
// prize and checks that its buckets are spread, failing the run if not: it no longer picks
// a lucky prize among candidates, so a placement that regressed shows here.

// bucketCounts are the single profile's bucket counts.
var bucketCounts = []int{1, 2, 4}

// clusterSpread is the cluster profile's Redis primaries, and so the buckets of the spread
// prize (one per primary).
const clusterSpread = 3

func keyBucketsKafkaMySQL(n int) string { return "buckets_kafka_mysql_" + strconv.Itoa(n) }
func keyBucketsGateway(n int) string    { return "buckets_cluster_gateway_" + strconv.Itoa(n) }

// rotate returns xs turned left by k.
func rotate[T any](xs []T, k int) []T {
	if len(xs) == 0 {
		return nil
	}
	k %= len(xs)
	return append(slices.Clone(xs[k:]), xs[:k]...)
}

// buckets is the single profile's step: Kafka → MySQL for every count in bucketCounts.
func (b *bench) buckets(ctx context.Context, rep int) ([]measured, error) {
	var out []measured
	for _, n := range rotate(bucketCounts, rep-1) {
		d, err := b.drainHotPrize(ctx, n)
		if err != nil {
			return nil, fmt.Errorf("%d bucket(s): %w", n, err)
		}
		line := d.line()
		if skew, ok := d.s.Extra["bucket_start_skew_s"].(float64); ok {
			line += fmt.Sprintf("; the last bucket's first order %.3fs after the first's", skew)
		}
		b.logf("  kafka → mysql, %d bucket(s): %s", n, line)
		d.s.Extra["buckets"] = n
		d.s.Extra["partitions"] = len(slices.Compact(slices.Sorted(slices.Values(d.partitions))))
		if total, ok := cpuTotal(d.s.Extra, "cpu_us_per_order_", orderProcs...); ok {
			d.s.Extra["cpu_us_per_order_total"] = total
		}
		out = append(out, measured{keyBucketsKafkaMySQL(n),
			fmt.Sprintf("buckets: Kafka → MySQL, one hot prize, %d bucket(s) on as many grab partitions, one consumer", n), d.s})
	}
	return sortedByKey(out, bucketCounts, keyBucketsKafkaMySQL), nil
}

// sortedByKey puts a repetition's rows in the order of counts, so the report lists them
// the same way whichever ran first.
func sortedByKey(ms []measured, counts []int, key func(int) string) []measured {
	var out []measured
	for _, n := range counts {
		for _, m := range ms {
			if m.key == key(n) {
				out = append(out, m)
			}
		}
	}
	return out
}

// cpuTotal sums the numeric extras prefix+process over procs; false when one is missing
// (a process the bench could not find), so a partial sum is never printed as the total.
func cpuTotal(extra map[string]any, prefix string, procs ...string) (float64, bool) {
	total := 0.0
	for _, p := range procs {
		f, ok := number(extra[prefix+p])
		if !ok {
			return 0, false
		}
		total += f
	}
	return total, true
}

// orderProcs are the processes whose CPU per order the Kafka → MySQL rows measure.
var orderProcs = []string{"consumer", "mysql", "kafka"}

// homeUser is a crowd member and the bucket their grabs are admitted in.
type homeUser struct {
	user   string
	bucket int
}

// assignUsers returns users u0, u1, ... kept only while their home bucket (stock.HomeBucket)
// still has a unit of its share, until every bucket's share is filled: every preloaded
// event then fits its bucket's row, as the gateway would have admitted it. One bucket
// gives u0..u(n-1), the crowd the persistence step has always used.
func assignUsers(shares []int) ([]homeUser, error) {
	need, total := slices.Clone(shares), 0
	for _, s := range shares {
		total += s
	}
	out := make([]homeUser, 0, total)
	// FNV-1a spreads users evenly, so about total candidates fill every share; the bound
	// only keeps a broken hash from looping for ever.
	limit := 4*total + 1000
	for j := 0; len(out) < total; j++ {
		if j >= limit {
			return nil, fmt.Errorf("%d candidate users did not fill the buckets' shares %v (still needed: %v)", limit, shares, need)
		}
		u := "u" + strconv.Itoa(j)
		if hb := stock.HomeBucket(u, len(shares)); need[hb] > 0 {
			need[hb]--
			out = append(out, homeUser{u, hb})
		}
	}
	return out, nil
}

// bucketPlan returns the grab partition of each of a prize's n buckets (where
// event.PartitionOf, and so the grab writers, put their keys), and an error unless they are
// n different partitions: for n ≤ partitions the placement promises that.
func bucketPlan(sessionID, prize int64, n, partitions int) ([]int, error) {
	on := make([]int, n)
	seen := map[int]bool{}
	for b := range n {
		on[b] = event.PartitionOf(event.BucketPartitionKey(sessionID, prize, b), partitions)
		seen[on[b]] = true
	}
	if len(seen) != n {
		return on, fmt.Errorf("prize %d's %d buckets are on grab partitions %v (of %d), not %d different ones", prize, n, on, partitions, n)
	}
	return on, nil
}

// checkBucketOrders compares the orders persisted per bucket with the buckets' shares.
func checkBucketOrders(c *harness.Pipeline, shares []int) error {
	var rows []struct{ Bucket, N int }
	if err := c.DB.Raw("SELECT bucket, COUNT(*) AS n FROM orders GROUP BY bucket ORDER BY bucket").Scan(&rows).Error; err != nil {
		return fmt.Errorf("count orders per bucket: %w", err)
	}
	got := make([]int, len(shares))
	for _, r := range rows {
		if r.Bucket < 0 || r.Bucket >= len(shares) {
			return fmt.Errorf("orders in bucket %d of %d", r.Bucket, len(shares))
		}
		got[r.Bucket] = r.N
	}
	if !slices.Equal(got, shares) {
		return fmt.Errorf("orders per bucket %v, want the shares %v", got, shares)
	}
	return nil
}

// bucketStartSkew is how long after the first bucket's first order the last bucket's
// first order came: the consumer's partition workers starting at different times, which
// the orders/s of a drain (first order to last) includes.
func bucketStartSkew(c *harness.Pipeline) (float64, error) {
	var rows []struct{ First time.Time }
	if err := c.DB.Raw("SELECT MIN(created_at) AS first FROM orders GROUP BY bucket").Scan(&rows).Error; err != nil {
		return 0, fmt.Errorf("read each bucket's first order: %w", err)
	}
	if len(rows) == 0 {
		return 0, fmt.Errorf("no bucket has an order")
	}
	lo, hi := rows[0].First, rows[0].First
	for _, r := range rows[1:] {
		if r.First.Before(lo) {
			lo = r.First
		}
		if r.First.After(hi) {
			hi = r.First
		}
	}
	return hi.Sub(lo).Seconds(), nil
}

// ---------------------------------------------------------------- cluster profile

// slotRange is one range of the Redis Cluster's slot map and the primary serving it.
type slotRange struct {
	start, end int64
	primary    string
}

// readSlotMap reads CLUSTER SLOTS: the first node of each range is its primary.
func readSlotMap(ctx context.Context, rdb redis.UniversalClient) ([]slotRange, error) {
	slots, err := rdb.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("CLUSTER SLOTS: %w", err)
	}
	var out []slotRange
	for _, s := range slots {
		if len(s.Nodes) == 0 {
			return nil, fmt.Errorf("CLUSTER SLOTS: slots %d-%d without a node", s.Start, s.End)
		}
		out = append(out, slotRange{int64(s.Start), int64(s.End), s.Nodes[0].Addr})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("CLUSTER SLOTS: no slots")
	}
	return out, nil
}

// primaryOf names the primary serving slot.
func primaryOf(m []slotRange, slot int64) (string, error) {
	for _, r := range m {
		if slot >= r.start && slot <= r.end {
			return r.primary, nil
		}
	}
	return "", fmt.Errorf("slot %d is in no range of the slot map", slot)
}

// distinct counts the different strings of xs.
func distinct(xs []string) int { return len(slices.Compact(slices.Sorted(slices.Values(xs)))) }

// placement is where a prize's buckets live: each bucket's slot and primary.
type placement struct {
	slots     []int64
	primaries []string
}

func (p placement) String() string {
	parts := make([]string, len(p.slots))
	for b := range p.slots {
		parts[b] = fmt.Sprintf("bucket %d: slot %d on %s", b, p.slots[b], p.primaries[b])
	}
	return strings.Join(parts, "; ")
}

// placeBuckets asks the cluster for the slot of each bucket's keys (CLUSTER KEYSLOT of
// its meta key; every key of a bucket shares its hash tag) and maps it to its primary.
func placeBuckets(ctx context.Context, rdb redis.UniversalClient, m []slotRange, sessionID, prizeID int64, n int) (placement, error) {
	var p placement
	for b := range n {
		slot, err := rdb.ClusterKeySlot(ctx, stock.BucketKeysFor(sessionID, prizeID, b, n).Meta).Result()
		if err != nil {
			return p, fmt.Errorf("CLUSTER KEYSLOT of bucket %d: %w", b, err)
		}
		primary, err := primaryOf(m, slot)
		if err != nil {
			return p, err
		}
		p.slots, p.primaries = append(p.slots, slot), append(p.primaries, primary)
	}
	return p, nil
}

// clusterTarget is one cluster row: a prize of n buckets and where they live.
type clusterTarget struct {
	n     int
	prize int64
	place placement
}

// clusterBuckets is the cluster profile's step: admissions/s of one prize on one primary
// against one spread over three, through two gateways behind HAProxy.
func (b *bench) clusterBuckets(ctx context.Context, rep int) ([]measured, error) {
	const stockN = 9_000_000 // per prize: no window sells a bucket out
	stocks, bk := make([]int, 2), make([]int, 2)
	for i := range stocks {
		stocks[i], bk[i] = stockN, clusterSpread
	}
	bk[0] = 1
	repl := event.Replication{Factor: 3, MinInSync: 2}
	c, err := harness.NewPipeline(ctx, harness.Options{Bin: b.bin, Stocks: stocks, Buckets: bk, Limit: 1, Consumers: 0,
		Gateways: 2, BehindProxy: true, Replication: &repl,
		GatewayEnv: map[string]string{"SECKILL_RATE_PER_USER": "0", "SECKILL_MAX_INFLIGHT": "100000", "SECKILL_JWT_SECRET": b.secret}})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	// Admission alone, as the gateway step: without consumers every admission stays a
	// reservation, which the reconcilers would spend the run re-checking.
	for _, r := range c.Reconcilers {
		// Stop kills after the timeout, so the reconciler is gone either way; an unclean
		// exit is logged, not hidden.
		if err := r.Stop(10 * time.Second); err != nil {
			b.logf("  stopping the reconciler before admission alone: %v", err)
		}
	}
	m, err := readSlotMap(ctx, c.Redis)
	if err != nil {
		return nil, err
	}
	var all []string
	for _, r := range m {
		all = append(all, r.primary)
	}
	if got := distinct(all); got != clusterSpread {
		return nil, fmt.Errorf("the Redis Cluster has %d primaries, the step spreads over %d", got, clusterSpread)
	}
	one, err := placeBuckets(ctx, c.Redis, m, c.Session.ID, c.Prizes[0].ID, 1)
	if err != nil {
		return nil, err
	}
	spread, err := placeBuckets(ctx, c.Redis, m, c.Session.ID, c.Prizes[1].ID, clusterSpread)
	if err != nil {
		return nil, err
	}
	if distinct(spread.primaries) != clusterSpread {
		return nil, fmt.Errorf("prize %d's %d buckets are not on %d different primaries (%s): placement (stock.BucketKeysFor) failed its promise",
			c.Prizes[1].ID, clusterSpread, clusterSpread, spread)
	}
	targets := []clusterTarget{{1, c.Prizes[0].ID, one}, {clusterSpread, c.Prizes[1].ID, spread}}
	for _, t := range targets {
		b.logf("  prize %d, %d bucket(s): %s", t.prize, t.n, t.place)
	}
	procs, err := b.clusterAdmissionProcs(c)
	if err != nil {
		return nil, err
	}
	users := b.userFeed()
	var out []measured
	for _, t := range rotate(targets, rep-1) {
		s, err := b.clusterAdmissions(ctx, c, t, users, procs)
		if err != nil {
			return nil, fmt.Errorf("%d bucket(s): %w", t.n, err)
		}
		name := "buckets (cluster): gateway admissions/s, one hot prize in one bucket on one Redis primary, 2 gateways behind HAProxy"
		if t.n > 1 {
			name = fmt.Sprintf("buckets (cluster): gateway admissions/s, one hot prize in %d buckets on %d primaries, 2 gateways behind HAProxy",
				t.n, distinct(t.place.primaries))
		}
		out = append(out, measured{keyBucketsGateway(t.n), name, s})
	}
	return sortedByKey(out, []int{1, clusterSpread}, keyBucketsGateway), nil
}

// clusterAdmissionKinds are the processes a cluster admission row accounts CPU to.
var clusterAdmissionKinds = []string{"gateway", "haproxy", "redis", "kafka", "generator"}

// clusterAdmissionProcs are the processes admission runs on: the cluster bench's list
// without the consumers (none run) and the reconcilers (stopped) and MySQL (not on the
// admission path).
func (b *bench) clusterAdmissionProcs(c *harness.Pipeline) ([]cpuProc, error) {
	var out []cpuProc
	for _, p := range clusterProcs(c, b.out) {
		if slices.Contains(clusterAdmissionKinds, p.name) {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no process of %v found", clusterAdmissionKinds)
	}
	return out, nil
}

// clusterAdmissions finds the closed-loop max of grabs for one prize (best of the gateway
// step's client counts) and checks that it measured admissions: nearly every answer a 202,
// and every bucket still holding units and having admitted some.
func (b *bench) clusterAdmissions(ctx context.Context, c *harness.Pipeline, t clusterTarget, users feed, procs []cpuProc) (*sample, error) {
	grabURL := fmt.Sprintf("http://%s/api/v1/sessions/%d/prizes/%d/grab", c.GatewayAddr, c.Session.ID, t.prize)
	url := func(int) string { return grabURL }
	var best *sample
	for _, conc := range gatewayConcurrencies {
		s, per, err := b.closedWindow(ctx, conc, url, users, fmt.Sprintf("bk%d-", t.n), procs, nil)
		if err != nil {
			return nil, err
		}
		b.logf("  %d bucket(s), closed loop, concurrency %d: %s; %s", t.n, conc, s, cpuLineOf(per, append(clusterAdmissionKinds, "total")))
		if err := admittedAll(s.Codes, s.Requests); err != nil {
			return nil, err
		}
		if best == nil || s.ThroughputPS > best.ThroughputPS {
			best = sampleFrom(s)
			best.Extra["concurrency"] = conc
			for k, v := range per {
				best.Extra[k] = v
			}
		}
	}
	if best == nil || !(best.ThroughputPS > 0) {
		return nil, fmt.Errorf("the gateways admitted nothing in the closed loop")
	}
	states, err := c.Gate.Buckets(ctx, c.Session.ID, t.prize, t.n)
	if err != nil {
		return nil, err
	}
	admitted := make([]int64, len(states))
	for i, st := range states {
		if !st.Loaded || st.Left <= 0 {
			return nil, fmt.Errorf("bucket %d ran dry or is not loaded (%+v): admissions would have met sold-out answers", i, st)
		}
		admitted[i] = st.Total - st.Left
	}
	share, err := busiestShare(admitted)
	if err != nil {
		return nil, err
	}
	best.Extra["buckets"] = t.n
	best.Extra["primaries"] = distinct(t.place.primaries)
	best.Extra["busiest_bucket_share"] = share
	best.Extra["placement"] = t.place.String()
	return best, nil
}

// admittedAll refuses a window whose answers are not nearly all 202: on a stock no window
// sells out, anything else (503 rebalancing, errors) means the row would not measure
// admissions.
func admittedAll(codes map[string]int, requests int) error {
	if requests <= 0 || float64(codes["202"]) < 0.99*float64(requests) {
		return fmt.Errorf("%d of %d grabs admitted (codes %v): not a measurement of admissions", codes["202"], requests, codes)
	}
	return nil
}

// busiestShare is the largest bucket's part of everything admitted: 1/n when the crowd's
// home buckets spread evenly, 1 with one bucket.
func busiestShare(admitted []int64) (float64, error) {
	var total, top int64
	for i, a := range admitted {
		if a <= 0 {
			return 0, fmt.Errorf("bucket %d admitted nothing (%v): the crowd did not reach every bucket", i, admitted)
		}
		total, top = total+a, max(top, a)
	}
	if total == 0 {
		return 0, fmt.Errorf("no bucket admitted anything")
	}
	return float64(top) / float64(total), nil
}

// ---------------------------------------------------------------- report

// bucketsSection is results.md's bucket tables, one per profile that ran the step; empty
// when neither did. A figure a row lacks prints as "–", never 0.
func (r report) bucketsSection() string {
	var kafka, gw []*row
	for _, n := range bucketCounts {
		if x := r.find(keyBucketsKafkaMySQL(n)); x != nil {
			kafka = append(kafka, x)
		}
	}
	for _, n := range []int{1, clusterSpread} {
		if x := r.find(keyBucketsGateway(n)); x != nil {
			gw = append(gw, x)
		}
	}
	if len(kafka) == 0 && len(gw) == 0 {
		return ""
	}
	ex := func(x *row, k string) string {
		if v, ok := x.Extra[k]; ok && !math.IsNaN(v.Median) {
			return spr(v)
		}
		return "–"
	}
	ratio := func(x *row) string {
		if v, ok := x.Ratios["over_one_bucket"]; ok {
			return spr(v) + "×"
		}
		if x.Extra["buckets"].Median == 1 {
			return "1×"
		}
		return "–"
	}
	var b strings.Builder
	b.WriteString("\n## Stock buckets: one hot prize split into buckets\n\n")
	if len(kafka) > 0 {
		b.WriteString("Kafka → MySQL with one consumer: the grab topic preloaded with one prize's events, each bucket's on its own " +
			"grab partition (placement puts a prize's N buckets on N partitions; the step checks it and fails otherwise), orders/s from the first " +
			"order committed to the last. *Over 1 bucket* is computed within each repetition. CPU per order: utime + stime from " +
			"/proc from the consumer's start to its last order; a process not found is \"–\", not 0.\n\n" +
			"| buckets | grab partitions | orders/s | over 1 bucket | CPU µs/order: consumer | MySQL | Kafka | total |\n" +
			"|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, x := range kafka {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", ex(x, "buckets"), ex(x, "partitions"), spr(x.ThroughputPS),
				ratio(x), ex(x, "cpu_us_per_order_consumer"), ex(x, "cpu_us_per_order_mysql"), ex(x, "cpu_us_per_order_kafka"),
				ex(x, "cpu_us_per_order_total"))
		}
	}
	if len(gw) > 0 {
		if len(kafka) > 0 {
			b.WriteString("\n")
		}
		b.WriteString("Cluster profile, admission alone (two gateways behind HAProxy, no consumers): closed-loop max of grabs/s " +
			"(best of 64, 256, 768 clients, every request a new user) for a prize whose one bucket is on one Redis primary, and " +
			"for one whose buckets' hash tags are on three different primaries (CLUSTER KEYSLOT and the slot map, read in each " +
			"repetition). *Busiest bucket's share*: the largest bucket's part of the admissions (1/3 is an even spread). CPU per " +
			"answered grab in the window that set the max.\n\n" +
			"| buckets | Redis primaries | admissions/s | over 1 bucket | busiest bucket's share | CPU µs/grab: gateways | HAProxy | Redis nodes | Kafka brokers | generator | total |\n" +
			"|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, x := range gw {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", ex(x, "buckets"), ex(x, "primaries"),
				spr(x.ThroughputPS), ratio(x), ex(x, "busiest_bucket_share"), ex(x, "cpu_us_per_grab_gateway"),
				ex(x, "cpu_us_per_grab_haproxy"), ex(x, "cpu_us_per_grab_redis"), ex(x, "cpu_us_per_grab_kafka"),
				ex(x, "cpu_us_per_grab_generator"), ex(x, "cpu_us_per_grab_total"))
		}
		b.WriteString("\nWhere each bucket was, per repetition:\n\n")
		for _, x := range gw {
			for _, s := range x.Runs {
				if p, ok := s.Extra["placement"].(string); ok {
					fmt.Fprintf(&b, "- repetition %d, %s bucket(s): %s\n", s.Rep, ex(x, "buckets"), p)
				}
			}
		}
	}
	return b.String()
}

// bucketsChart: the rows of the buckets step side by side (orders/s on the single
// profile, admissions/s on the cluster profile), log scale.
func bucketsChart(r report) (*plot.Plot, error) {
	var vals []spread
	var labels []string
	for _, n := range bucketCounts {
		if x := r.find(keyBucketsKafkaMySQL(n)); x != nil {
			vals, labels = append(vals, x.ThroughputPS), append(labels, fmt.Sprintf("Kafka → MySQL\n%d bucket(s)\norders/s", n))
		}
	}
	for _, n := range []int{1, clusterSpread} {
		if x := r.find(keyBucketsGateway(n)); x != nil {
			vals, labels = append(vals, x.ThroughputPS), append(labels, fmt.Sprintf("cluster admissions\n%d bucket(s)\ngrabs/s", n))
		}
	}
	if len(vals) == 0 {
		return nil, nil
	}
	p := rateBars("One hot prize split into stock buckets", "per second (log scale; whiskers: min–max over repetitions)",
		vals, labels, green)
	if p != nil {
		p.X.Tick.Label.Font.Size = vg.Points(9)
	}
	return p, nil
}
