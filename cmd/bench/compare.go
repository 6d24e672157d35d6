package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/seckill-pipeline/seckill/internal/harness"
)

// Before and after in one run (-compare). A change's gain measured as two bench runs
// minutes or days apart carries whatever else changed on the machine between them (the
// trivial handler's own rate has moved by a fifth between two quiet runs here with nothing
// changed in it). With -compare BASE every step that runs the deployables runs twice in
// each repetition, once as the baseline and once as the candidate, alternating which goes
// first, so drift hits both alike; each repetition yields one paired ratio
// (candidate / baseline) per figure, summarised as median (min–max) like every ratio.
//
//   - BASE a git revision: the baseline is the deployables (and cmd/hotrow) built from that
//     revision, on the shipped settings; the candidate is this tree with -gateway-env and
//     -kafka-config. The baseline runs against this tree's schema (the harness migrates with
//     this tree's migrations), which every older binary here tolerates: migrations only add.
//   - BASE..CAND, two revisions: both sides built from their revisions (the candidate with
//     -gateway-env and -kafka-config, if given), to measure a change of the past against
//     its parent with today's bench.
//   - BASE "shipped": the baseline is this tree on the shipped and stock settings; the
//     candidate is this tree with -gateway-env and -kafka-config (a setting's own gain).

const compareShipped = "shipped"

// baseSuffix marks a baseline row's key; the candidate keeps the plain key, so targets are
// judged on the candidate.
const baseSuffix = "@base"

// variant is what differs between the baseline and the candidate.
type variant struct {
	label       string // the revision, or "shipped"
	bin         string
	gatewayEnv  map[string]string
	kafkaConfig map[string]string
}

// buildBase builds the baseline's binaries from rev and removes the worktree after;
// "shipped" reuses the candidate's binaries.
func buildBase(rev, candidateBin string, logf func(string, ...any)) (*variant, error) {
	if rev == compareShipped {
		return &variant{label: rev, bin: candidateBin}, nil
	}
	bin, err := buildAt(rev, logf)
	if err != nil {
		return nil, err
	}
	return &variant{label: rev, bin: bin}, nil
}

// splitCompare reads -compare: "BASE" (the candidate is this tree) or "BASE..CAND" (both
// built from revisions, so any change in the history can be measured against its parent
// with today's bench).
func splitCompare(v string) (base, cand string, err error) {
	base, cand, two := strings.Cut(v, "..")
	if base == "" || (two && (cand == "" || base == compareShipped || cand == compareShipped)) {
		return "", "", fmt.Errorf("-compare %q: want a revision, %q, or BASE..CANDIDATE (two revisions)", v, compareShipped)
	}
	return base, cand, nil
}

// buildAt builds the deployables and cmd/hotrow of rev in a detached worktree of this
// repository, removed after, into a new folder it returns.
func buildAt(rev string, logf func(string, ...any)) (string, error) {
	root := harness.Root()
	full, err := exec.Command("git", "-C", root, "rev-parse", "--verify", rev+"^{commit}").Output()
	if err != nil {
		return "", fmt.Errorf("-compare %s: not a revision of this repository: %w", rev, err)
	}
	commit := strings.TrimSpace(string(full))
	tree, err := os.MkdirTemp("", "seckill-bench-src-")
	if err != nil {
		return "", err
	}
	os.Remove(tree) // git worktree add wants to create it
	if out, err := exec.Command("git", "-C", root, "worktree", "add", "--detach", tree, commit).CombinedOutput(); err != nil {
		return "", fmt.Errorf("-compare %s: git worktree add: %v\n%s", rev, err, out)
	}
	defer func() {
		if out, err := exec.Command("git", "-C", root, "worktree", "remove", "--force", tree).CombinedOutput(); err != nil {
			logf("warning: could not remove the worktree %s: %v\n%s", tree, err, out)
		}
	}()
	bin, err := os.MkdirTemp("", "seckill-bench-rev-")
	if err != nil {
		return "", err
	}
	logf("building the deployables of %s (%s)", rev, commit[:12])
	cmd := exec.Command("go", "build", "-o", bin+string(os.PathSeparator), "./gateway", "./consumer", "./reconciler", "./cmd/hotrow")
	cmd.Dir = tree
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(bin)
		return "", fmt.Errorf("-compare %s: go build: %v\n%s", rev, err, out)
	}
	for _, name := range []string{"gateway", "consumer", "reconciler", "hotrow"} {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			os.RemoveAll(bin)
			return "", fmt.Errorf("-compare %s: %s was not built: %w", rev, name, err)
		}
	}
	return bin, nil
}

