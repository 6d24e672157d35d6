package doccheck_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every alert in deploy/monitoring/alerts.yml links its own paragraph of docs/runbook.md:
// its runbook_url is the SECKILL_RUNBOOK_BASE_URL placeholder (deploy/monitoring/rules makes
// it absolute) followed by the anchor of a "## <alert>" heading that exists.
func TestEveryAlertLinksItsRunbookParagraph(t *testing.T) {
	root := filepath.Join("..", "..")
	rules, err := os.ReadFile(filepath.Join(root, "deploy", "monitoring", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	runbook, err := os.ReadFile(filepath.Join(root, "docs", "runbook.md"))
	if err != nil {
		t.Fatal(err)
	}
	headings := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^## (\S+)$`).FindAllStringSubmatch(string(runbook), -1) {
		headings[strings.ToLower(m[1])] = true
	}
	// An alert's block runs from its "- alert:" line to the next one.
	blocks := regexp.MustCompile(`(?m)^\s*- alert: `).Split(string(rules), -1)[1:]
	if len(blocks) < 20 {
		t.Fatalf("%d alerts found in alerts.yml; the pattern no longer matches", len(blocks))
	}
	urlRE := regexp.MustCompile(`runbook_url: "\$\{SECKILL_RUNBOOK_BASE_URL\}#([a-z0-9-]+)"`)
	for _, b := range blocks {
		name := strings.TrimSpace(strings.SplitN(b, "\n", 2)[0])
		m := urlRE.FindStringSubmatch(b)
		if m == nil {
			t.Errorf("%s: no runbook_url of the form \"${SECKILL_RUNBOOK_BASE_URL}#anchor\"", name)
			continue
		}
		if !headings[m[1]] {
			t.Errorf("%s: runbook_url anchor #%s has no \"## \" heading in docs/runbook.md", name, m[1])
		}
	}
}
