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

// ConsumerGroups returns the two consumer group settings of a consumer, named for this test
// alone. Without them a test's consumer joins the production default groups, shared with
// every other test's consumer on the same broker: each start, stop and kill of another
// test's consumer then rebalances this one, and a killed member holds every rebalance until
// its session times out (issue 28: feedback written before start not applied in 30 s).
func ConsumerGroups(tb testing.TB) map[string]string {
	tb.Helper()
	id := ID(tb)
	return map[string]string{"SECKILL_CONSUMER_GROUP": "t-orders-" + id, "SECKILL_FEEDBACK_GROUP": "t-feedback-" + id}
}

// Start runs deployable name with env added; it is killed when the test ends. A consumer
// must be given its own groups (ConsumerGroups), or it would join other tests' groups.
func Start(tb testing.TB, name string, env map[string]string, args ...string) *harness.Proc {
	tb.Helper()
	if name == "consumer" {
		for _, k := range []string{"SECKILL_CONSUMER_GROUP", "SECKILL_FEEDBACK_GROUP"} {
			if env[k] == "" {
				tb.Fatalf("a test's consumer needs its own %s (stacktest.ConsumerGroups), not the shared default", k)
			}
		}
	}
	p, err := harness.Start(name, filepath.Join(Binaries(tb), name), env, args...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Kill)
	return p
}
