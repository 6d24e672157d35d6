package doccheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"unicode/utf8"

	"github.com/seckill-pipeline/seckill/pkg/event"
)

// root is the repository root, seen from this package.
const root = "../.."

// TestDocsMatchTheCode holds README.md and docs/**/*.md to the tree: every make target,
// SECKILL_* variable, seckill_* metric, route and topic they name exists, and every relative
// link (and anchor) resolves inside the repository.
func TestDocsMatchTheCode(t *testing.T) {
	docs := repoDocs(t)
	if len(docs) < 5 {
		t.Fatalf("found %d Markdown pages; want README.md and docs/", len(docs))
	}
	for _, p := range Check(docs, repoFacts(t)) {
		t.Error(p)
	}
}

func repoDocs(t *testing.T) []Doc {
	t.Helper()
	var docs []Doc
	read := func(p string) {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Fatalf("read %s: %v", p, err)
		}
		docs = append(docs, Doc{Path: p, Text: string(b)})
	}
	read("README.md")
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".md") {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		read(filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatalf("walk docs: %v", err)
	}
	return docs
}

var (
	targetRE   = regexp.MustCompile(`(?m)^([^\t#=:\s][^=:]*):(?:[^=]|$)`)
	registerRE = regexp.MustCompile(`"(?:GET|POST|PUT|PATCH|DELETE) (/[^" ]*)"`)
	recordRE   = regexp.MustCompile(`(?m)^\s*-?\s*record:\s*(\S+)`)
)

