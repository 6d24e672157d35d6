package harness

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The cluster profile's fleet: the layout of `PROFILE=cluster deploy/local/run` (gateways
// behind HAProxy, which connects from 127.0.0.2, the gateways trusting it for X-Forwarded-For),
// built per scenario with the harness's own database, topics and keys.

// proxySource is the address HAProxy connects to the gateways from (deploy/local/run's too).
const proxySource = "127.0.0.2"

func (c *Cluster) remember(p *Proc, addr string) {
	if c.procAddr == nil {
		c.procAddr = map[*Proc]string{}
	}
	c.procAddr[p] = addr
}

// startFleet starts c.opts.Gateways gateways and HAProxy in front of them; GatewayAddr
// becomes the proxy's address.
func (c *Cluster) startFleet(ctx context.Context) error {
	if err := c.startGatewayProcs(ctx); err != nil {
		return err
	}
	var err error
	if c.GatewayAddr, err = FreeAddr(); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "seckill-haproxy-")
	if err != nil {
		return err
	}
	var b strings.Builder
	// The run script's configuration: round robin, /healthz checked every second (out after
	// 2 failures), a refused connection retried on another gateway (nothing was sent).
	fmt.Fprintf(&b, `global
    maxconn 4000
defaults
    mode http
    timeout connect 2s
    timeout client 30s
    timeout server 30s
    timeout http-request 10s
    retries 2
    option redispatch 1
frontend public
    bind %s
    option forwardfor
    default_backend gateways
backend gateways
    balance roundrobin
    source %s
    option httpchk GET /healthz
    http-check expect status 200
    default-server inter 1s fall 2 rise 2
`, c.GatewayAddr, proxySource)
	for i, a := range c.gatewayAddrs {
		fmt.Fprintf(&b, "    server gateway-%d %s check\n", i+1, a)
	}
	cfg := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(b.String()), 0o600); err != nil {
		return err
	}
	hp, err := exec.LookPath("haproxy")
	if err != nil {
		return fmt.Errorf("haproxy: %w (deploy/local/stack up --profile cluster installs it)", err)
	}
	if c.haproxy, err = Start("haproxy", hp, nil, "-db", "-f", cfg); err != nil {
		return err
	}
	return waitHealthy(ctx, c.haproxy, "http://"+c.GatewayAddr+"/healthz", 30*time.Second)
}

// startGateways starts c.opts.Gateways gateways on addresses of their own, without a proxy
// (Options.NoProxy); GatewayAddr is the first one's.
func (c *Cluster) startGateways(ctx context.Context) error {
	if err := c.startGatewayProcs(ctx); err != nil {
		return err
	}
	c.GatewayAddr = c.gatewayAddrs[0]
	return nil
}

// startGatewayProcs starts c.opts.Gateways gateways, each on an address of its own.
func (c *Cluster) startGatewayProcs(ctx context.Context) error {
	for i := 0; i < c.opts.Gateways; i++ {
		addr, err := FreeAddr()
		if err != nil {
			return err
		}
		c.gatewayAddrs = append(c.gatewayAddrs, addr)
		c.Gateways = append(c.Gateways, nil)
		if err := c.StartGatewayN(ctx, i); err != nil {
			return err
		}
	}
	c.Gateway = c.Gateways[0]
	return nil
}

// CrowdTargets are the base URLs a crowd sends its clicks to: every gateway when they run
// without a proxy, else the one public address.
func (c *Cluster) CrowdTargets() []string {
	if !c.opts.NoProxy || len(c.gatewayAddrs) == 0 {
		return []string{"http://" + c.GatewayAddr}
	}
	out := make([]string, len(c.gatewayAddrs))
	for i, a := range c.gatewayAddrs {
		out[i] = "http://" + a
	}
	return out
}

// StartGatewayN starts (or restarts) gateway i of the fleet on its fixed address.
func (c *Cluster) StartGatewayN(ctx context.Context, i int) error {
	adminAddr, err := FreeAddr()
	if err != nil {
		return err
	}
	extra := map[string]string{"SECKILL_GATEWAY_ADDR": c.gatewayAddrs[i], "SECKILL_ADMIN_ADDR": adminAddr,
		"SECKILL_TRUSTED_PROXIES": proxySource + "/32"}
	for k, v := range c.opts.GatewayEnv {
		extra[k] = v
	}
	p, err := Start(fmt.Sprintf("gateway-%d", i+1), filepath.Join(c.opts.Bin, "gateway"), c.procEnv(extra))
	if err != nil {
		return err
	}
	c.Gateways[i] = p
	return waitHealthy(ctx, p, "http://"+c.gatewayAddrs[i]+"/readyz", 30*time.Second)
}

// AddConsumer starts one more consumer in the group (a scale-out).
func (c *Cluster) AddConsumer(ctx context.Context) error {
	p, err := c.startConsumer(ctx)
	if err != nil {
		return err
	}
	c.Consumers = append(c.Consumers, p)
	return nil
}

// StopReconcilers stops every scheduled reconciler (before the final --once run).
func (c *Cluster) StopReconcilers() {
	for _, p := range append([]*Proc{c.Reconciler}, c.Reconcilers...) {
		if p != nil && !p.Exited() {
			_ = p.Stop(20 * time.Second)
		}
	}
}

// LeaseHeld tells whether reconciler p holds the lease, from its seckill_reconciler_lease_held
// gauge.
func (c *Cluster) LeaseHeld(ctx context.Context, p *Proc) (bool, error) {
	addr, ok := c.procAddr[p]
	if !ok {
		return false, fmt.Errorf("%s: address unknown", p.Name)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return false, err
	}
	resp, err := (&http.Client{Timeout: time.Second}).Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.WriteString(string(buf[:n]))
		if err != nil {
			break
		}
	}
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(line, "seckill_reconciler_lease_held ") {
			return strings.TrimSpace(strings.TrimPrefix(line, "seckill_reconciler_lease_held ")) == "1", nil
		}
	}
	return false, fmt.Errorf("%s: no seckill_reconciler_lease_held gauge", p.Name)
}

// FlushAll empties Redis: on a Redis Cluster every primary, explicitly. A FLUSHALL through a
// cluster client reaches every shard only when go-redis learned the command's all_shards
// routing tip (recent v9 releases route by the server's command tips); without it, it goes to the node of a
// random slot and the scenario would lose one shard's keys instead of all.
func (c *Cluster) FlushAll(ctx context.Context) error {
	if cc, ok := c.Redis.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			return n.FlushAll(ctx).Err()
		})
	}
	return c.Redis.FlushAll(ctx).Err()
}
