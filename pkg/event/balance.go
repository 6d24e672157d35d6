package event

import (
	"bytes"

	"github.com/segmentio/kafka-go"
)

// GrabBalancer places the grab topic's messages. A key of stock bucket b ≥ 1 of a
// session×prize ("session:prize:b", BucketPartitionKey) goes to the partition after the
// prize's own (murmur2 of "session:prize", as kafka.Murmur2Balancer puts it) by b, modulo
// the partition count, so a prize's N buckets are on N different partitions whenever
// N ≤ P (docs/design.md, Placement). Left to murmur2, 4 buckets' keys were on 4 of 6
// partitions only 28 % of the time. Every other key (bucket 0, prizes without buckets, a
// key of any other shape) is placed by kafka.Murmur2Balancer, byte for byte as before.
//
// Bucket keys are where this placement departs from the Java client's default
// partitioner: a standard producer re-publishing a bucket's event with its key would land
// it on murmur2("session:prize:b"), another partition than its bucket's worker reads. Only
// this pipeline's writers produce bucket keys (NewGrabWriter), and PartitionOf names the
// same partitions, so the reconciler's lag and in-flight checks read the right ones.
type GrabBalancer struct{}

// Balance implements kafka.Balancer. kafka-go passes the topic's partition ids in order.
func (GrabBalancer) Balance(msg kafka.Message, partitions ...int) int {
	prize, b, ok := splitBucketKey(msg.Key)
	if !ok {
		return kafka.Murmur2Balancer{}.Balance(msg, partitions...)
	}
	base := kafka.Murmur2Balancer{Consistent: true}.Balance(kafka.Message{Key: prize}, partitions...)
	for i, p := range partitions {
		if p == base {
			return partitions[(i+b%len(partitions))%len(partitions)]
		}
	}
	return base // not reached: murmur2 returns one of the partitions it was given
}

// splitBucketKey reads a key BucketPartitionKey made for a bucket b ≥ 1 (ParseGrabKey):
// its prize's key ("session:prize") and b.
func splitBucketKey(key []byte) (prize []byte, b int, ok bool) {
	if _, _, b, ok = ParseGrabKey(key); !ok || b < 1 {
		return nil, 0, false
	}
	return key[:bytes.LastIndexByte(key, ':')], b, true
}
