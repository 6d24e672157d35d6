package stock

import (
	"testing"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// Bucket 0 is keyed exactly as a prize without buckets, whatever N; every other bucket's
// keys share one tag of their own, different from bucket 0's and from every other bucket's.
func TestBucketKeys(t *testing.T) {
	for _, n := range []int{0, 1, 4} {
		if BucketKeysFor(7, 12, 0, n) != KeysFor(7, 12) {
			t.Fatalf("bucket 0 of %d: keys are not the prize's own", n)
		}
	}
	tags := map[string]int{}
	for b := range 4 {
		k := BucketKeysFor(7, 12, b, 4)
		tag := hashTag(k.Meta)
		if tag == k.Meta || tag == "" {
			t.Fatalf("%s has no hash tag", k.Meta)
		}
		for _, key := range []string{k.Users, k.Reserved, k.Outcomes, k.Fence, k.Returned, k.Transfers()} {
			if got := hashTag(key); got != tag {
				t.Errorf("%s hashes on %q, want %q", key, got, tag)
			}
		}
		if prev, dup := tags[tag]; dup {
			t.Errorf("buckets %d and %d share the tag %q", prev, b, tag)
		}
		tags[tag] = b
	}
	// Pinned: a key's name must not change between versions while a sale runs.
	if want := "sk:{7:12:3:0}:meta"; BucketKeysFor(7, 12, 3, 4).Meta != want {
		t.Fatalf("bucket 3 of 4's meta is %s, want %s", BucketKeysFor(7, 12, 3, 4).Meta, want)
	}
}

// The admission script of a grab in bucket b runs on bucket b's keys (BucketKeysFor), which
// for bucket 0 are the prize's own.
func TestReserveArgsUseTheGrabsBucket(t *testing.T) {
	for b := range 4 {
		keys, _ := reserveArgs(seckill.Grab{SessionID: 12, PrizeID: 34, Bucket: b, Buckets: 4})
		want := BucketKeysFor(12, 34, b, 4).all()
		if len(keys) != len(want) {
			t.Fatalf("bucket %d: keys %v, want %v", b, keys, want)
		}
		for i := range keys {
			if keys[i] != want[i] {
				t.Fatalf("bucket %d: keys %v, want %v", b, keys, want)
			}
		}
	}
}