// useRevision makes the candidate the deployables built from rev.
func (b *bench) useRevision(rev string) error {
	bin, err := buildAt(rev, b.logf)
	if err != nil {
		return err
	}
	os.RemoveAll(b.bin)
	b.bin = bin
	return nil
}

// use makes v the bench's deployables and settings and returns what restores the previous.
func (b *bench) use(v *variant) (restore func()) {
	bin, env, kc, side := b.bin, b.gatewayEnv, b.kafkaConfig, b.side
	b.bin, b.gatewayEnv, b.kafkaConfig, b.side = v.bin, v.gatewayEnv, v.kafkaConfig, "-baseline"
	return func() { b.bin, b.gatewayEnv, b.kafkaConfig, b.side = bin, env, kc, side }
}

// variantFree names the steps whose figures do not depend on the deployables: the
// ceilings (Redis, a trivial and a JWT handler served by the bench itself). They run once
// per repetition and serve both sides' ratios.
var variantFree = map[string]bool{"ceilings": true}

// paired wraps a step so that, with a baseline, it runs both sides in the repetition,
// baseline first in odd repetitions and candidate first in even ones, and returns the
// baseline's rows under key+baseSuffix.
func (b *bench) paired(s step) step {
	if b.base == nil || variantFree[s.name] {
		return s
	}
	return step{name: s.name, run: func(ctx context.Context, rep int) ([]measured, error) {
		runBase := func() ([]measured, error) {
			b.logf("  (baseline: %s)", b.base.label)
			restore := b.use(b.base)
			defer restore()
			m, err := s.run(ctx, rep)
			return asBase(m, b.base.label), err
		}
		first, second := runBase, func() ([]measured, error) {
			b.logf("  (candidate: this tree)")
			return s.run(ctx, rep)
		}
		if rep%2 == 0 {
			first, second = second, first
		}
		m1, err := first()
		if err != nil {
			return m1, err
		}
		m2, err := second()
		return append(m1, m2...), err
	}}
}

func asBase(ms []measured, label string) []measured {
	out := make([]measured, len(ms))
	for i, m := range ms {
		out[i] = measured{key: m.key + baseSuffix, name: m.name + " [baseline " + label + "]", s: m.s}
	}
	return out
}

// deriveBaseRatios computes the baseline's ratios within the repetition: its own rows in
// place of the candidate's, the variant-free rows shared.
func deriveBaseRatios(got map[string]*sample) {
	base := map[string]*sample{}
	for k, s := range got {
		if plain, ok := strings.CutSuffix(k, baseSuffix); ok {
			base[plain] = s
		} else if _, shadowed := got[k+baseSuffix]; !shadowed {
			base[k] = s
		}
	}
	deriveRatios(base)
}

// comparison is one figure of one row, candidate against baseline.
type comparison struct {
	Row       string `json:"row"`
	Name      string `json:"name"`
	Figure    string `json:"figure"` // "throughput_per_s", "p99_ms" or "ratio:<name>"
	Candidate spread `json:"candidate"`
	Baseline  spread `json:"baseline"`
	// Change is candidate / baseline within each repetition, summarised.
	Change spread `json:"change"`
}

