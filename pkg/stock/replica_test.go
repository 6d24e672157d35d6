package stock_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
)

// heldLink forwards a replica's replication connection to its primary and can hold back the
// primary's stream (Hold(true)): the replica stays connected but receives nothing, as behind
// a congested or partitioned link.
type heldLink struct {
	ln   net.Listener
	mu   sync.Mutex
	cond *sync.Cond
	held bool
}

func newHeldLink(t *testing.T, primary string) *heldLink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &heldLink{ln: ln}
	h.cond = sync.NewCond(&h.mu)
	t.Cleanup(func() { h.Hold(false); ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", primary)
			if err != nil {
				c.Close()
				continue
			}
			go func() { _, _ = io.Copy(s, c); s.Close() }()
			go func() {
				defer c.Close()
				buf := make([]byte, 32<<10)
				for {
					n, err := s.Read(buf)
					h.mu.Lock()
					for h.held {
						h.cond.Wait()
					}
					h.mu.Unlock()
					if n > 0 {
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return h
}

func (h *heldLink) Hold(on bool) {
	h.mu.Lock()
	h.held = on
	h.mu.Unlock()
	h.cond.Broadcast()
}

// privateRedis starts a redis-server of the test's own (no persistence) and returns a client.
func privateRedis(t *testing.T, args ...string) (*redis.Client, string) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("redis-server not installed")
		}
		t.Skip("redis-server not installed")
	}
	addr := stacktest.FreeAddr(t)
	_, port, _ := strings.Cut(addr, ":")
	srv := exec.Command(bin, append([]string{"--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no",
		"--maxmemory-policy", "noeviction", "--dir", t.TempDir()}, args...)...)
	var out strings.Builder
	srv.Stdout, srv.Stderr = &out, &out
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	for deadline := time.Now().Add(10 * time.Second); rdb.Ping(context.Background()).Err() != nil; {
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not start:\n%s", addr, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return rdb, addr
}

// pair is a private primary, its replica (linked through a heldLink) and a gate on the
// primary with prize (pairSession, pairPrize) loaded.
type pair struct {
	primary, replica *redis.Client
	paddr            string
	link             *heldLink
	gate             *stock.Gate
}

const pairSession, pairPrize = 7, 3

func newPair(t *testing.T, ctx context.Context) *pair {
	t.Helper()
	p := &pair{}
	// No delay before a full sync, so the replica is up at once.
	p.primary, p.paddr = privateRedis(t, "--repl-diskless-sync-delay", "0")
	p.link = newHeldLink(t, p.paddr)
	lhost, lport, _ := net.SplitHostPort(p.link.ln.Addr().String())
	p.replica, _ = privateRedis(t, "--replicaof", lhost, lport)
	for deadline := time.Now().Add(20 * time.Second); ; {
		info := p.replica.Info(ctx, "replication").Val()
		if strings.Contains(info, "master_link_status:up") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica never synced:\n%s", info)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var err error
	if p.gate, err = stock.NewGate(ctx, p.primary); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.gate.Close)
	if _, err := p.gate.Load(ctx, []seckill.Stock{{SessionID: pairSession, PrizeID: pairPrize, Total: 10, Left: 10, PerUserLimit: 5}}, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *pair) grab(t *testing.T, ctx context.Context, rid string) {
	t.Helper()
	v, err := p.gate.Reserve(ctx, seckill.Grab{RequestID: rid, UserID: "u1", SessionID: pairSession, PrizeID: pairPrize, AdmittedAt: time.Now()})
	if err != nil || v.Code != stock.Admitted {
		t.Fatalf("reserve %s: %+v %v", rid, v, err)
	}
}

func (p *pair) onReplica(ctx context.Context, rid string) bool {
	return p.replica.HExists(ctx, stock.KeysFor(pairSession, pairPrize).Reserved, rid).Val()
}

// A primary and its replica, the replica's link through heldLink: AwaitReplica confirms a
// reservation the replica has, refuses one it does not (the link held), and one the primary
// does not know; a WAIT on a connection that did not write confirms the held one, which is the
// trap AwaitReplica's own connection avoids.
func TestAwaitReplicaCoversTheReservation(t *testing.T) {
	ctx := stacktest.Context(t, 60*time.Second)
	p := newPair(t, ctx)
	primary, replica, gate := p.primary, p.replica, p.gate
	if has, err := stock.HasReplicas(ctx, primary); err != nil || !has {
		t.Fatalf("HasReplicas(primary) = %v, %v; want true", has, err)
	}
	if has, err := stock.HasReplicas(ctx, replica); err != nil || has {
		t.Fatalf("HasReplicas(a server without replicas) = %v, %v; want false", has, err)
	}
	const sid, pid = pairSession, pairPrize
	grab := func(rid string) { t.Helper(); p.grab(t, ctx, rid) }
	onReplica := func(rid string) bool { return p.onReplica(ctx, rid) }
	link, paddr := p.link, p.paddr

	grab("r1")
	if err := gate.AwaitReplica(ctx, sid, pid, "r1", 5*time.Second); err != nil {
		t.Fatalf("link open: %v", err)
	}
	if !onReplica("r1") {
		t.Fatal("AwaitReplica confirmed r1 but the replica does not have it")
	}

	// Another connection, last used before r2 is written: a pooled connection other than the
	// one the script ran on.
	other := redis.NewClient(&redis.Options{Addr: paddr, PoolSize: 1})
	defer other.Close()
	if err := other.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	caughtUp(t, ctx, primary)
	link.Hold(true)
	grab("r2")
	// The trap: WAIT on that connection answers at once with the connected replica, which
	// has not received r2: it covers that connection's past, not the script's write.
	if n, err := other.Wait(ctx, 1, 300*time.Millisecond).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT on another connection = %d, %v; the trap this test documents did not show", n, err)
	}
	if onReplica("r2") {
		t.Fatal("the replica has r2 although its link is held: the test holds nothing")
	}
	if err := gate.AwaitReplica(ctx, sid, pid, "r2", 300*time.Millisecond); !errors.Is(err, stock.ErrNotReplicated) {
		t.Fatalf("link held: AwaitReplica = %v, want ErrNotReplicated", err)
	}
	if err := gate.AwaitReplica(ctx, sid, pid, "never-admitted", 300*time.Millisecond); !errors.Is(err, stock.ErrReservationGone) {
		t.Fatalf("unknown request id: AwaitReplica = %v, want ErrReservationGone", err)
	}

	link.Hold(false)
	if err := gate.AwaitReplica(ctx, sid, pid, "r2", 5*time.Second); err != nil {
		t.Fatalf("link released: %v", err)
	}
	if !onReplica("r2") {
		t.Fatal("AwaitReplica confirmed r2 but the replica does not have it")
	}
}

// The double fault the wait closes, on a private pair: a reservation AwaitReplica confirmed
// survives a failover, one it refused (the replica's link held) is gone from the promoted
// replica. Before the wait, the gateway answered 202 for both.
func TestUnconfirmedReservationIsLostInAFailover(t *testing.T) {
	ctx := stacktest.Context(t, 60*time.Second)
	p := newPair(t, ctx)
	const sid, pid = pairSession, pairPrize
	grab := func(rid string) { t.Helper(); p.grab(t, ctx, rid) }
	link, primary, replica, gate := p.link, p.primary, p.replica, p.gate
	grab("kept")
	if err := gate.AwaitReplica(ctx, sid, pid, "kept", 5*time.Second); err != nil {
		t.Fatalf("kept: %v", err)
	}
	link.Hold(true)
	grab("lost")
	if err := gate.AwaitReplica(ctx, sid, pid, "lost", 300*time.Millisecond); !errors.Is(err, stock.ErrNotReplicated) {
		t.Fatalf("lost: %v, want ErrNotReplicated", err)
	}
	// Fail over: the primary dies (its unsent stream with it), the replica is promoted.
	if err := primary.ShutdownNoSave(ctx).Err(); err != nil && !strings.Contains(err.Error(), "EOF") && !strings.Contains(err.Error(), "closed") {
		t.Logf("shutdown: %v", err)
	}
	link.ln.Close()
	if err := replica.ReplicaOf(ctx, "no", "one").Err(); err != nil {
		t.Fatal(err)
	}
	res := stock.KeysFor(sid, pid).Reserved
	if !replica.HExists(ctx, res, "kept").Val() {
		t.Fatal("the confirmed reservation did not survive the failover")
	}
	if replica.HExists(ctx, res, "lost").Val() {
		t.Fatal("the unconfirmed reservation survived: the link was not held, the test shows nothing")
	}
}

// caughtUp waits until the replica has acknowledged the primary's whole stream (it acks once
// a second), so that what any connection did so far is covered.
func caughtUp(t *testing.T, ctx context.Context, primary *redis.Client) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		var master, acked int64 = -1, -2
		for _, line := range strings.Split(primary.Info(ctx, "replication").Val(), "\n") {
			line = strings.TrimSpace(line)
			if v, ok := strings.CutPrefix(line, "master_repl_offset:"); ok {
				master, _ = strconv.ParseInt(v, 10, 64)
			}
			if strings.HasPrefix(line, "slave0:") {
				for _, f := range strings.Split(line, ",") {
					if v, ok := strings.CutPrefix(f, "offset="); ok {
						acked, _ = strconv.ParseInt(v, 10, 64)
					}
				}
			}
		}
		if acked >= master {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica acknowledged %d of %d after 10 s", acked, master)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// On the cluster profile, AwaitReplica finds the slot's primary (MasterForKey) and its
// replica confirms; the topology has replicas.
func TestAwaitReplicaOnCluster(t *testing.T) {
	cc := stacktest.ClusterRedis(t)
	ctx := stacktest.Context(t, 30*time.Second)
	if has, err := stock.HasReplicas(ctx, cc); err != nil || !has {
		t.Fatalf("HasReplicas(cluster) = %v, %v; want true", has, err)
	}
	gate, err := stock.NewGate(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	defer gate.Close()
	sid := time.Now().UnixNano() % 1_000_000_000
	pids, _ := clusterPrizes(t, cc, ctx, sid, 1)
	cleanupPrizes(t, cc, sid, pids)
	for _, pid := range pids {
		if _, err := gate.Load(ctx, []seckill.Stock{{SessionID: sid, PrizeID: pid, Total: 5, Left: 5, PerUserLimit: 1}}, time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		rid := seckill.RequestID(sid, pid, "await-replica-key")
		if v, err := gate.Reserve(ctx, seckill.Grab{RequestID: rid, UserID: "u1", SessionID: sid, PrizeID: pid, AdmittedAt: time.Now()}); err != nil || v.Code != stock.Admitted {
			t.Fatalf("reserve: %+v %v", v, err)
		}
		if err := gate.AwaitReplica(ctx, sid, pid, rid, 5*time.Second); err != nil {
			t.Fatalf("prize %d: %v", pid, err)
		}
		if err := gate.AwaitReplica(ctx, sid, pid, rid+"x", time.Second); !errors.Is(err, stock.ErrReservationGone) {
			t.Fatalf("prize %d, unknown request id: %v, want ErrReservationGone", pid, err)
		}
	}
}

// BenchmarkAwaitReplica is the cost the wait adds to a grab whose produce failed (which has
// already waited SECKILL_PRODUCE_TIMEOUT): a connection to the slot's primary, the check and
// marker write, and the WAIT for the replica's acknowledgement. On the cluster profile:
//
//	go test -run '^$' -bench AwaitReplica -benchtime 300x -benchmem ./pkg/stock/
func BenchmarkAwaitReplica(b *testing.B) {
	cc := stacktest.ClusterRedis(b)
	ctx := stacktest.Context(b, 5*time.Minute)
	gate, err := stock.NewGate(ctx, cc)
	if err != nil {
		b.Fatal(err)
	}
	defer gate.Close()
	sid, pid := time.Now().UnixNano()%1_000_000_000, int64(1)
	k := stock.KeysFor(sid, pid)
	b.Cleanup(func() { cc.Del(context.Background(), k.Meta, k.Users, k.Reserved, k.Outcomes) })
	if _, err := gate.Load(ctx, []seckill.Stock{{SessionID: sid, PrizeID: pid, Total: 1, Left: 1, PerUserLimit: 1}}, time.Now().Add(time.Hour)); err != nil {
		b.Fatal(err)
	}
	rid := seckill.RequestID(sid, pid, "bench-await-replica")
	if _, err := gate.Reserve(ctx, seckill.Grab{RequestID: rid, UserID: "u1", SessionID: sid, PrizeID: pid, AdmittedAt: time.Now()}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if err := gate.AwaitReplica(ctx, sid, pid, rid, time.Second); err != nil {
			b.Fatal(err)
		}
	}
}
