package stock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Errors of AwaitReplica.
var (
	// ErrNotReplicated: no replica acknowledged the reservation within the timeout (none is
	// connected, or it lags): a failover now could promote a replica without it.
	ErrNotReplicated = errors.New("no replica acknowledged the reservation in time")
	// ErrReservationGone: the primary now serving the prize's slot knows nothing of the
	// request id: a failover already dropped it.
	ErrReservationGone = errors.New("the reservation is not on the slot's primary")
)

// AwaitReplica returns nil once at least one replica of the primary holding requestID's
// reservation has acknowledged it, within timeout. The gateway asks it only after a produce
// failed, so that a 202 whose event is in no broker rests on two Redis servers.
//
// WAIT counts the writes made on the connection it runs on (Redis remembers, per client, the
// replication offset of its last write): on a connection that wrote nothing, such as another
// pooled one, it returns at once with every connected replica, lagging or not, and would
// confirm nothing. The admission script ran on a pooled (or pipelined, coalesced) connection
// that cannot be named again, so this takes one connection to the slot's primary and, on it,
// checks that the reservation (or its outcome) is there, writes a small marker key in the same
// slot, then WAITs: the primary replicates in order, so a replica that acknowledged the marker
// has everything before it, the reservation included. Two round trips, on that path only.
func (g *Gate) AwaitReplica(ctx context.Context, sessionID, prizeID int64, requestID string, timeout time.Duration) error {
	return g.AwaitReplicaBucket(ctx, sessionID, prizeID, 0, 1, requestID, timeout)
}

// AwaitReplicaBucket is AwaitReplica for a grab admitted in stock bucket b (its keys' slot).
func (g *Gate) AwaitReplicaBucket(ctx context.Context, sessionID, prizeID int64, b, buckets int, requestID string, timeout time.Duration) error {
	k := BucketKeysFor(sessionID, prizeID, b, buckets)
	node, err := primaryFor(ctx, g.rdb, k.Reserved)
	if err != nil {
		return fmt.Errorf("await replica %s: %w", requestID, err)
	}
	conn := node.Conn()
	defer conn.Close()
	var reserved, settled *redis.BoolCmd
	if _, err := conn.Pipelined(ctx, func(p redis.Pipeliner) error {
		reserved = p.HExists(ctx, k.Reserved, requestID)
		settled = p.HExists(ctx, k.Outcomes, requestID)
		// The marker's value is the request id only to help a person reading a dump; what
		// matters is that it is a write, on this connection, after the reservation.
		p.Set(ctx, k.replicaMarker(), requestID, time.Minute)
		return nil
	}); err != nil {
		return fmt.Errorf("await replica %s: %w", requestID, err)
	}
	switch {
	case settled.Val():
		// Settled: the consumer read the event, so the order or rejection is in MySQL, which
		// the status endpoint asks when Redis has forgotten a grab.
		return nil
	case !reserved.Val():
		return fmt.Errorf("await replica %s: %w", requestID, ErrReservationGone)
	}
	// WAIT counts in milliseconds, and WAIT 1 0 would block until a replica acknowledges.
	timeout = max(timeout, time.Millisecond)
	// Run alone (not pipelined): go-redis gives a lone WAIT a read deadline of its timeout
	// plus 10 s, where a pipeline reads with the client's read timeout, which may be shorter.
	n, err := conn.Wait(ctx, 1, timeout).Result()
	if err != nil {
		return fmt.Errorf("await replica %s: %w", requestID, err)
	}
	if n < 1 {
		return fmt.Errorf("await replica %s: %w (%s)", requestID, ErrNotReplicated, timeout)
	}
	return nil
}

// replicaMarker is the key AwaitReplica writes (with a TTL) so that its WAIT covers the
// reservation; it shares the prize's hash tag, so its slot and primary.
func (k Keys) replicaMarker() string { return strings.TrimSuffix(k.Meta, "meta") + "wait" }

// primaryFor returns a client of the one server holding key: the slot's primary on a Redis
// Cluster (from the client's slot map; a stale map names a server that refuses or redirects,
// which is an error here, not a confirmation), the server itself otherwise.
func primaryFor(ctx context.Context, rdb redis.UniversalClient, key string) (*redis.Client, error) {
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, key)
	case *redis.Client:
		return c, nil
	}
	return nil, fmt.Errorf("a %T has no single primary to WAIT on", rdb)
}

// HasReplicas reports whether the Redis behind rdb has any replica configured: on a cluster,
// a node in the topology with the replica role (a failed one counts: it is configured); on a
// single server, a connected replica (INFO replication knows no others). The gateway asks it
// at start: without any replica a WAIT can never succeed, so it is not worth waiting for.
func HasReplicas(ctx context.Context, rdb redis.UniversalClient) (bool, error) {
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		nodes, err := cc.ClusterNodes(ctx).Result()
		if err != nil {
			return false, fmt.Errorf("cluster nodes: %w", err)
		}
		for _, line := range strings.Split(nodes, "\n") {
			if f := strings.Fields(line); len(f) > 2 && strings.Contains(","+f[2]+",", ",slave,") {
				return true, nil
			}
		}
		return false, nil
	}
	info, err := rdb.Info(ctx, "replication").Result()
	if err != nil {
		return false, fmt.Errorf("info replication: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
			n, err := strconv.Atoi(v)
			return err == nil && n > 0, nil
		}
	}
	return false, nil
}
