package memlimit

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"strings"
	"testing"

	automem "github.com/KimMachineGun/automemlimit/memlimit"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		ratio   float64
		wantErr bool
	}{
		{"default", DefaultRatio, false},
		{"all of it", 1, false},
		{"a little", 0.01, false},
		{"zero", 0, true},
		{"negative", -0.5, true},
		{"above one", 1.01, true},
		{"not a number", math.NaN(), true},
		{"infinite", math.Inf(1), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Config{Ratio: tc.ratio}.Validate()
			if (err != nil) != tc.wantErr {
				t.Fatalf("Validate() = %v, want error %v", err, tc.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "SECKILL_MEMLIMIT_RATIO") {
				t.Errorf("error %q does not name SECKILL_MEMLIMIT_RATIO", err)
			}
		})
	}
}

// TestApply: what the runtime's soft limit is after Apply, for each thing the cgroup can say.
// Apply sets the process's limit, so the cases run one after another and the limit the
// test found is put back.
func TestApply(t *testing.T) {
	const mib = 1 << 20
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	const preset = 300 * mib // stands for what the runtime took from GOMEMLIMIT at start
	limit := func(n uint64) automem.Provider { return automem.Limit(n) }
	failing := func(err error) automem.Provider { return func() (uint64, error) { return 0, err } }
	unreadable := fmt.Errorf("open memory.max: %w", errors.New("permission denied"))

	tests := []struct {
		name      string
		cfg       Config
		provider  automem.Provider
		want      Result
		wantLimit int64  // the runtime's soft limit afterwards
		wantErr   string // substring; "" means success
	}{
		{"cgroup limit, default ratio", Config{Ratio: DefaultRatio}, limit(512 * mib),
			Result{Source: SourceCgroup, Limit: 483183820, Cgroup: 512 * mib, Ratio: 0.9}, 483183820, ""},
		{"cgroup limit, all of it", Config{Ratio: 1}, limit(256 * mib),
			Result{Source: SourceCgroup, Limit: 256 * mib, Cgroup: 256 * mib, Ratio: 1}, 256 * mib, ""},
		{"cgroup limit beyond int64", Config{Ratio: 1}, limit(math.MaxUint64),
			Result{Source: SourceCgroup, Limit: math.MaxInt64, Cgroup: math.MaxUint64, Ratio: 1}, math.MaxInt64, ""},
		{"GOMEMLIMIT set: left as the runtime applied it", Config{GOMEMLIMIT: "300MiB", Ratio: DefaultRatio}, limit(512 * mib),
			Result{Source: SourceGOMEMLIMIT, Limit: preset}, preset, ""},
		{"GOMEMLIMIT set: the cgroup is not read", Config{GOMEMLIMIT: "300MiB", Ratio: DefaultRatio}, failing(unreadable),
			Result{Source: SourceGOMEMLIMIT, Limit: preset}, preset, ""},
		{"cgroup without a limit", Config{Ratio: DefaultRatio}, failing(automem.ErrNoLimit),
			Result{Source: SourceNone, Limit: preset}, preset, ""},
		{"not in a cgroup", Config{Ratio: DefaultRatio}, failing(automem.ErrNoCgroup),
			Result{Source: SourceNone, Limit: preset}, preset, ""},
		{"no cgroups on this system", Config{Ratio: DefaultRatio}, failing(automem.ErrCgroupsNotSupported),
			Result{Source: SourceNone, Limit: preset}, preset, ""},
		{"no cgroup limit, a fallback", Config{Ratio: DefaultRatio, Fallback: 128 * mib}, failing(automem.ErrNoLimit),
			Result{Source: SourceFallback, Limit: 128 * mib}, 128 * mib, ""},
		{"a cgroup limit wins over the fallback", Config{Ratio: 1, Fallback: 128 * mib}, limit(256 * mib),
			Result{Source: SourceCgroup, Limit: 256 * mib, Cgroup: 256 * mib, Ratio: 1}, 256 * mib, ""},
		{"GOMEMLIMIT wins over the fallback", Config{GOMEMLIMIT: "300MiB", Ratio: DefaultRatio, Fallback: 128 * mib}, failing(automem.ErrNoLimit),
			Result{Source: SourceGOMEMLIMIT, Limit: preset}, preset, ""},
		{"cgroup unreadable", Config{Ratio: DefaultRatio}, failing(unreadable),
			Result{}, preset, "permission denied"},
		{"cgroup limit 0", Config{Ratio: DefaultRatio}, limit(0),
			Result{}, preset, "memory limit 0"},
		{"bad ratio", Config{Ratio: 1.5}, limit(512 * mib),
			Result{}, preset, "SECKILL_MEMLIMIT_RATIO"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetMemoryLimit(preset)
			got, err := Apply(tc.cfg, WithProvider(tc.provider))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want it to mention %q", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("Apply() = %+v, want %+v", got, tc.want)
			}
			if now := debug.SetMemoryLimit(-1); now != tc.wantLimit {
				t.Errorf("runtime soft limit %d afterwards, want %d", now, tc.wantLimit)
			}
		})
	}
}

func TestResultAttrs(t *testing.T) {
	tests := []struct {
		name string
		r    Result
		want string
	}{
		{"cgroup", Result{Source: SourceCgroup, Limit: 900, Cgroup: 1000, Ratio: 0.9},
			"source=cgroup memory_limit_bytes=900 cgroup_limit_bytes=1000 memory_limit_ratio=0.9"},
		{"GOMEMLIMIT", Result{Source: SourceGOMEMLIMIT, Limit: 300}, "source=GOMEMLIMIT memory_limit_bytes=300"},
		{"GOMEMLIMIT=off", Result{Source: SourceGOMEMLIMIT, Limit: math.MaxInt64}, "source=GOMEMLIMIT"},
		{"none", Result{Source: SourceNone, Limit: math.MaxInt64}, "source=none"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			for i, a := range tc.r.Attrs() {
				if i > 0 {
					b.WriteByte(' ')
				}
				b.WriteString(slog.Attr.String(a))
			}
			if b.String() != tc.want {
				t.Errorf("Attrs() = %s, want %s", b.String(), tc.want)
			}
		})
	}
}
