// Command chaos runs the failure matrix of DESIGN.md against the local stack: for every
// scenario a seeded flash crowd, a fault (kill -9, SIGSTOP, restart, data loss, conflict
// storm, drift, lost replies), a drain, one reconciler run, and the invariant checks. It
// prints a table and exits 1 when any oversell, duplicate, lost grab or final drift was
// found. Rerun a failure with -seed and -only.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sys/unix"

	"github.com/seckill-pipeline/seckill/internal/harness"
	"github.com/seckill-pipeline/seckill/internal/history"
	"github.com/seckill-pipeline/seckill/internal/linearcheck"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The harness's own MySQL pool sees the server restarts it causes; the driver's
	// "bad idle connection" notes are expected noise, not findings.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	// Likewise go-redis's pool notes while a Redis Cluster primary is down on purpose.
	redis.SetLogger(quiet{})
	closeInheritedOnExec()
	ok, err := run(ctx, os.Args[1:], os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func run(ctx context.Context, args []string, out io.Writer) (bool, error) {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	seed := fs.Uint64("seed", uint64(time.Now().UnixNano()%1_000_000_007), "base seed (scenario i uses seed+i)")
	only := fs.String("only", "", "run only scenarios whose name contains this text")
	short := fs.Bool("short", false, "the short set (what `make test` runs) with the small crowd")
	cluster := fs.Bool("cluster", os.Getenv("SECKILL_CLUSTER") == "1",
		"the cluster profile's matrix (default when SECKILL_CLUSTER=1, as in .state/cluster/env)")
	artifacts := fs.String("artifacts", filepath.Join("results", "chaos", time.Now().UTC().Format("20060102T150405Z")),
		"where each row's history (and a violation's visualization) is written; empty: nowhere")
	check := fs.String("check", "", "check one recorded history file (a row's .history.jsonl.gz) and exit: no stack needed")
	mutations := fs.Bool("mutations", false,
		"build each deliberately broken copy of the tree (internal/mutation), run its row with the small crowd, and fail unless the history check catches it")
	if err := fs.Parse(args); err != nil {
		return false, err
	}
	if fs.NArg() > 0 {
		return false, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *check != "" {
		return checkFile(*check, out)
	}
	if *mutations {
		return runMutations(ctx, *seed, *only, *artifacts, out)
	}
	bin, err := os.MkdirTemp("", "seckill-chaos-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(bin)
	if err := harness.Build(bin); err != nil {
		return false, err
	}
	size := harness.Full
	if *short {
		size = harness.Small
	}
	scenarios := harness.Scenarios()
	profile := "single"
	if *cluster {
		scenarios, profile = harness.ClusterScenarios(), "cluster"
	}
	fmt.Fprintf(out, "chaos suite (%s profile), base seed %d, histories in %s\n", profile, *seed, *artifacts)
	var rows []harness.Result
	ok := true
	for i, sc := range scenarios {
		if (*short && !sc.Short) || (*only != "" && !strings.Contains(sc.Name, *only)) {
			continue
		}
		s := *seed + uint64(i)
		fmt.Fprintf(out, "== %s (seed %d)\n", sc.Name, s)
		res, err := harness.Run(ctx, sc, s, size, bin, *artifacts, out)
		if err != nil {
			// The harness itself failed (a service that would not start, a server that would
			// not come back): a failed row, and the suite goes on.
			res.Problems = append(res.Problems, "harness: "+err.Error())
		}
		rows = append(rows, res)
		ok = ok && res.OK()
	}
	fmt.Fprintln(out)
	harness.Table(out, rows)
	if !ok {
		fmt.Fprintf(out, "\nINVARIANTS VIOLATED (base seed %d)\n", *seed)
	}
	return ok, nil
}

// checkFile checks a recorded history again, as the row did: the verdict, and every
// violation with the operations that show it.
func checkFile(path string, out io.Writer) (bool, error) {
	h, ops, err := history.ReadFile(path)
	if err != nil {
		return false, err
	}
	rep := linearcheck.Check(h, ops)
	fmt.Fprintf(out, "%s (seed %d): %d operations, %d buyer partitions, checked in %s\n", h.Row, h.Seed, rep.Ops, rep.Partitions,
		rep.Elapsed.Round(time.Millisecond))
	for _, v := range rep.Violations {
		fmt.Fprintln(out, v)
		for _, op := range v.Ops {
			fmt.Fprintln(out, "   ", linearcheck.Describe(op))
		}
	}
	if rep.Linearizable() {
		fmt.Fprintln(out, "linearizable: yes")
		return true, nil
	}
	fmt.Fprintln(out, "linearizable: no")
	return false, nil
}

// closeInheritedOnExec keeps the descriptors this process inherited (beyond stdin, stdout and
// stderr) from the processes it starts. Runs are wrapped in flock(1), which passes its lock's
// descriptor down; a node the run restarts (`stack start`) is a daemon that would inherit it
// and hold the lock after the run, for as long as it lives, blocking every later run. flock
// itself keeps the lock until the run ends.
func closeInheritedOnExec() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
}
