package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/stock"
)

// The cluster profile's failure matrix (make chaos PROFILE=cluster): the same crowd, drain,
// reconciler run and invariant checks as the single-node suite, against three KRaft brokers
// (RF 3, min ISR 2), a six-node Redis Cluster, two gateways behind HAProxy, three consumers
// and two reconcilers. Nodes are killed and restarted through deploy/local/stack, which
// signals only the PIDs it wrote.

// clusterStack runs `deploy/local/stack ARGS --profile cluster`.
func clusterStack(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(Root(), "deploy", "local", "stack"), append(args, "--profile", "cluster")...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("stack %v: %v\n%s", args, err, tail(string(out), 10))
	}
	return string(out), nil
}

// hotPrize is the prize with the most stock: the one the crowd is still buying mid-crowd.
func (c *Pipeline) hotPrize() int {
	hot := 0
	for i, p := range c.Prizes {
		if p.StockPerSession > c.Prizes[hot].StockPerSession {
			hot = i
		}
	}
	return hot
}

// GrabLeader returns the broker (kafka-N) leading the grab partition of prize i.
func (c *Pipeline) GrabLeader(ctx context.Context, i int) (string, error) {
	var d kafka.Dialer
	for _, b := range c.Brokers {
		conn, err := d.DialContext(ctx, "tcp", b)
		if err != nil {
			continue
		}
		parts, err := conn.ReadPartitions(c.Topics.Grab.Name)
		conn.Close()
		if err != nil {
			continue
		}
		want := event.PartitionOf(event.PartitionKey(c.Session.ID, c.Prizes[i].ID), len(parts))
		for _, p := range parts {
			if p.ID == want {
				addr := net.JoinHostPort(p.Leader.Host, strconv.Itoa(p.Leader.Port))
				if n := slices.Index(c.Brokers, addr); n >= 0 {
					return fmt.Sprintf("kafka-%d", n+1), nil
				}
				return "", fmt.Errorf("leader %s is none of %v", addr, c.Brokers)
			}
		}
	}
	return "", errors.New("no broker described the grab topic")
}

var activeController = regexp.MustCompile(`active controller (kafka-\d+)`)

// ActiveController returns the KRaft node acting as the active controller.
func ActiveController(ctx context.Context) (string, error) {
	out, _ := clusterStack(ctx, "status") // exits 1 when a node is down; the line is there anyway
	m := activeController.FindStringSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("no active controller in stack status:\n%s", tail(out, 10))
	}
	return m[1], nil
}

// RedisPrimary returns the Redis node (redis-N) holding prize i's keys.
func (c *Pipeline) RedisPrimary(ctx context.Context, i int) (string, error) {
	return c.redisPrimaryOf(ctx, stock.KeysFor(c.Session.ID, c.Prizes[i].ID).Meta)
}

// redisPrimaryOf returns the Redis node (redis-N) serving key's slot.
func (c *Pipeline) redisPrimaryOf(ctx context.Context, key string) (string, error) {
	cc, ok := c.Redis.(*redis.ClusterClient)
	if !ok {
		return "", errors.New("not a Redis Cluster")
	}
	n, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return "", err
	}
	addrs := splitAddrs(env("SECKILL_REDIS_ADDR", ""))
	if k := slices.Index(addrs, n.Options().Addr); k >= 0 {
		return fmt.Sprintf("redis-%d", k+1), nil
	}
	return "", fmt.Errorf("primary %s is none of %v", n.Options().Addr, addrs)
}

