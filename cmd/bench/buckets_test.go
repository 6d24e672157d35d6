package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

func TestRotate(t *testing.T) {
	for k, want := range [][]int{{1, 2, 4}, {2, 4, 1}, {4, 1, 2}, {1, 2, 4}} {
		if got := rotate(bucketCounts, k); !slices.Equal(got, want) {
			t.Errorf("rotate(%v, %d) = %v, want %v", bucketCounts, k, got, want)
		}
	}
	if !slices.Equal(bucketCounts, []int{1, 2, 4}) {
		t.Fatalf("rotate changed its input: %v", bucketCounts)
	}
}

func TestAssignUsers(t *testing.T) {
	t.Run("one bucket is the persistence step's crowd", func(t *testing.T) {
		got, err := assignUsers([]int{500})
		if err != nil {
			t.Fatal(err)
		}
		for j, u := range got {
			if u != (homeUser{fmt.Sprintf("u%d", j), 0}) {
				t.Fatalf("user %d = %+v, want u%d in bucket 0", j, u, j)
			}
		}
		if len(got) != 500 {
			t.Fatalf("%d users, want 500", len(got))
		}
	})
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("%d buckets: every share filled by users at home there", n), func(t *testing.T) {
			shares := store.Split(4001, n)
			got, err := assignUsers(shares)
			if err != nil {
				t.Fatal(err)
			}
			per, seen := make([]int, n), map[string]bool{}
			for _, u := range got {
				if hb := stock.HomeBucket(u.user, n); hb != u.bucket {
					t.Fatalf("%s put in bucket %d, its home is %d", u.user, u.bucket, hb)
				}
				if seen[u.user] {
					t.Fatalf("%s twice", u.user)
				}
				seen[u.user] = true
				per[u.bucket]++
			}
			if !slices.Equal(per, shares) {
				t.Fatalf("users per bucket %v, want the shares %v", per, shares)
			}
		})
	}
}

// Every prize passes the check for the step's bucket counts (placement spreads them; the
// bench no longer searches for a lucky prize), and the check fails when it cannot hold.
func TestBucketPlan(t *testing.T) {
	for i := range int64(200) {
		p := 2_000_000_000 + i
		for _, n := range bucketCounts {
			on, err := bucketPlan(2_000_000_123, p, n, 6)
			if err != nil {
				t.Fatalf("prize %d, %d buckets: %v", p, n, err)
			}
			if len(on) != n || len(slices.Compact(slices.Sorted(slices.Values(on)))) != n {
				t.Fatalf("%d buckets on partitions %v, want %d different ones", n, on, n)
			}
			for b, part := range on {
				if want := event.PartitionOf(event.BucketPartitionKey(2_000_000_123, p, b), 6); part != want {
					t.Fatalf("bucket %d on partition %d, the key lands on %d", b, part, want)
				}
			}
		}
	}
	if _, err := bucketPlan(1, 2, 7, 6); err == nil {
		t.Fatal("7 buckets on 6 partitions: no error")
	}
}

func TestSlotMap(t *testing.T) {
	m := []slotRange{{0, 5460, "127.0.0.1:17001"}, {5461, 10922, "127.0.0.1:17002"}, {10923, 16383, "127.0.0.1:17003"}}
	for slot, want := range map[int64]string{0: "127.0.0.1:17001", 5460: "127.0.0.1:17001", 5461: "127.0.0.1:17002", 16383: "127.0.0.1:17003"} {
		if got, err := primaryOf(m, slot); err != nil || got != want {
			t.Errorf("primaryOf(%d) = %q, %v; want %q", slot, got, err, want)
		}
	}
	if _, err := primaryOf(m, 16384); err == nil {
		t.Error("slot 16384: no error")
	}
	if got := distinct([]string{"b", "a", "b", "c", "a"}); got != 3 {
		t.Errorf("distinct = %d, want 3", got)
	}
	p := placement{[]int64{12, 9000}, []string{"127.0.0.1:17001", "127.0.0.1:17002"}}
	if got, want := p.String(), "bucket 0: slot 12 on 127.0.0.1:17001; bucket 1: slot 9000 on 127.0.0.1:17002"; got != want {
		t.Errorf("placement = %q, want %q", got, want)
	}
}

