package harness

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A gateway cut off from Redis: it runs in a network namespace of its own, whose loopback
// has only forwarders to the servers (same ports as on the host, so the addresses a Redis
// Cluster and the brokers announce work unchanged). The Redis forwarders are harness Proxies
// and can be cut. A cluster client dials the nodes' announced addresses, so a proxy in front of
// one seed address could not do this.

// netns is a network namespace held open by a sleeping process the harness started.
type netns struct {
	holder *exec.Cmd
	path   string
}

func newNetns() (*netns, error) {
	cmd := exec.Command("unshare", "-n", "sleep", "100000")
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("unshare: %w", err)
	}
	n := &netns{holder: cmd, path: fmt.Sprintf("/proc/%d/ns/net", cmd.Process.Pid)}
	deadline := time.Now().Add(5 * time.Second)
	for {
		// The namespace exists once sleep runs in it: its link differs from ours.
		a, _ := os.Readlink(n.path)
		b, _ := os.Readlink("/proc/self/ns/net")
		if a != "" && a != b {
			break
		}
		if time.Now().After(deadline) {
			n.close()
			return nil, fmt.Errorf("network namespace of pid %d not ready", cmd.Process.Pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if out, err := exec.Command("nsenter", "-t", strconv.Itoa(cmd.Process.Pid), "-n", "ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		n.close()
		return nil, fmt.Errorf("lo up: %v %s", err, out)
	}
	return n, nil
}

func (n *netns) close() {
	_ = n.holder.Process.Kill()
	_ = n.holder.Wait()
}

// in runs fn on an OS thread moved into the namespace, and moves the thread back.
func (n *netns) in(fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return err
	}
	defer self.Close()
	target, err := os.Open(n.path)
	if err != nil {
		return err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("setns: %w", err)
	}
	ferr := fn()
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread is stuck in the namespace: never hand it back to the scheduler.
		runtime.Goexit()
	}
	return ferr
}

// listen opens a listener inside the namespace (a socket keeps its namespace).
func (n *netns) listen(addr string) (net.Listener, error) {
	var ln net.Listener
	err := n.in(func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	})
	return ln, err
}

// forwardInto listens on hostAddr in the harness's namespace and forwards each connection to
// addr inside the namespace (the proxy reaching the isolated gateway).
func (n *netns) forwardInto(hostAddr, addr string) (io.Closer, error) {
	ln, err := net.Listen("tcp", hostAddr)
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var s net.Conn
				if err := n.in(func() error {
					var err error
					s, err = net.DialTimeout("tcp", addr, 2*time.Second)
					return err
				}); err != nil {
					return
				}
				defer s.Close()
				go func() { _, _ = io.Copy(s, c); s.Close() }()
				_, _ = io.Copy(c, s)
			}()
		}
	}()
	return ln, nil
}

// isolation is a gateway moved into its own namespace, with its Redis and Kafka forwarders
// and its admin listener forwarded to the host.
type isolation struct {
	ns      *netns
	redis   []*Proxy
	kafka   []*Proxy
	admin   string // the gateway's admin listener, reached from the host
	closers []io.Closer
}

// Cut cuts (on) or restores (off) the isolated gateway's every Redis connection.
func (iso *isolation) Cut(on bool) {
	for _, p := range iso.redis {
		p.Cut(on)
	}
}

// CutKafka cuts (on) or restores (off) the isolated gateway's every broker connection: its
// produces fail and its grab events wait in its relay.
func (iso *isolation) CutKafka(on bool) {
	for _, p := range iso.kafka {
		p.Cut(on)
	}
}

func (iso *isolation) close() {
	for _, c := range iso.closers {
		_ = c.Close()
	}
	iso.ns.close()
}

// IsolateGateway stops fleet gateway i and starts it again in a network namespace of its own,
// reached by the proxy on its usual address, reaching Kafka, MySQL and Redis through
// forwarders; Cut on the result cuts it off Redis, CutKafka off Kafka.
func (c *Cluster) IsolateGateway(ctx context.Context, i int) (*isolation, error) {
	ns, err := newNetns()
	if err != nil {
		return nil, err
	}
	iso := &isolation{ns: ns}
	c.isolations = append(c.isolations, iso)
	forward := func(addr string, group *[]*Proxy) error {
		ln, err := ns.listen(addr)
		if err != nil {
			return err
		}
		p := newProxyOn(ln, addr)
		iso.closers = append(iso.closers, cutCloser{p})
		if group != nil {
			*group = append(*group, p)
		}
		return nil
	}
	for _, a := range c.Brokers {
		if err := forward(a, &iso.kafka); err != nil {
			return nil, err
		}
	}
	dsn := c.DSN
	if k := strings.Index(dsn, "tcp("); k >= 0 {
		if err := forward(dsn[k+4:k+4+strings.Index(dsn[k+4:], ")")], nil); err != nil {
			return nil, err
		}
	}
	for _, a := range splitAddrs(env("SECKILL_REDIS_ADDR", "")) {
		if err := forward(a, &iso.redis); err != nil {
			return nil, err
		}
	}
	if err := c.Gateways[i].Stop(20 * time.Second); err != nil && !c.Gateways[i].Exited() {
		return nil, err
	}
	inner := "127.0.0.1:18080"
	fw, err := ns.forwardInto(c.gatewayAddrs[i], inner)
	if err != nil {
		return nil, err
	}
	iso.closers = append(iso.closers, fw)
	if iso.admin, err = FreeAddr(); err != nil {
		return nil, err
	}
	afw, err := ns.forwardInto(iso.admin, "127.0.0.1:18081")
	if err != nil {
		return nil, err
	}
	iso.closers = append(iso.closers, afw)
	extra := map[string]string{"SECKILL_GATEWAY_ADDR": inner, "SECKILL_ADMIN_ADDR": "127.0.0.1:18081"}
	for k, v := range c.opts.GatewayEnv {
		extra[k] = v
	}
	p, err := Start(fmt.Sprintf("gateway-%d", i+1), "nsenter",
		c.procEnv(extra), "-t", strconv.Itoa(ns.holder.Process.Pid), "-n", "--", filepath.Join(c.opts.Bin, "gateway"))
	if err != nil {
		return nil, err
	}
	c.Gateways[i] = p
	return iso, waitHealthy(ctx, p, "http://"+c.gatewayAddrs[i]+"/readyz", 30*time.Second)
}

// cutCloser closes a proxy's listener and drops its open connections.
type cutCloser struct{ p *Proxy }

func (c cutCloser) Close() error {
	c.p.Cut(true)
	return c.p.Close()
}
