// Package harness runs the pipeline's three deployables as real processes against the local
// stack and breaks things on purpose: it kills, pauses and restarts services and servers by
// PID, fires a seeded flash crowd over HTTP, and checks the invariants of DESIGN.md from
// MySQL, Redis, the order topic and every recorded answer.
package harness

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// Root is the repository root (where go.mod is).
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Build compiles the three deployables into dir.
func Build(dir string) error { return BuildVersion(dir, "") }

// BuildVersion compiles the three deployables into dir with version stamped as their build
// version (--version, seckill_build_info; "" leaves it unset): the "new release" of the
// rolling upgrade scenarios.
func BuildVersion(dir, version string) error { return BuildFrom(Root(), dir, version) }

// BuildFrom compiles the three deployables of the module at root (a mutated copy of the
// tree, internal/mutation) into dir.
func BuildFrom(root, dir, version string) error {
	args := []string{"build", "-o", dir + string(os.PathSeparator)}
	if version != "" {
		args = append(args, "-ldflags", "-X github.com/seckill-pipeline/seckill/pkg/buildinfo.version="+version)
	}
	cmd := exec.Command("go", append(args, "./gateway", "./consumer", "./reconciler")...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, out)
	}
	return nil
}

// Proc is a process the harness started. Only such processes are ever signalled.
type Proc struct {
	Name string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Start runs path with env added to this process's environment.
func Start(name, path string, env map[string]string, args ...string) (*Proc, error) {
	cmd := exec.Command(path, args...)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p := &Proc{Name: name, cmd: cmd, out: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return p, nil
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Output is everything the process printed so far.
func (p *Proc) Output() string { return p.out.String() }

// Signal sends sig if the process still runs.
func (p *Proc) Signal(sig syscall.Signal) {
	if !p.Exited() {
		_ = p.cmd.Process.Signal(sig)
	}
}

// Kill sends SIGKILL and waits for the exit.
func (p *Proc) Kill() {
	p.Signal(syscall.SIGCONT) // a stopped process must be able to die
	p.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM and waits up to d for a clean exit, then kills.
func (p *Proc) Stop(d time.Duration) error {
	p.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		var ee *exec.ExitError
		if errors.As(p.err, &ee) {
			return fmt.Errorf("%s exited: %w", p.Name, p.err)
		}
		return nil
	case <-time.After(d):
		p.Kill()
		return fmt.Errorf("%s did not stop within %s", p.Name, d)
	}
}

// Wait waits up to d for the process to exit by itself and returns its exit error.
func (p *Proc) Wait(d time.Duration) error {
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		return fmt.Errorf("%s still running after %s", p.Name, d)
	}
}

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}
