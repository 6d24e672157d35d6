package event

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol/metadata"
)

// Admin runs the few cluster-level calls the pipeline needs: probing readiness, creating
// topics idempotently, checking their partition counts, and reading offsets and lag.
type Admin struct {
	client   *kafka.Client
	brokers  []string
	security Security // for naming the principal in a refusal
}

// NewAdmin returns an Admin for the given bootstrap brokers.
func NewAdmin(brokers []string, opts ...AdminOption) (*Admin, error) {
	if len(brokers) == 0 {
		return nil, errors.New("kafka admin: no brokers")
	}
	a := &Admin{client: &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}, brokers: brokers}
	for _, o := range opts {
		o(a)
	}
	return a, nil
}

// Ping sends a metadata request and reports whether at least one broker answered. It asks
// the brokers each time (freshMetadata): a readiness probe answered from a cache would stay
// green with every broker gone.
func (a *Admin) Ping(ctx context.Context) error {
	md, err := a.freshMetadata(ctx, []string{})
	if err != nil {
		return err
	}
	if len(md.Brokers) == 0 {
		return errors.New("kafka metadata: no brokers in the answer")
	}
	return nil
}

// freshMetadata sends one metadata request for topics (none: only the brokers) through a
// transport of its own, with the admin's SASL login and TLS, and closes its connections
// after. A kafka-go Transport answers metadata requests from its cache and keeps answering
// from it while every broker is down (it keeps a known layout over a failed refresh), so the
// shared one would report a dead cluster as healthy.
func (a *Admin) freshMetadata(ctx context.Context, topics []string) (*metadata.Response, error) {
	rt := &kafka.Transport{DialTimeout: 5 * time.Second}
	if t, ok := a.client.Transport.(*kafka.Transport); ok && t != nil {
		rt.SASL, rt.TLS, rt.ClientID = t.SASL, t.TLS, t.ClientID
	}
	defer rt.CloseIdleConnections()
	res, err := rt.RoundTrip(ctx, a.client.Addr, &metadata.Request{TopicNames: topics})
	if err != nil {
		return nil, fmt.Errorf("kafka metadata of %v: %w", topics, err)
	}
	md, ok := res.(*metadata.Response)
	if !ok {
		return nil, fmt.Errorf("kafka metadata of %v: unexpected answer %T", topics, res)
	}
	return md, nil
}

