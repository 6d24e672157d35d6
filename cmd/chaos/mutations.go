package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/seckill-pipeline/seckill/internal/harness"
	"github.com/seckill-pipeline/seckill/internal/mutation"
)

// runMutations builds each mutation's broken copy of the tree, runs the row that must catch
// it with the small crowd, and reports whether the row's history check did, with the class
// it was meant to be caught as. It fails when any mutation went uncaught.
func runMutations(ctx context.Context, seed uint64, only, artifacts string, out io.Writer) (bool, error) {
	scenarios := harness.Scenarios()
	fmt.Fprintf(out, "mutations, base seed %d, histories in %s\n", seed, artifacts)
	type row struct {
		m      mutation.Mutation
		caught bool
		found  string
		took   time.Duration
	}
	var rows []row
	ok := true
	for i, m := range mutation.All() {
		if only != "" && !strings.Contains(m.Name, only) {
			continue
		}
		at := slices.IndexFunc(scenarios, func(sc harness.Scenario) bool { return sc.Name == m.Row })
		if at < 0 {
			return false, fmt.Errorf("mutation %s: no chaos row %q", m.Name, m.Row)
		}
		start := time.Now()
		fmt.Fprintf(out, "== mutation %s: %s; row %q must report %q\n", m.Name, m.Bug, m.Row, m.Catch)
		res, err := runMutation(ctx, m, scenarios[at], seed+uint64(i), filepath.Join(artifacts, "mutation-"+m.Name), out)
		if err != nil {
			return false, fmt.Errorf("mutation %s: %w", m.Name, err)
		}
		r := row{m: m, caught: res.Violations[m.Catch] > 0, took: time.Since(start)}
		var found []string
		for c, n := range res.Violations {
			found = append(found, fmt.Sprintf("%s ×%d", c, n))
		}
		slices.Sort(found)
		r.found = strings.Join(found, "; ")
		if r.found == "" {
			r.found = "nothing (linearizable: " + res.Linearizable + ")"
		}
		ok = ok && r.caught
		rows = append(rows, r)
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "| %-20s | %-42s | %-52s | %-6s | %s |\n", "mutation", "row", "must be caught as", "caught", "the history check found")
	fmt.Fprintln(out, "|---|---|---|---|---|")
	for _, r := range rows {
		caught := "yes"
		if !r.caught {
			caught = "NO"
		}
		fmt.Fprintf(out, "| %-20s | %-42s | %-52s | %-6s | %s (%.0fs) |\n", r.m.Name, r.m.Row, r.m.Catch, caught, r.found, r.took.Seconds())
	}
	if !ok {
		fmt.Fprintln(out, "\nA MUTATION WENT UNCAUGHT: the history check missed a bug it claims to catch")
	}
	return ok, nil
}

// runMutation builds m's broken tree and runs its row against it.
func runMutation(ctx context.Context, m mutation.Mutation, sc harness.Scenario, seed uint64, artifacts string, out io.Writer) (harness.Result, error) {
	tree, err := os.MkdirTemp("", "seckill-mutation-")
	if err != nil {
		return harness.Result{}, err
	}
	defer os.RemoveAll(tree)
	if err := m.Apply(harness.Root(), tree); err != nil {
		return harness.Result{}, err
	}
	bin := filepath.Join(tree, "bin")
	if err := harness.BuildFrom(tree, bin, ""); err != nil {
		return harness.Result{}, err
	}
	res, err := harness.Run(ctx, sc, seed, harness.Small, bin, artifacts, out)
	if err != nil {
		// A broken build may break the row's own steps too; what matters is the history.
		fmt.Fprintf(out, "  the row failed as a harness: %v\n", err)
	}
	return res, nil
}
