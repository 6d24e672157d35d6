package doccheck

import (
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"
)

var (
	// A metric built by the prometheus package's constructors exists whether or not anyone
	// registers it; promauto.With(reg) registers it as it makes it.
	unregisteredRE = regexp.MustCompile(`\bprometheus\.New(Counter|Gauge|Histogram|Summary|Untyped)(Vec|Func)?\(`)
	metricOptsRE   = regexp.MustCompile(`\b(Counter|Gauge|Histogram|Summary|Untyped)Opts\{[^}]*?\bName:\s*"([^"]+)"`)
)

// MetricProblems holds the code that defines metrics (non-test Go sources by path from the
// repository root) to the conventions the pages, alert rules and dashboard rely on: every
// metric is made by a promauto.With(reg) factory, so none is defined and left unregistered; a
// deployable's metrics (anything outside pkg/ and internal/) are all in its metrics.go, their
// one home; and a name ends in _total exactly when the metric is a counter (rate() and
// increase() are meaningful only over those).
func MetricProblems(sources map[string]string) []string {
	var out []string
	for p, src := range sources {
		for _, m := range unregisteredRE.FindAllStringSubmatch(src, -1) {
			out = append(out, fmt.Sprintf("%s: prometheus.New%s%s makes a metric nothing registers; use promauto.With(reg).New%[2]s%[3]s", p, m[1], m[2]))
		}
		home := strings.HasPrefix(p, "pkg/") || strings.HasPrefix(p, "internal/") || path.Base(p) == "metrics.go"
		for _, m := range metricOptsRE.FindAllStringSubmatch(src, -1) {
			kind, name := m[1], m[2]
			if !home {
				out = append(out, fmt.Sprintf("%s: %s is defined outside %s", p, name, path.Join(path.Dir(p), "metrics.go")))
			}
			switch total := strings.HasSuffix(name, "_total"); {
			case kind == "Counter" && !total:
				out = append(out, fmt.Sprintf("%s: counter %s does not end in _total", p, name))
			case kind != "Counter" && total:
				out = append(out, fmt.Sprintf("%s: %s is a %s named like a counter (_total)", p, name, strings.ToLower(kind)))
			}
		}
	}
	sort.Strings(out)
	return out
}
