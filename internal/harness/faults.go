package harness

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Servers reaches the local stack's servers through the PID files deploy/local/stack wrote:
// the harness signals only processes the project's own script started.
type Servers struct {
	State string
}

// LocalServers returns the stack of this checkout ($SECKILL_STATE_DIR or <repo>/.state).
func LocalServers() Servers {
	return Servers{State: env("SECKILL_STATE_DIR", filepath.Join(Root(), ".state"))}
}

func (s Servers) pid(name string) (int, error) {
	files := map[string]string{"redis": "redis/redis.pid", "mariadb": "mariadb/mysqld.pid", "kafka": "kafka/kafka.pid"}
	f, ok := files[name]
	if !ok {
		return 0, fmt.Errorf("unknown server %q", name)
	}
	b, err := os.ReadFile(filepath.Join(s.State, f))
	if err != nil {
		return 0, fmt.Errorf("%s pid file: %w", name, err)
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// Signal sends sig to a server.
func (s Servers) Signal(name string, sig syscall.Signal) error {
	pid, err := s.pid(name)
	if err != nil {
		return err
	}
	return syscall.Kill(pid, sig)
}

// Kill sends SIGKILL to a server and waits until it is gone.
func (s Servers) Kill(name string) error {
	pid, err := s.pid(name)
	if err != nil {
		return err
	}
	_ = syscall.Kill(pid, syscall.SIGCONT)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %s (pid %d): %w", name, pid, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s (pid %d) still alive after SIGKILL", name, pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// Up runs `deploy/local/stack up`, which restarts what is down and waits until ready.
func (s Servers) Up(ctx context.Context, log io.Writer) error {
	cmd := exec.CommandContext(ctx, filepath.Join(Root(), "deploy", "local", "stack"), "up")
	cmd.Env = append(os.Environ(), "SECKILL_STATE_DIR="+s.State)
	out, err := cmd.CombinedOutput()
	if log != nil {
		fmt.Fprintf(log, "%s", out)
	}
	if err != nil {
		return fmt.Errorf("stack up: %v\n%s", err, out)
	}
	return nil
}

// Proxy is a TCP proxy that delays a seeded fraction of the server's replies past the
// client's read timeout: the command ran, but the client never heard, and retries.
type Proxy struct {
	ln      net.Listener
	target  string
	delay   time.Duration
	frac    float64
	mu      sync.Mutex
	rng     *rand.Rand
	delayed int
	armed   bool
	next    bool
	cut     bool                  // Cut: every connection is dropped, new ones refused
	conns   map[net.Conn]struct{} // open client and server sides, for Cut
}

// Cut drops every open connection and refuses new ones (on), or lets clients connect again
// (off): the server is unreachable for this proxy's clients only.
func (p *Proxy) Cut(on bool) {
	p.mu.Lock()
	p.cut = on
	var open []net.Conn
	if on {
		for c := range p.conns {
			open = append(open, c)
		}
	}
	p.mu.Unlock()
	for _, c := range open {
		c.Close()
	}
}

// track registers c for Cut, or closes it at once when the proxy is cut.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		c.Close()
		return false
	}
	if p.conns == nil {
		p.conns = map[net.Conn]struct{}{}
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	for _, c := range cs {
		delete(p.conns, c)
	}
	p.mu.Unlock()
}

// HoldNext holds back the very next reply, armed or not (a deterministic lost reply).
func (p *Proxy) HoldNext() {
	p.mu.Lock()
	p.next = true
	p.mu.Unlock()
}

// Arm starts (or stops) delaying replies; a new proxy forwards without delay, so the
// client starts up normally.
func (p *Proxy) Arm(on bool) {
	p.mu.Lock()
	p.armed = on
	p.mu.Unlock()
}

// NewProxy listens on loopback and forwards to target.
func NewProxy(target string, seed uint64, frac float64, delay time.Duration) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, delay: delay, frac: frac, rng: rand.New(rand.NewPCG(seed, seed+1))}
	go p.serve()
	return p, nil
}

// newProxyOn forwards what ln accepts to target, without delays (netns.go: a listener in
// another network namespace).
func newProxyOn(ln net.Listener, target string) *Proxy {
	p := &Proxy{ln: ln, target: target, rng: rand.New(rand.NewPCG(1, 2))}
	go p.serve()
	return p
}

// Addr is where clients connect.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Delayed is how many replies were held back so far.
func (p *Proxy) Delayed() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delayed
}

// Close stops accepting connections.
func (p *Proxy) Close() error { return p.ln.Close() }

func (p *Proxy) hold() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.next || (p.armed && p.rng.Float64() < p.frac) {
		p.next = false
		p.delayed++
		return true
	}
	return false
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil || !p.track(s) {
			if s != nil {
				s.Close()
			}
			c.Close()
			p.untrack(c)
			continue
		}
		go func() { _, _ = io.Copy(s, c); s.Close() }()
		go func() {
			defer p.untrack(c, s)
			defer c.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := s.Read(buf)
				if n > 0 {
					if p.hold() {
						time.Sleep(p.delay)
					}
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
}
