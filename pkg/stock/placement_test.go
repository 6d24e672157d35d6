package stock

import (
	"strconv"
	"strings"
	"testing"
)

// KeySlot is Redis Cluster's: values from CLUSTER KEYSLOT (and the cluster spec's CRC16
// check value, 0x31C3 for "123456789").
func TestKeySlotIsRedisClusters(t *testing.T) {
	for tag, want := range map[string]int{"123456789": 0x31C3, "foo": 12182, "bar": 5061, "": 0} {
		if got := KeySlot(tag); got != want {
			t.Errorf("KeySlot(%q) = %d, want %d", tag, got, want)
		}
	}
}

// The ranges are redis-cli --cluster create's split of the slots among n primaries
// (3 primaries: 0-5460, 5461-10922, 10923-16383), and slotRange finds a slot's.
func TestSlotRangesAreRedisClis(t *testing.T) {
	if got := []int{slotRangeStart(0, 3), slotRangeStart(1, 3), slotRangeStart(2, 3), slotRangeStart(3, 3)}; got[0] != 0 ||
		got[1] != 5461 || got[2] != 10923 || got[3] != clusterSlots {
		t.Fatalf("3 ranges start at %v", got)
	}
	if slotRangeStart(1, 6) != 2731 || slotRangeStart(5, 6) != 13653 {
		t.Fatalf("6 ranges: %d, %d", slotRangeStart(1, 6), slotRangeStart(5, 6))
	}
	for n := 1; n <= 1024; n *= 2 {
		for s := 0; s < clusterSlots; s += 7 {
			j := slotRange(s, n)
			if s < slotRangeStart(j, n) || s >= slotRangeStart(j+1, n) {
				t.Fatalf("slot %d of %d ranges said to be in %d", s, n, j)
			}
		}
	}
}

// The property placement rests on, for N = 2..16 and many session×prizes: bucket 0's tag is
// the prize's own (as before buckets); bucket b's slot is in range (k+b) mod N, k being bucket
// 0's, so the N slots are in N different ranges; and on every evenly split cluster of M ≤ N
// primaries (redis-cli's split), each primary holds exactly N/M buckets when M divides N,
// and between ⌊N/M⌋−1 and ⌈N/M⌉+1 otherwise. The tags do not depend on anything else (the
// same call gives the same tag) and never share a tag with another bucket.
func TestBucketSlotsFallInDistinctRanges(t *testing.T) {
	for n := 2; n <= 16; n++ {
		for s := int64(1); s <= 60; s++ {
			for p := int64(1); p <= 20; p++ {
				sid := s*7919 + 100000
				slots := make([]int, n)
				for b := range n {
					tag := bucketTag(sid, p, b, n)
					if b == 0 {
						if want := strconv.FormatInt(sid, 10) + ":" + strconv.FormatInt(p, 10); tag != want {
							t.Fatalf("bucket 0's tag %q, want the prize's %q", tag, want)
						}
					} else if !strings.HasPrefix(tag, strconv.FormatInt(sid, 10)+":"+strconv.FormatInt(p, 10)+":"+strconv.Itoa(b)+":") {
						t.Fatalf("bucket %d of %d: tag %q", b, n, tag)
					}
					if again := bucketTag(sid, p, b, n); again != tag {
						t.Fatalf("bucket %d of %d: tag %q then %q", b, n, tag, again)
					}
					slots[b] = KeySlot(tag)
				}
				k := slotRange(slots[0], n)
				for b := 1; b < n; b++ {
					if got, want := slotRange(slots[b], n), (k+b)%n; got != want {
						t.Fatalf("s=%d p=%d N=%d: bucket %d on slot %d, range %d, want %d", sid, p, n, b, slots[b], got, want)
					}
				}
				for m := 1; m <= n; m++ {
					per := make([]int, m)
					for _, slot := range slots {
						per[slotRange(slot, m)]++
					}
					for i, c := range per {
						if n%m == 0 && c != n/m || c < n/m-1 || c > (n+m-1)/m+1 {
							t.Fatalf("s=%d p=%d N=%d: primary %d of %d holds %d buckets (slots %v)", sid, p, n, i, m, c, slots)
						}
					}
				}
			}
		}
	}
}

// A bucket the prize does not have gets a tag no real bucket uses.
func TestBucketTagOutsideThePrize(t *testing.T) {
	if got := bucketTag(7, 12, 3, 3); got != "7:12:3" {
		t.Fatalf("bucket 3 of 3: %q", got)
	}
	for b := range 3 {
		if bucketTag(7, 12, b, 3) == "7:12:3" {
			t.Fatalf("bucket %d of 3 has the outside tag", b)
		}
	}
}

// The tag is searched on every grab of a bucket ≥ 1 (reserveArgs builds it in its own buffer;
// BenchmarkGrabAdmissionArgs counts that path: as many allocations as bucket 0's).
func BenchmarkBucketTag(b *testing.B) {
	b.ReportAllocs()
	for i := range b.N {
		_ = bucketTag(1234567, 42, 1+i%15, 16)
	}
}
