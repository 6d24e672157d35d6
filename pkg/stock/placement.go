package stock

import (
	"fmt"
	"strconv"
)

// Placement of a prize's stock buckets on Redis Cluster slots (docs/design.md, Placement).
//
// Bucket 0 keeps the prize's own tag {s:p}, on slot s0. Split the 16384 slots into N
// ranges exactly as redis-cli --cluster create splits them among N primaries (range j is
// [round(j·16384/N), round((j+1)·16384/N))); s0 lies in some range k. Bucket b ≥ 1 takes
// the tag {s:p:b:x} with the smallest x ≥ 0 whose slot lies in range (k+b) mod N. So the
// N buckets' slots are in the N ranges, one each, and on a cluster whose M primaries were
// split evenly that way, each primary holds N/M buckets when M divides N (every M-range is
// N/M whole N-ranges): N buckets on N primaries when M = N. Left to CRC16, 3 buckets'
// tags were on the 3 primaries of an evenly split cluster 22 % of the time.
//
// Each try is one CRC16 of a few bytes and a try hits with probability about 1/N, so the
// search costs about N CRC16s, on the grab path too; nothing is cached. The tag depends on
// N, which never changes once a session's stock rows exist, so it is stable for the
// session×prize's life.

const (
	clusterSlots = 16384
	// tagTries bounds the search for x. A range holds at least 1/16 of the slots for
	// N ≤ 16 (1/1024 at seckill.MaxBuckets), so running out means CRC16 missed a range
	// 65536 times in a row: not seen, but the loop must end somewhere (bucketTag).
	tagTries = 1 << 16
)

// slotRangeStart is where range j of n starts: lround(j·16384/n), as redis-cli computes
// the first slot of primary j of n (its slots_per_node is a float).
func slotRangeStart(j, n int) int { return (2*j*clusterSlots + n) / (2 * n) }

// slotRange is the range of n that holds slot.
func slotRange(slot, n int) int {
	j := slot * n / clusterSlots
	for j > 0 && slot < slotRangeStart(j, n) {
		j--
	}
	for j < n-1 && slot >= slotRangeStart(j+1, n) {
		j++
	}
	return j
}

// crc16 continues Redis Cluster's key hash (CRC16-CCITT/XMODEM, poly 0x1021, init 0) over b.
func crc16(crc uint16, b []byte) uint16 {
	for _, c := range b {
		crc ^= uint16(c) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// KeySlot is the Redis Cluster slot of a hash tag's keys (CLUSTER KEYSLOT of "{tag}").
func KeySlot(tag string) int { return int(crc16(0, []byte(tag)) % clusterSlots) }

// checkBucket refuses bucket b of n where the struct that carries them (a grab, a
// settlement, a return) names a bucket ≥ 1 without its prize's N, or beyond it: the keys it
// would name are no bucket's, and a reservation or return there would be lost from view.
func checkBucket(b, n int) error {
	if b != 0 && (b < 0 || b >= n) {
		return fmt.Errorf("stock bucket %d of %d: the prize's number of buckets is missing or too small", b, n)
	}
	return nil
}

// bucketTag is the hash tag (without braces) of bucket b of n of a session×prize: "s:p"
// for b = 0, "s:p:b:x" for 1 ≤ b < n as described above. For a bucket the prize does not
// have (n ≤ b), and in the never-seen case that no x < tagTries hits the range, it is
// "s:p:b", which no bucket of a prize with n buckets uses: scripts find its keys not loaded.
func bucketTag(sessionID, prizeID int64, b, n int) string {
	var buf [80]byte
	return string(appendBucketTag(buf[:0], sessionID, prizeID, b, n))
}

// appendBucketTag appends bucketTag's tag to dst, so the admission's keys are built in one
// buffer (reserveArgs): the grab path pays no allocation for the tag's search.
func appendBucketTag(dst []byte, sessionID, prizeID int64, b, n int) []byte {
	start := len(dst)
	t := strconv.AppendInt(dst, sessionID, 10)
	t = append(t, ':')
	t = strconv.AppendInt(t, prizeID, 10)
	if b == 0 {
		return t
	}
	slot0 := int(crc16(0, t[start:]) % clusterSlots)
	t = append(t, ':')
	t = strconv.AppendInt(t, int64(b), 10)
	if b < 0 || n <= b {
		return t
	}
	j := (slotRange(slot0, n) + b) % n
	lo, hi := slotRangeStart(j, n), slotRangeStart(j+1, n)
	t = append(t, ':')
	crc := crc16(0, t[start:])
	for x := range tagTries {
		withX := strconv.AppendInt(t, int64(x), 10)
		if s := int(crc16(crc, withX[len(t):]) % clusterSlots); lo <= s && s < hi {
			return withX
		}
		t = withX[:len(t)]
	}
	return t[:len(t)-1]
}
