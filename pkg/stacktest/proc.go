package stacktest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// Binaries builds the three deployables once per test process and returns the folder that
// holds gateway, consumer and reconciler.
func Binaries(tb testing.TB) string {
	tb.Helper()
	buildOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		buildDir, buildErr = os.MkdirTemp("", "seckill-bin-")
		if buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", buildDir+string(os.PathSeparator), "./gateway", "./consumer", "./reconciler")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return buildDir
}

// Proc is a deployable started by a test. It is stopped (SIGKILL if need be) when the test
// ends; only processes the test started are ever signalled.
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

// Start runs binary name from Binaries with env added to the test's environment.
func Start(tb testing.TB, name string, env map[string]string, args ...string) *Proc {
	tb.Helper()
	cmd := exec.Command(filepath.Join(Binaries(tb), name), args...)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p := &Proc{Name: name, cmd: cmd, out: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", name, err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	tb.Cleanup(func() { p.Kill() })
	return p
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Output is everything the process printed so far.
func (p *Proc) Output() string { return p.out.String() }

// Signal sends sig to the process if it still runs.
func (p *Proc) Signal(sig syscall.Signal) {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(sig)
	}
}

// Kill sends SIGKILL and waits for the exit.
func (p *Proc) Kill() {
	p.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM and waits up to d for a clean exit; it returns the exit error.
func (p *Proc) Stop(d time.Duration) error {
	p.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
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