func splitAddrs(s string) []string {
	var out []string
	for _, a := range regexp.MustCompile(`\s*,\s*`).Split(s, -1) {
		if a != "" {
			out = append(out, a)
		}
	}
	return out
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// killNode kills -9 a cluster node, keeps it down for `down`, and starts it again (the
// stack waits until it is ready).
func killNode(ctx context.Context, e *Env, node, why string, down time.Duration) error {
	fmt.Fprintf(e.Log, "  kill -9 %s (%s)\n", node, why)
	if _, err := clusterStack(ctx, "kill", node); err != nil {
		return err
	}
	sleepCtx(ctx, down)
	t := time.Now()
	if _, err := clusterStack(ctx, "start", node); err != nil {
		return err
	}
	fmt.Fprintf(e.Log, "  %s back after %s down (start took %s)\n", node, down, time.Since(t).Round(100*time.Millisecond))
	return nil
}

// ClusterScenarios is the failure matrix on the cluster profile. Short ones run in
// `make chaos-cluster-short`.
func ClusterScenarios() []Scenario {
	fleet := func(sc Scenario) Scenario {
		sc.Gateways, sc.Reconcilers = 2, 2
		if sc.Consumers == 0 {
			sc.Consumers = 3
		}
		if sc.Repeats == 0 {
			sc.Repeats = 0.1
		}
		return sc
	}
	return []Scenario{
		fleet(Scenario{Name: "cluster: happy path"}),
		fleet(Scenario{Name: "cluster: kill -9 the broker leading the hot grab partition", Short: true, At: 0.3,
			During: func(ctx context.Context, e *Env) error {
				node, err := e.Pipeline.GrabLeader(ctx, e.Pipeline.hotPrize())
				if err != nil {
					return err
				}
				return killNode(ctx, e, node, "leader of the hot prize's grab partition", 8*time.Second)
			}}),
		// The open of a sale: a crowd of 256 clients presses before the open and retries
		// every refusal, against gateways whose admission limit is kept small (so this
		// machine's crowd is far above it and the limit refuses, 503 overloaded with a
		// jittered Retry-After), and the hot partition's leader dies as the sale opens.
		fleet(Scenario{Name: "cluster: a sale opens under a crowd above capacity, the hot partition's leader killed at the open",
			Short: true, OpensIn: 3 * time.Second, Concurrency: 256,
			GatewayEnv: func(uint64) (map[string]string, func(), error) {
				return map[string]string{"SECKILL_ADMISSION_MAX": "24", "SECKILL_ADMISSION_MIN": "4"}, func() {}, nil
			},
			During: func(ctx context.Context, e *Env) error {
				sleepCtx(ctx, time.Until(e.Pipeline.Session.Start))
				node, err := e.Pipeline.GrabLeader(ctx, e.Pipeline.hotPrize())
				if err != nil {
					return err
				}
				return killNode(ctx, e, node, "leader of the hot prize's grab partition, at the open", 8*time.Second)
			}}),
		fleet(Scenario{Name: "cluster: kill -9 the active KRaft controller", At: 0.3,
			During: func(ctx context.Context, e *Env) error {
				node, err := ActiveController(ctx)
				if err != nil {
					return err
				}
				return killNode(ctx, e, node, "active controller", 8*time.Second)
			}}),
		// The fair sale's draw (drawrow.go): the Redis primary holding the entry set dies during
		// the window (asynchronous replication may lose the last entries: the users are told
		// to enter again), and the broker leading the draw's grab partition dies while the
		// winners are admitted.
		fleet(Scenario{Name: "cluster draw: kill -9 the draw prize's Redis primary during the entry window", Short: true,
			RedisMayForget: true, Draw: drawRow(),
			During: inTheWindow(func(ctx context.Context, e *Env) error { return failOverRedisPrimary(ctx, e, e.Draw.Prize()) })}),
		fleet(Scenario{Name: "cluster draw: kill -9 the broker leading the draw's grab partition while winners are admitted", Short: true,
			Draw: drawRow(),
			During: func(ctx context.Context, e *Env) error {
				cutoff, of, err := e.Draw.awaitMidDraw(ctx)
				if err != nil {
					return err
				}
				node, err := e.Pipeline.GrabLeader(ctx, e.Draw.Prize())
				if err != nil {
					return err
				}
				return killNode(ctx, e, node, fmt.Sprintf("leader of the draw's grab partition, at cutoff %d of %d", cutoff, of), 8*time.Second)
			}}),
		fleet(Scenario{Name: "cluster: kill -9 the hot prize's Redis primary", Short: true, At: 0.2, RedisMayForget: true,
			During: func(ctx context.Context, e *Env) error { return failOverRedisPrimary(ctx, e, e.Pipeline.hotPrize()) }}),
		// MariaDB: a primary and a semi-synchronous replica behind one writer address
		// (dbfailover.go).
		fleet(Scenario{Name: "cluster: kill -9 the MariaDB primary, fail over", Short: true, At: 0.3, During: killMySQLPrimary}),
		fleet(Scenario{Name: "cluster: MariaDB switchover mid-crowd", At: 0.3, During: switchoverMySQL}),
		fleet(Scenario{Name: "cluster: MariaDB replica's SQL thread stopped", At: 0.1, During: stopReplicaSQL}),
		fleet(Scenario{Name: "cluster: kill -9 one gateway behind the proxy", At: 0.4,
			During: func(ctx context.Context, e *Env) error {
				c := e.Pipeline
				c.Gateways[0].Kill()
				sleepCtx(ctx, 3*time.Second)
				return c.StartGatewayN(ctx, 0)
			}}),
		fleet(Scenario{Name: "cluster: consumers rolling restart (3 -> 2 -> 3, each)", At: 0.2,
			During: func(ctx context.Context, e *Env) error {
				c := e.Pipeline
				for i := range c.Consumers {
					if err := c.Consumers[i].Stop(20 * time.Second); err != nil && !c.Consumers[i].Exited() {
						return err
					}
					sleepCtx(ctx, time.Second)
					if err := c.RestartConsumer(ctx, i); err != nil {
						return err
					}
				}
				return nil
			}}),
		fleet(Scenario{Name: "cluster: consumers scaled out 1 -> 3 mid-crowd", Consumers: 1, At: 0.3,
			During: func(ctx context.Context, e *Env) error {
				for range 2 {
					if err := e.Pipeline.AddConsumer(ctx); err != nil {
						return err
					}
					sleepCtx(ctx, 500*time.Millisecond)
				}
				return nil
			}}),
		fleet(Scenario{Name: "cluster: acting reconciler killed, the other takes over", At: 0.3,
			During: reconcilerTakeover}),
		cutGatewayFromRedis(),
		rollingUpgrade(true),
		relayAndPrimaryLost(),
		fleet(bucketPrimaryKilled()),
	}
}

// failOverRedisPrimary kills -9 the Redis primary holding prize i's keys, waits until its
// replica is promoted and serves the keys, and starts the old primary again (it rejoins as a
// replica of the new one, its own data discarded).
func failOverRedisPrimary(ctx context.Context, e *Env, i int) error {
	c := e.Pipeline
	return failOverRedisKey(ctx, e, stock.KeysFor(c.Session.ID, c.Prizes[i].ID).Meta)
}

// failOverRedisKey is failOverRedisPrimary for the primary serving key's slot.
func failOverRedisKey(ctx context.Context, e *Env, meta string) error {
	c := e.Pipeline
	node, err := c.redisPrimaryOf(ctx, meta)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.Log, "  kill -9 %s (primary of the prize's slot)\n", node)
	if _, err := clusterStack(ctx, "kill", node); err != nil {
		return err
	}
	// The replica is promoted after cluster-node-timeout (15 s); only then does the old
	// primary come back, as a replica of it.
	t := time.Now()
	for time.Since(t) < 60*time.Second && ctx.Err() == nil {
		if now, err := c.redisPrimaryOf(ctx, meta); err == nil && now != node {
			if c.Redis.Exists(ctx, meta).Err() == nil {
				break
			}
		}
		sleepCtx(ctx, 250*time.Millisecond)
	}
	fmt.Fprintf(e.Log, "  replica promoted and serving after %s\n", time.Since(t).Round(100*time.Millisecond))
	_, err = clusterStack(ctx, "start", node)
	return err
}