func TestAdmissionChecks(t *testing.T) {
	if err := admittedAll(map[string]int{"202": 1000}, 1000); err != nil {
		t.Errorf("all admitted: %v", err)
	}
	for name, codes := range map[string]map[string]int{
		"rebalancing":  {"202": 900, "503": 100},
		"nothing":      {},
		"sold out too": {"202": 980, "409": 20},
	} {
		if err := admittedAll(codes, 1000); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if err := admittedAll(nil, 0); err == nil {
		t.Error("no requests: no error")
	}
	if s, err := busiestShare([]int64{100, 300, 100}); err != nil || s != 0.6 {
		t.Errorf("busiestShare = %v, %v; want 0.6", s, err)
	}
	if _, err := busiestShare([]int64{100, 0, 100}); err == nil {
		t.Error("a bucket that admitted nothing: no error")
	}
}

// bucketSteps are three repetitions of both profiles' bucket rows; the single profile's
// mysql CPU is missing in repetition 2 (a server not found) and wholly for 4 buckets.
func bucketSteps() []step {
	tput := map[string][]float64{
		keyBucketsKafkaMySQL(1): {20_000, 10_000, 20_000}, keyBucketsKafkaMySQL(2): {36_000, 19_000, 30_000},
		keyBucketsKafkaMySQL(4): {60_000, 32_000, 50_000},
		keyBucketsGateway(1):    {10_000, 12_000, 11_000}, keyBucketsGateway(3): {15_000, 15_000, 22_000},
	}
	return []step{
		{"buckets", func(_ context.Context, rep int) ([]measured, error) {
			var out []measured
			for _, n := range bucketCounts {
				x := map[string]any{"buckets": n, "partitions": n, "cpu_us_per_order_consumer": 20.0, "cpu_us_per_order_kafka": 5.0}
				if rep != 2 && n != 4 {
					x["cpu_us_per_order_mysql"] = 30.0
				}
				if total, ok := cpuTotal(x, "cpu_us_per_order_", orderProcs...); ok {
					x["cpu_us_per_order_total"] = total
				}
				out = append(out, measured{keyBucketsKafkaMySQL(n), fmt.Sprintf("kafka %d", n), &sample{ThroughputPS: tput[keyBucketsKafkaMySQL(n)][rep-1], Extra: x}})
			}
			for _, n := range []int{1, clusterSpread} {
				x := map[string]any{"buckets": n, "primaries": n, "busiest_bucket_share": 1 / float64(n), "cpu_us_per_grab_gateway": 40.0,
					"cpu_us_per_grab_total": 90.0, "placement": fmt.Sprintf("bucket 0: slot %d on 127.0.0.1:17001", rep)}
				out = append(out, measured{keyBucketsGateway(n), fmt.Sprintf("gw %d", n), &sample{ThroughputPS: tput[keyBucketsGateway(n)][rep-1], Extra: x}})
			}
			return out, nil
		}},
	}
}

func TestBucketRowsAggregateAndRender(t *testing.T) {
	var rep report
	if err := runInterleaved(context.Background(), bucketSteps(), 3, func(string, ...any) {}, &rep); err != nil {
		t.Fatal(err)
	}
	// Ratios within each repetition, then the median: 2 buckets 1.8, 1.9, 1.5; 4: 3, 3.2, 2.5.
	for key, want := range map[string]spread{
		keyBucketsKafkaMySQL(2): {Median: 1.8, Min: 1.5, Max: 1.9, N: 3},
		keyBucketsKafkaMySQL(4): {Median: 3, Min: 2.5, Max: 3.2, N: 3},
		keyBucketsGateway(3):    {Median: 1.5, Min: 1.25, Max: 2, N: 3},
	} {
		got := rep.find(key).Ratios["over_one_bucket"]
		if !near(got.Median, want.Median) || !near(got.Min, want.Min) || !near(got.Max, want.Max) || got.N != 3 {
			t.Errorf("%s over_one_bucket = %+v, want %+v", key, got, want)
		}
	}
	if _, ok := rep.find(keyBucketsKafkaMySQL(1)).Ratios["over_one_bucket"]; ok {
		t.Error("1 bucket has a ratio to itself")
	}
	if got := rep.find(keyBucketsKafkaMySQL(1)).Extra["cpu_us_per_order_mysql"]; got.N != 2 || got.Median != 30 {
		t.Errorf("mysql CPU of 1 bucket = %+v, want the two repetitions that read it", got)
	}

	rep.Targets = evaluate(rep.Rows)
	seen := 0
	for _, tg := range rep.Targets {
		if tg.Figure == "ratio:over_one_bucket" {
			seen++
			if tg.Verdict != "reported" || tg.Op != "" || tg.Value == nil {
				t.Errorf("%s: verdict %q op %q value %v; want reported, no target", tg.Name, tg.Verdict, tg.Op, tg.Value)
			}
		}
	}
	if seen != 3 {
		t.Errorf("%d bucket targets, want 3", seen)
	}

	// Through results.json and back, as -render reads it.
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back report
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	md := back.markdown([]string{"buckets.png"})
	for _, want := range []string{
		"## Stock buckets: one hot prize split into buckets",
		"| 1 | 1 | 20,000 (10,000–20,000) | 1× | 20 | 30 | 5 | 55 |",
		"| 2 | 2 | 30,000 (19,000–36,000) | 1.80 (1.50–1.90)× | 20 | 30 | 5 | 55 |",
		// 4 buckets never read MySQL's CPU: a dash, not a zero, and no total without it;
		// the total of 1 and 2 buckets is over the repetitions that read all three.
		"| 4 | 4 | 50,000 (32,000–60,000) | 3 (2.50–3.20)× | 20 | – | 5 | – |",
		"| 3 | 3 | 15,000 (15,000–22,000) | 1.50 (1.25–2)× | 0.33 | 40 | – | – | – | – | 90 |",
		"- repetition 2, 3 bucket(s): bucket 0: slot 2 on 127.0.0.1:17001",
		"![one hot prize split into stock buckets](buckets.png)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("results.md lacks %q", want)
		}
	}
	if sec := back.bucketsSection(); strings.Contains(sec, "| 0.00 |") || strings.Contains(sec, "| 0 |") {
		t.Errorf("the bucket section prints a zero for a figure not measured:\n%s", sec)
	}

	dir := t.TempDir()
	charts, err := drawCharts(dir, back)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(charts, "buckets.png") {
		t.Fatalf("charts %v lack buckets.png", charts)
	}
	if st, err := os.Stat(filepath.Join(dir, "buckets.png")); err != nil || st.Size() == 0 {
		t.Fatalf("buckets.png: %v", err)
	}
}

// A run without the buckets step has no bucket section or chart, and its bucket targets
// are "not measured", never met.
func TestBucketRowsAbsent(t *testing.T) {
	rep := report{}
	rep.Targets = evaluate(nil)
	for _, tg := range rep.Targets {
		if tg.Figure == "ratio:over_one_bucket" && tg.Verdict != "not measured" {
			t.Errorf("%s: %q without the step", tg.Name, tg.Verdict)
		}
	}
	if s := rep.bucketsSection(); s != "" {
		t.Errorf("section without rows: %q", s)
	}
	if p, err := bucketsChart(rep); p != nil || err != nil {
		t.Errorf("chart without rows: %v, %v", p, err)
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
