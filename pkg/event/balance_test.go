package event

import (
	"testing"

	"github.com/segmentio/kafka-go"
)

func parts(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	return p
}

// A prize's N ≤ P bucket keys land on N different partitions, bucket b on its prize's
// partition plus b; every other key lands where kafka.Murmur2Balancer (what NewWriter used
// before bucket placement, and the Java client's partitioner) puts it, and PartitionOf says
// the same as the writer's balancer for all of them.
func TestGrabBalancerPlacesBucketsOnDistinctPartitions(t *testing.T) {
	for _, p := range []int{1, 2, 3, 6, 7, 12, 16, 32} {
		ps := parts(p)
		for s := int64(1); s <= 40; s++ {
			for pr := int64(1); pr <= 25; pr++ {
				sid := s * 104729
				prize := PartitionKey(sid, pr)
				base := kafka.Murmur2Balancer{}.Balance(kafka.Message{Key: prize}, ps...)
				if got := (GrabBalancer{}).Balance(kafka.Message{Key: prize}, ps...); got != base {
					t.Fatalf("P=%d: prize key %s on %d, murmur2 says %d", p, prize, got, base)
				}
				if got := BucketPartitionKey(sid, pr, 0); string(got) != string(prize) {
					t.Fatalf("bucket 0's key %s, want %s", got, prize)
				}
				for n := 2; n <= 16 && n <= p; n++ {
					seen := map[int]bool{base: true}
					for b := 1; b < n; b++ {
						key := BucketPartitionKey(sid, pr, b)
						got := GrabBalancer{}.Balance(kafka.Message{Key: key}, ps...)
						if want := (base + b) % p; got != want {
							t.Fatalf("P=%d: %s on %d, want %d", p, key, got, want)
						}
						if seen[got] {
							t.Fatalf("P=%d N=%d: %s shares partition %d with another bucket", p, n, key, got)
						}
						seen[got] = true
						if of := PartitionOf(key, p); of != got {
							t.Fatalf("P=%d: PartitionOf(%s) = %d, the balancer put it on %d", p, key, of, got)
						}
					}
				}
			}
		}
	}
}

// Keys that are not a bucket's (any other topic's, or a malformed one) are never taken for
// one: they keep murmur2 exactly.
func TestGrabBalancerLeavesOtherKeysToMurmur2(t *testing.T) {
	keys := []string{"1:2", "1:2:0", "1:2:01", "1:2:+1", "1:2:-1", "01:2:3", "1:02:3", "-0:2:3", "1:2:3:4", "a:2:3",
		"1::3", ":2:3", "1:2:", "req-5f1c", "", "1:2:99999999999999999999", "order-1:2:3"}
	for _, p := range []int{1, 6, 7} {
		for _, k := range keys {
			want := kafka.Murmur2Balancer{Consistent: true}.Balance(kafka.Message{Key: []byte(k)}, parts(p)...)
			if got := (GrabBalancer{}).Balance(kafka.Message{Key: []byte(k)}, parts(p)...); got != want {
				t.Errorf("P=%d: key %q on %d, murmur2 says %d", p, k, got, want)
			}
			if got := PartitionOf([]byte(k), p); got != want {
				t.Errorf("P=%d: PartitionOf(%q) = %d, murmur2 says %d", p, k, got, want)
			}
		}
	}
	// Negative ids are written by AppendInt with a sign; their bucket keys still count.
	if _, b, ok := splitBucketKey([]byte("-3:-4:5")); !ok || b != 5 {
		t.Errorf("-3:-4:5 not read as bucket 5")
	}
	for b := 1; b < 1000; b += 37 {
		if prize, got, ok := splitBucketKey(BucketPartitionKey(123, 456, b)); !ok || got != b || string(prize) != "123:456" {
			t.Errorf("bucket key of b=%d read as %s, %d, %v", b, prize, got, ok)
		}
	}
}

// kafka-go hands the balancer the partitions it knows, in order; with ids that are not
// 0..P-1 the bucket still goes b places after its prize's.
func TestGrabBalancerFollowsThePartitionList(t *testing.T) {
	ps := []int{3, 5, 8, 9}
	prize := PartitionKey(11, 12)
	base := kafka.Murmur2Balancer{}.Balance(kafka.Message{Key: prize}, ps...)
	at := -1
	for i, p := range ps {
		if p == base {
			at = i
		}
	}
	for b := 1; b < 9; b++ {
		want := ps[(at+b)%len(ps)]
		if got := (GrabBalancer{}).Balance(kafka.Message{Key: BucketPartitionKey(11, 12, b)}, ps...); got != want {
			t.Errorf("bucket %d on %d, want %d", b, got, want)
		}
	}
}
