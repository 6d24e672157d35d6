package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// upgradeVersion is the build version of the "new release" a rolling upgrade installs: the
// same code, stamped differently, so each restarted process can be told from the old ones.
const upgradeVersion = "rolling-upgrade-new"

// rollingUpgrade is the procedure of docs/operators.md (Rolling upgrade) as a scenario: two
// gateways, two consumers and two reconcilers, each stopped with SIGTERM and started again
// from the new build, one at a time, while a paced crowd (at least 20 s for the short crowd)
// keeps grabbing. On the single profile the crowd spreads over the two gateways itself (no
// HAProxy there); on the cluster profile HAProxy is in front, and the roll waits for it to
// take a restarted gateway back before stopping the next.
func rollingUpgrade(cluster bool) Scenario {
	var bin string
	var midCrowd bool
	sc := Scenario{Name: "rolling upgrade: consumers, reconcilers, gateways", Short: !cluster, Repeats: 0.1,
		Consumers: 2, Gateways: 2, Reconcilers: 2, NoProxy: !cluster, At: 0.1, Rate: 300,
		Before: func(ctx context.Context, e *Env) error {
			var err error
			if bin, err = e.Cluster.buildRelease(ctx, upgradeVersion); err != nil {
				return err
			}
			// The new build's checks first (docs/operators.md, Rolling upgrade, step 1).
			out, err := e.Cluster.CheckRelease(ctx, bin)
			fmt.Fprintf(e.Log, "%s", indent(out))
			return err
		},
		During: func(ctx context.Context, e *Env) error {
			lbWait := time.Duration(0)
			if cluster {
				lbWait = 3 * time.Second // HAProxy: back after 2 passed checks 1 s apart
			}
			gatewaysFrom := func() {
				select {
				case <-e.CrowdDone():
					midCrowd = false
				default:
					midCrowd = true
				}
			}
			if err := e.Cluster.RollingUpgrade(ctx, bin, lbWait, gatewaysFrom, e.Log); err != nil {
				return err
			}
			if !midCrowd {
				// The gateways' roll, the part clients see, came after the crowd: the row
				// would claim more than it showed.
				return errors.New("the crowd ended before the gateways were rolled (the roll was not mid-crowd)")
			}
			select {
			case <-e.CrowdDone():
				fmt.Fprintln(e.Log, "  note: the crowd ended before the last gateway was back")
			default:
			}
			return nil
		}}
	if cluster {
		sc.Name = "cluster: " + sc.Name
	}
	return sc
}

// buildRelease builds the deployables stamped with version into a folder the cluster
// removes on Close, and checks the build says so.
func (c *Cluster) buildRelease(ctx context.Context, version string) (string, error) {
	dir, err := os.MkdirTemp("", "seckill-release-")
	if err != nil {
		return "", err
	}
	c.dirs = append(c.dirs, dir)
	if err := BuildVersion(dir, version); err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, filepath.Join(dir, "gateway"), "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), version) {
		return "", fmt.Errorf("gateway --version of the new build: %q, %v", out, err)
	}
	return dir, nil
}

// RollingUpgrade replaces every running service with the build in bin, one instance at a
// time: SIGTERM (each service's graceful shutdown: the consumer finishes and commits its
// batches and leaves the group, the gateway stops accepting, answers what it holds and
// drains its relay, the reconciler ends its run), then the new build on the same settings,
// and only when it is ready the next instance. Readers before writers: the consumers and
// the reconcilers first, the gateways (which produce the grab events) last, so a new
// release's events never meet an old reader. lbWait is how long a load balancer needs to
// route to a restarted gateway again; gatewaysFrom (nil: none) is called when the gateways'
// turn comes.
func (c *Cluster) RollingUpgrade(ctx context.Context, bin string, lbWait time.Duration, gatewaysFrom func(), log io.Writer) error {
	c.opts.Bin = bin // every later start, restarts after a fault included, is the new build
	t := time.Now()
	stop := func(p *Proc) error {
		if err := p.Stop(30 * time.Second); err != nil {
			return fmt.Errorf("graceful stop: %w\n%s", err, tail(p.Output(), 10))
		}
		return nil
	}
	for i, p := range c.Consumers {
		if err := stop(p); err != nil {
			return err
		}
		if err := c.RestartConsumer(ctx, i); err != nil {
			return err
		}
		fmt.Fprintf(log, "  consumer %d upgraded (%s)\n", i+1, time.Since(t).Round(10*time.Millisecond))
	}
	for i, p := range c.Reconcilers {
		if err := stop(p); err != nil {
			return err
		}
		np, err := c.StartReconciler(ctx)
		if err != nil {
			return err
		}
		c.Reconcilers[i] = np
		if i == 0 {
			c.Reconciler = np
		}
		fmt.Fprintf(log, "  reconciler %d upgraded (%s)\n", i+1, time.Since(t).Round(10*time.Millisecond))
	}
	if gatewaysFrom != nil {
		gatewaysFrom()
	}
	for i, p := range c.Gateways {
		if err := stop(p); err != nil {
			return err
		}
		if err := c.StartGatewayN(ctx, i); err != nil {
			return err
		}
		if i == 0 {
			c.Gateway = c.Gateways[0]
		}
		fmt.Fprintf(log, "  gateway %d upgraded (%s)\n", i+1, time.Since(t).Round(10*time.Millisecond))
		sleepCtx(ctx, lbWait)
	}
	return ctx.Err()
}

// CheckRelease runs `reconciler --check` of the build in bin against the cluster, as an
// operator does before rolling it out, and returns its output; an error when it fails.
func (c *Cluster) CheckRelease(ctx context.Context, bin string) (string, error) {
	addr, err := FreeAddr()
	if err != nil {
		return "", err
	}
	p, err := Start("reconciler-check", filepath.Join(bin, "reconciler"), c.procEnv(map[string]string{"SECKILL_RECONCILER_ADDR": addr}), "--check")
	if err != nil {
		return "", err
	}
	if err := p.Wait(60 * time.Second); err != nil {
		if !p.Exited() {
			p.Kill()
		}
		return p.Output(), fmt.Errorf("reconciler --check of the new build: %w\n%s", err, tail(p.Output(), 10))
	}
	return p.Output(), nil
}

func indent(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "{") {
			continue // a JSON log line (stderr shares the harness's buffer)
		}
		b.WriteString("  " + l + "\n")
	}
	return b.String()
}
