package stacktest

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/seckill-pipeline/seckill/internal/harness"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// Binaries builds the three deployables once per test process and returns their folder.
func Binaries(tb testing.TB) string {
	tb.Helper()
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "seckill-bin-"); buildErr == nil {
			buildErr = harness.Build(buildDir)
		}
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return buildDir
}

// Start runs deployable name with env added; it is killed when the test ends.
func Start(tb testing.TB, name string, env map[string]string, args ...string) *harness.Proc {
	tb.Helper()
	p, err := harness.Start(name, filepath.Join(Binaries(tb), name), env, args...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Kill)
	return p
}
