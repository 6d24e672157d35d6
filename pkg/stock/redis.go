// Package stock is the Redis admission gate: its keys, its Lua scripts, and the calls that
// load, reserve and release stock for a session×prize.
package stock

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-pipeline/seckill/pkg/certs"
)

// Options is how to reach Redis: where, as whom, and over what.
type Options struct {
	Addr        string // one address, or comma-separated seeds of a Redis Cluster
	Username    string // ACL user; "" is Redis's default user
	Password    string
	TLS         *tls.Config // nil: plaintext; the same on every node of a cluster
	ReadTimeout time.Duration
}

// who names the server and the user in an error, never the password.
func (o Options) who(addr string) string {
	user := o.Username
	if user == "" {
		user = "default"
	}
	return fmt.Sprintf("redis %s as user %s", addr, user)
}

// Connect is Dial with a password only (tools and tests on the open local stack).
func Connect(ctx context.Context, addr, password string, readTimeout time.Duration) (redis.UniversalClient, error) {
	return Dial(ctx, Options{Addr: addr, Password: password, ReadTimeout: readTimeout})
}

// Dial returns a Redis client for the gate and checks that the server answers. o.Addr is
// one address or a comma-separated list of seed addresses. Whether it is a Redis Cluster is
// asked of the servers, not configured: the first seed that answers says (INFO cluster,
// asked with the same user and TLS as everything after), and a cluster gets a cluster
// client (keys routed by slot; pipelines split per node), a single server a plain one, so
// the services run unchanged on either. Several seeds that are not a cluster are refused: a
// client would silently use only the first. A reply slower than ReadTimeout is retried by
// go-redis (up to 3 times), which the gate's scripts are built to survive. A refusal (wrong
// password, unknown CA, plaintext to a TLS port) names the server and the user.
func Dial(ctx context.Context, o Options) (redis.UniversalClient, error) {
	readTimeout := o.ReadTimeout
	if readTimeout <= 0 {
		readTimeout = time.Second
	}
	var seeds []string
	for _, a := range strings.Split(o.Addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			seeds = append(seeds, a)
		}
	}
	if len(seeds) == 0 {
		return nil, errors.New("redis: no address")
	}
	cluster, err := clusterEnabled(ctx, seeds, o)
	if err != nil {
		return nil, err
	}
	if !cluster && len(seeds) > 1 {
		return nil, fmt.Errorf("redis %s: several addresses, but the servers do not run in cluster mode (give one address for a single server)", o.Addr)
	}
	var rdb redis.UniversalClient
	if cluster {
		rdb = redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:        seeds,
			Username:     o.Username,
			Password:     o.Password,
			TLSConfig:    o.TLS,
			DialTimeout:  2 * time.Second,
			ReadTimeout:  readTimeout,
			WriteTimeout: time.Second,
			PoolSize:     64, // per node
			MinIdleConns: 8,
			// go-redis re-reads the slot map after a MOVED reply, but a dead primary sends
			// none: it refuses connections, and with the default interval (60 s) the client
			// kept sending a shard's scripts to it for up to a minute after its replica was
			// promoted. Reading the map (CLUSTER SLOTS) at most once a second while commands
			// flow follows a failover within a second of the promotion.
			ClusterStateReloadInterval: time.Second,
		})
	} else {
		rdb = redis.NewClient(&redis.Options{
			Addr:         seeds[0],
			Username:     o.Username,
			Password:     o.Password,
			TLSConfig:    o.TLS,
			DialTimeout:  2 * time.Second,
			ReadTimeout:  readTimeout,
			WriteTimeout: time.Second,
			PoolSize:     64,
			MinIdleConns: 8,
		})
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("%s: %w", o.who(o.Addr), certs.Explain(err, o.TLS != nil, "SECKILL_REDIS_TLS"))
	}
	return rdb, nil
}

// clusterEnabled asks the seeds, in order, whether they run in cluster mode; the first that
// answers decides. A refusal (credentials, TLS) is the same on every seed, so it is
// returned at once rather than hidden behind the next seed's answer.
func clusterEnabled(ctx context.Context, seeds []string, o Options) (bool, error) {
	var errs []error
	for _, a := range seeds {
		if o.TLS != nil {
			if err := certs.Probe(ctx, a, o.TLS, 3*time.Second); err != nil {
				err = fmt.Errorf("%s: %w", o.who(a), certs.Explain(err, true, "SECKILL_REDIS_TLS"))
				var op *net.OpError
				if !errors.As(err, &op) || op.Op != "dial" {
					return false, err
				}
				errs = append(errs, err)
				continue
			}
		}
		c := redis.NewClient(&redis.Options{Addr: a, Username: o.Username, Password: o.Password, TLSConfig: o.TLS,
			DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second, MaxRetries: -1})
		info, err := c.Info(ctx, "cluster").Result()
		_ = c.Close()
		if err != nil {
			err = fmt.Errorf("%s: %w", o.who(a), certs.Explain(err, o.TLS != nil, "SECKILL_REDIS_TLS"))
			if refused(err) {
				return false, err
			}
			errs = append(errs, err)
			continue
		}
		return strings.Contains(info, "cluster_enabled:1"), nil
	}
	return false, errors.Join(errs...)
}

// refused reports a server's refusal of these credentials or this user's rights, which
// another seed would repeat.
func refused(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "WRONGPASS") || strings.Contains(msg, "NOAUTH") || strings.Contains(msg, "NOPERM")
}

// CheckPolicy refuses a Redis that may evict keys: an evicted stock key would read as "not
// loaded" at best and, rebuilt lazily, oversell at worst. NewGate calls it, so every
// service that builds a gate refuses such a Redis at start-up. On a cluster every node the
// cluster lists is asked, replicas included (a replica is promoted in a failover); a node
// that does not answer cannot be vouched for and fails the check too.
func CheckPolicy(ctx context.Context, rdb redis.UniversalClient) error {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return checkPolicy(ctx, rdb, "")
	}
	var mu sync.Mutex
	var errs []error
	nodes := 0
	err := cc.ForEachShard(ctx, func(ctx context.Context, node *redis.Client) error {
		err := checkPolicy(ctx, node, node.Options().Addr+" ")
		mu.Lock()
		defer mu.Unlock()
		nodes++
		if err != nil {
			errs = append(errs, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis cluster nodes: %w", err)
	}
	if nodes == 0 {
		return errors.New("redis cluster: no node to check")
	}
	return errors.Join(errs...)
}

// checkPolicy reads the policy from INFO memory, which a restricted ACL user may be allowed
// (CONFIG is an admin command a service's user should not have, and managed Redis services
// often disable it); a server whose INFO lacks the field is asked with CONFIG GET.
func checkPolicy(ctx context.Context, rdb redis.Cmdable, node string) error {
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return fmt.Errorf("redis %sINFO memory: %w", node, err)
	}
	p, ok := infoField(info, "maxmemory_policy")
	if !ok {
		cfg, err := rdb.ConfigGet(ctx, "maxmemory-policy").Result()
		if err != nil {
			return fmt.Errorf("redis %sCONFIG GET maxmemory-policy (INFO memory has no maxmemory_policy): %w", node, err)
		}
		p = cfg["maxmemory-policy"]
	}
	if p != "noeviction" {
		return fmt.Errorf("redis %smaxmemory-policy is %q; the stock gate requires noeviction", node, p)
	}
	return nil
}

// infoField returns the value of one "name:value" line of an INFO reply.
func infoField(info, name string) (string, bool) {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v, true
		}
	}
	return "", false
}