// WaitReady probes with metadata requests until one succeeds or ctx ends.
func (a *Admin) WaitReady(ctx context.Context) error {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := a.Ping(pctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafka not ready: %w (last error: %v)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// EnsureTopics creates the topics that do not exist yet, replicated as the brokers'
// defaults say (default.replication.factor, min.insync.replicas: 1 on the single-node
// stack, 3 and 2 on the cluster profile). A topic that exists is left as it is (its
// partition count is not changed), so running this twice is harmless.
func (a *Admin) EnsureTopics(ctx context.Context, topics ...Topic) error {
	return a.EnsureReplicatedTopics(ctx, Replication{}, topics...)
}

// EnsureReplicatedTopics is EnsureTopics with an explicit replication for the topics it
// creates (CheckReplication says whether existing ones match).
func (a *Admin) EnsureReplicatedTopics(ctx context.Context, r Replication, topics ...Topic) error {
	req := &kafka.CreateTopicsRequest{}
	for _, t := range topics {
		req.Topics = append(req.Topics, r.topicConfig(t))
	}
	resp, err := a.client.CreateTopics(ctx, req)
	if err != nil {
		return fmt.Errorf("create topics: %w", err)
	}
	for name, terr := range resp.Errors {
		if terr != nil && !errors.Is(terr, kafka.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", name, terr)
		}
	}
	return a.waitTopics(ctx, topics)
}

// waitTopics waits until every partition of every topic has a leader that answers an
// offsets request, so a producer or reader started right after does not race the
// controller ("not leader").
func (a *Admin) waitTopics(ctx context.Context, topics []Topic) error {
	for {
		ready := true
		for _, t := range topics {
			if _, err := a.Offsets(ctx, t.Name); err != nil {
				ready = false
				break
			}
		}
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topics %v not ready: %w", topics, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// DeleteTopics removes topics (tests clean up their own topics with it).
func (a *Admin) DeleteTopics(ctx context.Context, names ...string) error {
	resp, err := a.client.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: names})
	if err != nil {
		return fmt.Errorf("delete topics: %w", err)
	}
	for name, terr := range resp.Errors {
		if terr != nil && !errors.Is(terr, kafka.UnknownTopicOrPartition) {
			return fmt.Errorf("delete topic %s: %w", name, terr)
		}
	}
	return nil
}

// PartitionOf returns the partition a key lands on among n partitions (n >= 1): murmur2,
// as NewWriter's balancer and the Java client's default partitioner place keyed messages
// (toPositive(murmur2(key)) % n), except a stock bucket's key, which it places as
// GrabBalancer does (its prize's partition plus b, mod n), so it names the partition of any
// grab a writer of NewGrabWriter produced. The reconciler maps a session×prize (or one of
// its buckets) to its partition with it, so it is right only while the topic has n
// partitions: see CheckPartitions.
func PartitionOf(key []byte, n int) int {
	parts := make([]int, n)
	for i := range parts {
		parts[i] = i
	}
	if key == nil {
		key = []byte{} // a nil key is placed at random by writers; as a lookup it hashes as empty
	}
	return GrabBalancer{}.Balance(kafka.Message{Key: key}, parts...)
}

// Partitions returns how many partitions the broker says topic has.
func (a *Admin) Partitions(ctx context.Context, topic string) (int, error) {
	parts, err := a.partitionIDs(ctx, topic)
	if err != nil {
		return 0, err
	}
	return len(parts), nil
}

// CheckPartitions refuses topics whose partition count on the broker differs from the
// configured one. Keys are placed by hashing over the partition count, so with another
// count PartitionOf names the wrong partition for a session×prize (the reconciler would
// read the lag of a partition the prize is not on), and a count changed while events are
// in flight moves a prize to a second partition (two workers on one hot row, order lost).
// Call it at start-up. Partitions are added with Kafka's own kafka-topics --alter, between
// sales (docs/operators.md, Adding grab partitions): kafka-go's CreatePartitions was answered
// without an error and left the count unchanged on the stack's Kafka 4.4.
func (a *Admin) CheckPartitions(ctx context.Context, topics ...Topic) error {
	var bad []string
	for _, t := range topics {
		n, err := a.Partitions(ctx, t.Name)
		if err != nil {
			return err
		}
		if n != t.Partitions {
			bad = append(bad, fmt.Sprintf("%s has %d partitions on the broker, configured %d", t.Name, n, t.Partitions))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("kafka topic partition counts differ from the configuration (keys would map to the wrong partitions): %s",
			strings.Join(bad, "; "))
	}
	return nil
}

// partitionIDs returns topic's partition ids from a metadata request.
func (a *Admin) partitionIDs(ctx context.Context, topic string) ([]int, error) {
	md, err := a.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	if len(md.Topics) != 1 {
		return nil, fmt.Errorf("metadata of %s: %d topics in the answer", topic, len(md.Topics))
	}
	t := md.Topics[0]
	if t.Error != nil {
		return nil, fmt.Errorf("metadata of %s: %w", topic, t.Error)
	}
	if len(t.Partitions) == 0 {
		return nil, fmt.Errorf("metadata of %s: no partitions", topic)
	}
	ids := make([]int, len(t.Partitions))
	for i, p := range t.Partitions {
		if p.Error != nil {
			return nil, fmt.Errorf("metadata of %s/%d: %w", topic, p.ID, p.Error)
		}
		ids[i] = p.ID
	}
	return ids, nil
}

// PartitionOffsets is a partition's retained log: First is its oldest offset, End the
// offset its next message gets (the high watermark). End - First messages are there.
type PartitionOffsets struct {
	First, End int64
}

// Position is where a reader that keeps its own offsets (the compensation replay) stands in
// one partition: the next offset to read and the end offset. Stored is the stored offset
// when Next had to move away from it (Clamped): messages were lost to the reader.
type Position struct {
	Next, End int64
	Stored    int64
	Clamped   Clamp
}

// Clamp says why a stored offset could not be read from.
type Clamp string

// Why a stored offset was moved to the partition's first offset.
const (
	NotClamped Clamp = ""
	// ClampRetention: retention removed messages before they were read (stored < first).
	ClampRetention Clamp = "retention"
	// ClampRecreated: the stored offset is beyond the partition's end (the topic was
	// recreated, or its log truncated): the offsets now name other messages, and waiting
	// until the end passes it again would skip every message below it.
	ClampRecreated Clamp = "recreated"
)

// Positions joins stored next offsets with the partitions' bounds. A partition never read
// starts at its first offset; so does one whose stored offset retention removed or that no
// longer exists (Clamped says which). Read the stored offsets before the bounds: a message
// appended in between then only makes the backlog look larger, never smaller.
func Positions(bounds map[int]PartitionOffsets, stored map[int]int64) map[int]Position {
	out := make(map[int]Position, len(bounds))
	for p, o := range bounds {
		next, ok := stored[p]
		pos := Position{Next: next, End: o.End}
		switch {
		case !ok:
			pos.Next = o.First
		case next < o.First:
			pos.Next, pos.Stored, pos.Clamped = o.First, next, ClampRetention
		case next > o.End:
			pos.Next, pos.Stored, pos.Clamped = o.First, next, ClampRecreated
		}
		out[p] = pos
	}
	return out
}

// Backlog is how many messages the positions leave to read.
func Backlog(pos map[int]Position) int64 {
	var n int64
	for _, p := range pos {
		n += max(0, p.End-p.Next)
	}
	return n
}

// Offsets returns the first and end offsets of every partition of topic, as the broker
// lists them now (partitions come from the broker's metadata, not from configuration).
// It is the pipeline's one way to list offsets: the order relay's checkpoints, the lag of a
// group, and the test harness all read them here.
func (a *Admin) Offsets(ctx context.Context, topic string) (map[int]PartitionOffsets, error) {
	ids, err := a.partitionIDs(ctx, topic)
	if err != nil {
		return nil, err
	}
	req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for _, p := range ids {
		req.Topics[topic] = append(req.Topics[topic], kafka.FirstOffsetOf(p), kafka.LastOffsetOf(p))
	}
	resp, err := a.client.ListOffsets(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("offsets of %s: %w", topic, err)
	}
	out := make(map[int]PartitionOffsets, len(ids))
	for _, po := range resp.Topics[topic] {
		if po.Error != nil {
			return nil, fmt.Errorf("offsets of %s/%d: %w", topic, po.Partition, po.Error)
		}
		out[po.Partition] = PartitionOffsets{First: po.FirstOffset, End: po.LastOffset}
	}
	if len(out) != len(ids) {
		return nil, fmt.Errorf("offsets of %s: %d of %d partitions answered", topic, len(out), len(ids))
	}
	return out, nil
}

// Lag returns, per partition of topic (as the broker lists them), how many messages the
// group has not committed yet: end offset - committed offset, or everything retained when
// the group committed nothing there. It reads the broker, so it stays true while the
// group's consumers are stalled or gone. A group coordinator that is still loading (a fresh
// broker) is waited for, up to coordinatorWait, rather than reported as an error.
func (a *Admin) Lag(ctx context.Context, group string, t Topic) (map[int]int64, error) {
	offs, err := a.Offsets(ctx, t.Name)
	if err != nil {
		return nil, err
	}
	parts := make([]int, 0, len(offs))
	for p := range offs {
		parts = append(parts, p)
	}
	pos, err := waitCoordinator(ctx, coordinatorWait, func() (map[int]int64, error) {
		return a.committed(ctx, group, t.Name, parts)
	})
	if err != nil {
		return nil, err
	}
	lag := make(map[int]int64, len(offs))
	for p, o := range offs {
		// Nothing committed, or committed below what is retained: the group starts at the
		// first retained message, so everything retained is ahead.
		at, ok := pos[p]
		if !ok || at < o.First {
			at = o.First
		}
		lag[p] = max(0, o.End-at)
	}
	return lag, nil
}

// committed returns group's committed offset per partition of topic (partitions where it
// committed nothing are absent).
func (a *Admin) committed(ctx context.Context, group, topic string, parts []int) (map[int]int64, error) {
	committed, err := a.client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: parts}})
	if err != nil {
		return nil, fmt.Errorf("committed offsets of %s: %w", group, err)
	}
	if committed.Error != nil {
		return nil, fmt.Errorf("committed offsets of %s: %w", group, committed.Error)
	}
	pos := map[int]int64{}
	for _, p := range committed.Topics[topic] {
		if p.Error != nil {
			return nil, fmt.Errorf("committed offset of %s/%d: %w", topic, p.Partition, p.Error)
		}
		pos[p.Partition] = p.CommittedOffset
	}
	return pos, nil
}

// coordinatorWait bounds how long Lag waits for a group coordinator that is not ready.
const coordinatorWait = 10 * time.Second

// coordinatorNotReady reports the answers a broker gives while a group's coordinator is
// still being set up: on a freshly formatted broker the first group request creates the
// offsets topic, and until its partition is loaded (about a second) offset fetches get "not
// coordinator", "coordinator not available" or "load in progress"; a broker that just took
// over a group's partition answers the same. Any other error is real.
func coordinatorNotReady(err error) bool {
	return errors.Is(err, kafka.NotCoordinatorForGroup) || errors.Is(err, kafka.GroupCoordinatorNotAvailable) ||
		errors.Is(err, kafka.GroupLoadInProgress)
}

// waitCoordinator calls fetch until it succeeds, fails with an error other than
// coordinatorNotReady, or wait (or ctx) ends; then the last error is returned, so a
// coordinator that never becomes ready is still reported.
func waitCoordinator[T any](ctx context.Context, wait time.Duration, fetch func() (T, error)) (T, error) {
	deadline := time.Now().Add(wait)
	backoff := 50 * time.Millisecond
	for {
		v, err := fetch()
		if err == nil || !coordinatorNotReady(err) || !time.Now().Add(backoff).Before(deadline) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}