// repoFacts reads what the tree defines.
func repoFacts(t *testing.T) Facts {
	t.Helper()
	f := Facts{
		MakeTargets: map[string]bool{},
		Recorded:    map[string]bool{},
		Topics:      map[string]bool{},
		ExternalRoutes: map[string]string{
			"/api/v1/alerts": "Prometheus's HTTP API, which make firedrill polls",
		},
		NotMetrics: map[string]string{
			"seckill_cluster": "the cluster profile's MySQL database",
			"seckill_app":     "the MySQL account of the services in docs/deployment.md",
			"seckill_migrate": "the MySQL account that migrates in docs/deployment.md",
			"seckill_app_a":   "the first of the two service accounts of a MySQL password rotation (docs/operators.md)",
			"seckill_app_b":   "the second of the two service accounts of a MySQL password rotation (docs/operators.md)",
			"seckill_test":    "the secure profile's MySQL account of the tests (docs/operators.md)",
			"seckill_tests":   "the tests' MySQL database name, in the secure profile's GRANTs",

			// Renamed (a gauge named like a counter); the upgrade note names the old one.
			"seckill_reconciler_stock_total": "the old name of seckill_reconciler_stock_units, in the upgrade note of docs/operators.md",
		},
		Files: os.DirFS(root),
	}
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatalf("read Makefile: %v", err)
	}
	for _, m := range targetRE.FindAllStringSubmatch(string(makefile), -1) {
		for _, name := range strings.Fields(m[1]) {
			if !strings.HasPrefix(name, ".") {
				f.MakeTargets[name] = true
			}
		}
	}
	for _, tp := range event.DefaultTopics("").All() {
		f.Topics[tp.Name] = true
	}

	var vars, metrics strings.Builder
	skip := []string{".git", ".state", "bin", "results", "node_modules", "internal/doccheck"}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if slices.Contains(skip, rel) {
				return filepath.SkipDir
			}
			return nil
		}
		goFile := strings.HasSuffix(rel, ".go")
		script := strings.HasPrefix(rel, "deploy/") || strings.HasPrefix(rel, ".ci/") ||
			rel == "Makefile" || rel == "docker-compose.yml"
		if !goFile && !script {
			return nil
		}
		info, err := d.Info()
		if err != nil || info.Size() > 1<<20 {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if !utf8.Valid(b) {
			return nil
		}
		vars.Write(b)
		vars.WriteByte('\n')
		// Metrics and routes count only where the services define them: not in tests, and
		// not in the dashboard's or the fire drill's queries, which name metrics they read.
		if goFile && !strings.HasSuffix(rel, "_test.go") && !strings.HasPrefix(rel, "deploy/monitoring/") {
			metrics.Write(b)
			metrics.WriteByte('\n')
			for _, m := range registerRE.FindAllStringSubmatch(string(b), -1) {
				f.Routes = append(f.Routes, m[1])
			}
		}
		if strings.HasPrefix(rel, "deploy/monitoring/") && strings.HasSuffix(rel, ".yml") {
			for _, m := range recordRE.FindAllStringSubmatch(string(b), -1) {
				f.Recorded[m[1]] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk the tree: %v", err)
	}
	f.VarCorpus, f.MetricCorpus = vars.String(), metrics.String()
	if len(f.Routes) == 0 || len(f.Recorded) == 0 || !f.MakeTargets["run"] || !f.MakeTargets["test"] {
		t.Fatalf("facts look empty: %d routes, %d recorded series, targets %v", len(f.Routes), len(f.Recorded), f.MakeTargets)
	}
	return f
}

// facts is a small tree for the checker's own tests.
func facts() Facts {
	return Facts{
		MakeTargets:  map[string]bool{"run": true, "test": true},
		VarCorpus:    `os.Getenv("SECKILL_STALE_AFTER") "SECKILL_REDIS_PASSWORD_FILE" SECKILL_CLUSTER_REDIS_ADDR`,
		MetricCorpus: `Name: "seckill_consumer_lag" Name: "seckill_consumer_tx_duration_seconds"`,
		Recorded:     map[string]bool{"seckill:consumer_lag:max": true},
		Routes:       []string{"/api/v1/grabs/{request_id}", "/admin/v1/exceptions/{id}/{action}"},
		Topics:       map[string]bool{"seckill.grab": true, "seckill.order-feedback": true},
		ExternalRoutes: map[string]string{
			"/api/v1/alerts": "Prometheus",
		},
		NotMetrics: map[string]string{},
		Files: fstest.MapFS{
			"README.md":       {Data: []byte("# Top\n")},
			"docs/ops.md":     {Data: []byte("# Operating\n\n## The `make run` profile\n\n## Admin API (own listener, `Authorization: Bearer <token>`)\n")},
			"docs/api/x.yaml": {Data: []byte("x")},
		},
	}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name string
		text string
		want []string // problem messages, in order; none when empty
	}{
		{"all true", "# T\n\nRun `make run` or `SECKILL_STALE_AFTER=1s make test`; set SECKILL_STALE_AFTER;\n" +
			"`seckill_consumer_lag`, `seckill_consumer_tx_duration_seconds_bucket`, `seckill:consumer_lag:max`;\n" +
			"`GET /api/v1/grabs/{request_id}`, `POST /admin/v1/exceptions/7/replay`, Prometheus's `/api/v1/alerts`;\n" +
			"topics `seckill.grab`, `<prefix>.seckill.order-feedback`; `deploy/monitoring/dashboard/seckill.json`, `seckill.io/access`;\n" +
			"`seckill:seckill@tcp(127.0.0.1:13306)/seckill`;\n" +
			"[ops](ops.md), [profile](ops.md#the-make-run-profile), [admin](ops.md#admin-api-own-listener-authorization-bearer-token),\n" +
			"[api](api/), [here](#t), [web](https://schemathesis.readthedocs.io/), `SECKILL_CLUSTER_*`, SECKILL_REDIS_PASSWORD_FILE\n" +
			"make sure of it; ```\n[not a link](nowhere.md)\n```\n", nil},
		{"unknown variable", "Set `SECKILL_NO_SUCH_VARIABLE=1`.\n",
			[]string{"environment variable SECKILL_NO_SUCH_VARIABLE is not read or set anywhere in the code or scripts"}},
		{"variable only as a longer name's prefix", "SECKILL_REDIS_PASSWORD\n",
			[]string{"environment variable SECKILL_REDIS_PASSWORD is not read or set anywhere in the code or scripts"}},
		{"bad link", "See [the guide](guide.md).\n", []string{"link guide.md: no such file docs/guide.md"}},
		{"bad anchor", "See [ops](ops.md#configuration).\n", []string{"link ops.md#configuration: no heading with the anchor #configuration"}},
		{"bad anchor in the same page", "# T\n\n[x](#nowhere)\n", []string{"link #nowhere: no heading with the anchor #nowhere"}},
		{"link out of the repository", "[x](../../etc/passwd)\n", []string{"link ../../etc/passwd: leaves the repository"}},
		{"link that climbs out of docs/", "[top](../README.md)\n", []string{"link ../README.md: climbs out of docs/; name the file as a path instead"}},
		{"another project's repository", "[x](https://github.com/other/project)\n",
			[]string{"link https://github.com/other/project: points at another project's repository; link inside this one"}},
		{"unknown make target", "```sh\nmake chaos PROFILE=cluster\n```\n", []string{`make target "chaos" is not in the Makefile`}},
		{"unknown metric", "`seckill_gateway_nothing_total`\n", []string{"metric seckill_gateway_nothing_total is not registered in the code"}},
		{"unknown recorded series", "`seckill:nothing:ratio`\n", []string{"recorded series seckill:nothing:ratio is not in the monitoring rules"}},
		{"unknown route", "`DELETE /admin/v1/activities/{id}`\n", []string{"route /admin/v1/activities/{id} is not registered by any service"}},
		{"unknown topic", "`seckill.payments`\n", []string{"topic seckill.payments is not defined in pkg/event"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, p := range Check([]Doc{{Path: "docs/page.md", Text: tc.text}}, facts()) {
				got = append(got, p.Msg)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("problems:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestProblemNamesItsLine(t *testing.T) {
	ps := Check([]Doc{{Path: "README.md", Text: "# A\n\ntext\n\n[b](docs/missing.md)\n"}}, facts())
	if len(ps) != 1 || ps[0].String() != "README.md:5: link docs/missing.md: no such file docs/missing.md" {
		t.Fatalf("got %v", ps)
	}
}

func TestSlug(t *testing.T) {
	tests := map[string]string{
		"The cluster profile":                 "the-cluster-profile",
		"How orders are persisted (consumer)": "how-orders-are-persisted-consumer",
		"Admin API (own listener, `Authorization: Bearer <your admin token>`)": "admin-api-own-listener-authorization-bearer-your-admin-token",
		"Grab: `POST /api/v1/sessions/{session}/prizes/{prize}/grab`":          "grab-post-apiv1sessionssessionprizesprizegrab",
		"Payment, cancellation and resale":                                     "payment-cancellation-and-resale",
		"I1–I7 and [the matrix](x.md)":                                         "i1i7-and-the-matrix",
		"snake_case and-hyphen":                                                "snake_case-and-hyphen",
	}
	for in, want := range tests {
		if got := Slug(in); got != want {
			t.Errorf("Slug(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAnchorsRepeatAndSkipCode(t *testing.T) {
	got := Anchors("# Tests\n\n## Runs\n\n```sh\n# not a heading\n```\n\n## Runs\n")
	want := []string{"tests", "runs", "runs-1"}
	if !slices.Equal(got, want) {
		t.Fatalf("Anchors = %q, want %q", got, want)
	}
}