// compareRows pairs every row with its baseline row, repetition by repetition.
func compareRows(rows []*row) []comparison {
	byKey := map[string]*row{}
	for _, r := range rows {
		byKey[r.Key] = r
	}
	var out []comparison
	for _, cand := range rows {
		base := byKey[cand.Key+baseSuffix]
		if base == nil {
			continue
		}
		figs := []struct {
			name string
			of   func(*sample) (float64, bool)
		}{{"p99_ms", func(s *sample) (float64, bool) { return s.P99ms, s.P99ms > 0 }}}
		// An open-loop level's throughput is what it offered (a share of its own side's
		// maximum), not something either side achieved: only its latency compares.
		if _, open := cand.Extra["pct_of_max"]; !open {
			figs = append([]struct {
				name string
				of   func(*sample) (float64, bool)
			}{{"throughput_per_s", func(s *sample) (float64, bool) { return s.ThroughputPS, s.ThroughputPS > 0 }}}, figs...)
		}
		// CPU per grab or order of each process: what a change to the hot path should cut.
		for _, k := range sortedKeys(cand.Extra) {
			if !strings.HasPrefix(k, "cpu_us_per_") {
				continue
			}
			figs = append(figs, struct {
				name string
				of   func(*sample) (float64, bool)
			}{"extra:" + k, func(s *sample) (float64, bool) { v, ok := number(s.Extra[k]); return v, ok && v > 0 }})
		}
		for _, k := range sortedKeys(cand.Ratios) {
			figs = append(figs, struct {
				name string
				of   func(*sample) (float64, bool)
			}{"ratio:" + k, func(s *sample) (float64, bool) { v, ok := s.Ratios[k]; return v, ok && v > 0 }})
		}
		for _, f := range figs {
			c := pairFigure(cand.Runs, base.Runs, f.of)
			if c.Change.N == 0 {
				continue
			}
			c.Row, c.Name, c.Figure = cand.Key, cand.Name, f.name
			out = append(out, c)
		}
	}
	return out
}

// pairFigure summarises one figure on both sides and their ratio in each repetition both
// sides measured it.
func pairFigure(cand, base []*sample, of func(*sample) (float64, bool)) comparison {
	byRep := map[int]*sample{}
	for _, s := range base {
		byRep[s.Rep] = s
	}
	var cs, bs, ch []float64
	for _, s := range cand {
		cv, ok1 := of(s)
		b := byRep[s.Rep]
		if b == nil || !ok1 {
			continue
		}
		bv, ok2 := of(b)
		if !ok2 {
			continue
		}
		cs, bs, ch = append(cs, cv), append(bs, bv), append(ch, cv/bv)
	}
	return comparison{Candidate: spreadOf(cs), Baseline: spreadOf(bs), Change: spreadOf(ch)}
}

// compareSection is results.md's before-and-after table.
func (r report) compareSection() string {
	if r.Compare == "" {
		return ""
	}
	var b strings.Builder
	base, cand, _ := strings.Cut(r.Compare, "..")
	if cand == "" {
		cand = "this tree"
	}
	fmt.Fprintf(&b, "\n## Before and after (baseline: %s; candidate: %s)\n\n", base, cand)
	b.WriteString("Both sides ran in every repetition, alternating which went first. *change* is candidate ÷ baseline " +
		"within each repetition, median (min–max): above 1 is faster for a throughput or a ratio, slower for a p99, " +
		"more CPU for a cpu_us_per figure.\n\n")
	if len(r.Comparisons) == 0 {
		b.WriteString("No row was measured on both sides.\n\n")
		return b.String()
	}
	b.WriteString("| row | figure | candidate | baseline | change |\n|---|---|---:|---:|---:|\n")
	for _, c := range r.Comparisons {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s× |\n", c.Name, c.Figure, spr(c.Candidate), spr(c.Baseline), spr(c.Change))
	}
	b.WriteString("\n")
	return b.String()
}