// relayAndPrimaryLost makes the double fault a 202 given after a failed produce must
// survive. Gateway-1 runs in a network namespace of its own and is cut off from Kafka
// mid-crowd: its produces fail, and each grab it admits is answered 202 only once a Redis
// replica acknowledged the reservation (SECKILL_GATEWAY_REPLICA_WAIT), its event left in the
// relay. Then gateway-1 is killed -9 (its relay never published) and at once the hot prize's
// Redis primary is killed -9 and its replica promoted. Those grabs now exist only as
// reservations on the promoted replica; the reconciler finds them stale and re-publishes them,
// and every 202 must end in an order or a rejection. With SECKILL_GATEWAY_REPLICA_WAIT=0 in
// the environment the gateways answer as before the wait existed, and the row waits for
// failed produces instead of confirmed waits.
func relayAndPrimaryLost() Scenario {
	var iso *isolation
	return Scenario{Name: "cluster: produce failed, then the gateway and the hot Redis primary killed", At: 0.2, RedisMayForget: true,
		Repeats: 0.1, Consumers: 3, Gateways: 2, Reconcilers: 2,
		Before: func(ctx context.Context, e *Env) error {
			var err error
			iso, err = e.Pipeline.IsolateGateway(ctx, 0)
			return err
		},
		During: func(ctx context.Context, e *Env) error {
			c := e.Pipeline
			series := `seckill_gateway_replica_waits_total{result="confirmed"}`
			if w := env("SECKILL_GATEWAY_REPLICA_WAIT", ""); w == "0" || w == "0s" {
				series = "seckill_gateway_kafka_produce_errors_total"
			}
			iso.CutKafka(true)
			fmt.Fprintf(e.Log, "  gateway-1 cut off from Kafka\n")
			var n float64
			for t := time.Now(); ; sleepCtx(ctx, 200*time.Millisecond) {
				var err error
				if n, err = gatewayMetric(ctx, iso.admin, c.Env["SECKILL_ADMIN_TOKEN"], series); err == nil && n >= 20 {
					break
				}
				if time.Since(t) > 30*time.Second || ctx.Err() != nil {
					return fmt.Errorf("gateway-1 counted %v of %s in 30 s (last error %v): the row would test nothing", n, series, err)
				}
			}
			pending, _ := gatewayMetric(ctx, iso.admin, c.Env["SECKILL_ADMIN_TOKEN"], "seckill_gateway_relay_pending")
			c.Gateways[0].Kill()
			// Gateway-2's grabs are published and settled within milliseconds, so what stays
			// pending in the hot prize is mostly gateway-1's stranded grabs.
			res := stock.KeysFor(c.Session.ID, c.Prizes[c.hotPrize()].ID).Reserved
			before, _ := c.Redis.HLen(ctx, res).Result()
			fmt.Fprintf(e.Log, "  kill -9 gateway-1 (%s %v, %v events in its relay); hot prize: %d reservations pending\n",
				series, n, pending, before)
			if err := failOverRedisPrimary(ctx, e, c.hotPrize()); err != nil {
				return err
			}
			after, err := c.Redis.HLen(ctx, res).Result()
			fmt.Fprintf(e.Log, "  hot prize after the failover: %d reservations pending (%v)\n", after, err)
			return nil
		}}
}

