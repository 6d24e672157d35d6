package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/seckill-pipeline/seckill/internal/load"
)

// -profile: where the gateway's CPU goes at its closed-loop max. After the gateway step's
// figures are taken, one more closed-loop window at the concurrency that set the max runs
// while the gateway's own /debug/pprof/profile (its admin listener, behind the admin
// credential) samples it; the profile is written to the results folder. It runs last so
// that no figure of the step is measured on a gateway that served the extra window. A
// profile carries its symbols: `go tool pprof -top <file>` reads it without the binary.

// profileSeconds is how long the gateway is sampled; the window's load lasts longer, so
// the whole profile is under load.
const profileSeconds = 5

// profileGateway runs the profiled window and writes the profile to b.profileDir.
func (b *bench) profileGateway(ctx context.Context, adminAddr, token string, conc int, maxRate float64,
	url func(int) string, users feed, rep int) error {
	// Enough grabs for two seconds more than the profile at the step's max, ended by count:
	// a window cut by its deadline would count the requests in flight then as errors.
	n := max(int(maxRate*(profileSeconds+2)), 1000)
	tok, err := users(n)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("gateway-cpu-rep%d%s.pprof", rep, b.side)
	path := filepath.Join(b.profileDir, name)
	got := make(chan error, 1)
	go func() {
		got <- fetchProfile(ctx, "http://"+adminAddr+"/debug/pprof/profile?seconds="+fmt.Sprint(profileSeconds), token, path)
	}()
	s := load.Run(ctx, load.Options{Requests: n, Concurrency: conc, MaxDuration: 4 * profileSeconds * time.Second},
		b.httpGrab(url, tok, fmt.Sprintf("prof%d", conc)))
	if err := <-got; err != nil {
		return err
	}
	if s.ThroughputPS == 0 {
		return fmt.Errorf("profiled window: the gateway served nothing")
	}
	b.logf("  profiled window, concurrency %d: %s; CPU profile %s", conc, s, path)
	return nil
}

// fetchProfile saves the gateway's CPU profile for the seconds named in url to path.
func fetchProfile(ctx context.Context, url, token, path string) error {
	ctx, cancel := context.WithTimeout(ctx, (profileSeconds+30)*time.Second)
	defer cancel()
	body, err := getOK(ctx, url, token)
	if err != nil {
		return fmt.Errorf("gateway profile: %w", err)
	}
	defer body.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, body); err != nil {
		f.Close()
		return fmt.Errorf("gateway profile: %w", err)
	}
	return f.Close()
}

// openProfileSeconds is how long the open step samples the gateway from the open on: the
// second in which the crowd that waited is served, and the one after.
const openProfileSeconds = 2

// profileOpen, with -profile, samples the gateway of an open row from the moment its
// session opens: a CPU profile and the allocations of openProfileSeconds, then the live
// heap as the last of them ends (the memory the soft limit presses on), also as text with
// the runtime's memory statistics. It returns at once;
// the returned wait joins the fetches and reports the first error. Without -profile both
// are no-ops.
func (b *bench) profileOpen(ctx context.Context, env *openEnv, open time.Time, label string, rep int) (wait func() error) {
	if b.profileDir == "" {
		return func() error { return nil }
	}
	base := env.admin.Base + "/debug/pprof/"
	prefix := filepath.Join(b.profileDir, fmt.Sprintf("gateway-open-%s-rep%d%s", label, rep, b.side))
	secs := fmt.Sprint(openProfileSeconds)
	done := make(chan error, 3)
	go func() {
		if err := pause(ctx, time.Until(open)); err != nil {
			done <- err
			done <- err
			done <- err
			return
		}
		go func() { done <- fetchProfile(ctx, base+"profile?seconds="+secs, env.admin.Token, prefix+"-cpu.pprof") }()
		go func() {
			done <- fetchProfile(ctx, base+"allocs?seconds="+secs, env.admin.Token, prefix+"-allocs.pprof")
		}()
		if err := pause(ctx, openProfileSeconds*time.Second); err != nil {
			done <- err
			return
		}
		// The text form ends with the runtime's memory statistics (stacks, heap in use and
		// idle, the collector's cycles), which the binary profile does not carry.
		done <- errors.Join(fetchProfile(ctx, base+"heap", env.admin.Token, prefix+"-heap.pprof"),
			fetchProfile(ctx, base+"heap?debug=1", env.admin.Token, prefix+"-heap.txt"))
	}()
	return func() error {
		var errs []error
		for range 3 {
			errs = append(errs, <-done)
		}
		if err := errors.Join(errs...); err != nil {
			return err
		}
		b.logf("  profiles at the open: %s-{cpu,allocs,heap}.pprof, %[1]s-heap.txt", prefix)
		return nil
	}
}
