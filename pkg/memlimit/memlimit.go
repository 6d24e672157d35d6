// Package memlimit sets the Go runtime's soft memory limit from the container's memory limit,
// so a service whose heap nears what its cgroup allows collects garbage harder instead of
// being killed by the kernel (and, restarted into the same burst, killed again).
//
// Reading the limit is github.com/KimMachineGun/automemlimit's memlimit.FromCgroup (cgroup
// v2 and v1). Its Set is not used: it reads GOMEMLIMIT and AUTOMEMLIMIT from the process
// environment itself, so a stray AUTOMEMLIMIT would override SECKILL_MEMLIMIT_RATIO without
// a word; here the configuration comes from pkg/config like every other setting.
package memlimit

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"

	automem "github.com/KimMachineGun/automemlimit/memlimit"
)

// DefaultRatio is the share of the container's limit the soft limit gets unless
// SECKILL_MEMLIMIT_RATIO says otherwise. The soft limit counts only the Go runtime's memory;
// the rest of the limit is for what it does not count (the kernel's page cache charged to
// the cgroup, memory outside the Go heap), and for the collector to act before the kernel.
const DefaultRatio = 0.9

// Config says how the soft limit is chosen (pkg/config reads it from the environment).
type Config struct {
	// GOMEMLIMIT is the GOMEMLIMIT environment variable. When set, the runtime applied it
	// at start (or refused to start), and Apply leaves it in force.
	GOMEMLIMIT string
	// Ratio is the share of the cgroup's memory limit that becomes the soft limit, in (0, 1].
	Ratio float64
	// Fallback is the soft limit in bytes when neither GOMEMLIMIT nor a cgroup limit gives
	// one (0: none). A service whose memory a crowd drives (the gateway: connections and
	// requests in flight) sets one, so it collects harder before it grows past its budget.
	Fallback int64
}

// Validate says whether the ratio is one Apply can use.
func (c Config) Validate() error {
	// Written so NaN fails too.
	if !(c.Ratio > 0 && c.Ratio <= 1) {
		return fmt.Errorf("SECKILL_MEMLIMIT_RATIO=%v: want a number in (0, 1]", c.Ratio)
	}
	if c.Fallback < 0 {
		return fmt.Errorf("a fallback soft limit of %d bytes: want 0 (none) or more", c.Fallback)
	}
	return nil
}

// Source is where the soft limit in force came from.
type Source string

// The sources Apply reports.
const (
	SourceGOMEMLIMIT Source = "GOMEMLIMIT" // the operator's, applied by the runtime at start
	SourceCgroup     Source = "cgroup"     // Ratio of the cgroup's memory limit, set by Apply
	SourceFallback   Source = "fallback"   // no cgroup limit: Config.Fallback, set by Apply
	SourceNone       Source = "none"       // no cgroup limit and no fallback: left as it was (no limit)
)

// Result is what Apply did, for the service's start-up log.
type Result struct {
	Source Source
	Limit  int64   // the runtime's soft limit afterwards, in bytes (math.MaxInt64: none)
	Cgroup uint64  // the cgroup's memory limit (SourceCgroup only)
	Ratio  float64 // the share of it taken (SourceCgroup only)
}

// Attrs are r as log attributes: source, then memory_limit_bytes unless there is no limit,
// then for a cgroup limit cgroup_limit_bytes and memory_limit_ratio.
func (r Result) Attrs() []slog.Attr {
	attrs := []slog.Attr{slog.String("source", string(r.Source))}
	if r.Limit != math.MaxInt64 {
		attrs = append(attrs, slog.Int64("memory_limit_bytes", r.Limit))
	}
	if r.Source == SourceCgroup {
		attrs = append(attrs, slog.Uint64("cgroup_limit_bytes", r.Cgroup), slog.Float64("memory_limit_ratio", r.Ratio))
	}
	return attrs
}

// Option changes how Apply finds the container's limit.
type Option func(*options)

type options struct {
	provider automem.Provider
}

// WithProvider reads the container's memory limit from p instead of the process's cgroup
// (automem.FromCgroup); p returns automem.ErrNoLimit when there is none.
func WithProvider(p automem.Provider) Option {
	return func(o *options) { o.provider = p }
}

// Apply sets the runtime's soft memory limit (debug.SetMemoryLimit) to cfg.Ratio of the
// cgroup's memory limit, and returns what is in force afterwards. An explicit GOMEMLIMIT
// wins: the limit is left as the runtime applied it, and the cgroup is not read. Without a
// cgroup limit (or outside Linux) the soft limit is cfg.Fallback, or, without one, nothing
// changes. A cgroup that cannot be read is an
// error: the service would otherwise run without the limit its manifest promises.
func Apply(cfg Config, opts ...Option) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	o := options{provider: automem.FromCgroup}
	for _, opt := range opts {
		opt(&o)
	}
	current := debug.SetMemoryLimit(-1) // -1 reads it without changing it
	if cfg.GOMEMLIMIT != "" {
		return Result{Source: SourceGOMEMLIMIT, Limit: current}, nil
	}
	cgroup, err := o.provider()
	switch {
	case errors.Is(err, automem.ErrNoLimit), errors.Is(err, automem.ErrNoCgroup), errors.Is(err, automem.ErrCgroupsNotSupported):
		if cfg.Fallback > 0 {
			debug.SetMemoryLimit(cfg.Fallback)
			return Result{Source: SourceFallback, Limit: cfg.Fallback}, nil
		}
		return Result{Source: SourceNone, Limit: current}, nil
	case err != nil:
		return Result{}, fmt.Errorf("read the cgroup's memory limit (set GOMEMLIMIT to choose the soft limit yourself): %w", err)
	}
	soft := int64(math.MaxInt64)
	// float64(math.MaxInt64) rounds up to 2^63, so >= catches every value beyond int64.
	if f := math.Floor(float64(cgroup) * cfg.Ratio); f < float64(math.MaxInt64) {
		soft = int64(f)
	}
	if soft <= 0 {
		return Result{}, fmt.Errorf("cgroup memory limit %d bytes x SECKILL_MEMLIMIT_RATIO %v: a soft limit of 0 would collect garbage without pause", cgroup, cfg.Ratio)
	}
	debug.SetMemoryLimit(soft)
	return Result{Source: SourceCgroup, Limit: soft, Cgroup: cgroup, Ratio: cfg.Ratio}, nil
}