// gatewayMetric reads one series (name and labels, as exposed) from a gateway's admin
// /metrics.
func gatewayMetric(ctx context.Context, adminAddr, token, series string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+adminAddr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("metrics: %s", resp.Status)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("no %s in the gateway's metrics", series)
}

// cutGatewayFromRedis runs gateway-1 in a network namespace of its own (netns.go) and cuts
// it off every Redis node for 10 s mid-crowd: it answers 503 while the other gateway goes on.
func cutGatewayFromRedis() Scenario {
	var iso *isolation
	return Scenario{Name: "cluster: one gateway cut off from Redis for 10 s", At: 0.3, Repeats: 0.1,
		Consumers: 3, Gateways: 2, Reconcilers: 2,
		Before: func(ctx context.Context, e *Env) error {
			var err error
			iso, err = e.Pipeline.IsolateGateway(ctx, 0)
			return err
		},
		During: func(ctx context.Context, e *Env) error {
			iso.Cut(true)
			fmt.Fprintf(e.Log, "  gateway-1 cut off from Redis\n")
			sleepCtx(ctx, 10*time.Second)
			iso.Cut(false)
			fmt.Fprintf(e.Log, "  gateway-1 reconnected\n")
			return nil
		}}
}

// reconcilerTakeover kills -9 the reconciler caught holding the lease (its
// seckill_reconciler_lease_held is 1 only while it runs, so it is caught mid-run) and requires
// the other to take the lease (its fencing number moves in MySQL: only the other can move it
// now) within one lease TTL plus one reconcile interval (the next time it tries).
func reconcilerTakeover(ctx context.Context, e *Env) error {
	c := e.Pipeline
	ttl, err := time.ParseDuration(c.Env["SECKILL_LEASE_TTL"])
	if err != nil {
		return err
	}
	every, err := time.ParseDuration(c.Env["SECKILL_RECONCILE_INTERVAL"])
	if err != nil {
		return err
	}
	fence := func() (int64, error) {
		var n int64
		err := c.DB.WithContext(ctx).Raw("SELECT fence FROM leases WHERE name = ?", c.Env["SECKILL_RECONCILER_LEASE"]).Row().Scan(&n)
		return n, err
	}
	var acting *Proc
	var at int64
	for t := time.Now(); acting == nil; {
		for _, p := range c.Reconcilers {
			if held, err := c.LeaseHeld(ctx, p); err == nil && held {
				acting = p
				p.Kill()
				break
			}
		}
		if acting == nil {
			if time.Since(t) > 20*ttl || ctx.Err() != nil {
				return errors.New("no reconciler caught holding the lease")
			}
			sleepCtx(ctx, 10*time.Millisecond)
		}
	}
	killed := time.Now()
	if at, err = fence(); err != nil {
		return err
	}
	for {
		if n, err := fence(); err == nil && n > at {
			break
		}
		if time.Since(killed) > 5*ttl || ctx.Err() != nil {
			return fmt.Errorf("no other reconciler took the lease %s after the acting one died", time.Since(killed).Round(10*time.Millisecond))
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
	took := time.Since(killed)
	fmt.Fprintf(e.Log, "  a reconciler killed holding the lease (fence %d); the other took it over after %s (lease TTL %s, interval %s)\n",
		at, took.Round(10*time.Millisecond), ttl, every)
	if took > ttl+every {
		return fmt.Errorf("takeover took %s, more than one lease TTL (%s) plus one interval (%s)", took.Round(10*time.Millisecond), ttl, every)
	}
	return nil
}
