package doccheck_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// make help lists every target the Makefile declares .PHONY, each with a one-line meaning.
func TestMakeHelpListsEveryTarget(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make in PATH")
	}
	root := filepath.Join("..", "..")
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatalf("read Makefile: %v", err)
	}
	phony := regexp.MustCompile(`(?m)^\.PHONY:((?:.*\\\n)*.*)$`).FindSubmatch(makefile)
	if phony == nil {
		t.Fatal("no .PHONY line in the Makefile")
	}
	cmd := exec.Command("make", "-s", "--no-print-directory", "help")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make help: %v\n%s", err, out)
	}
	listed := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 2 {
			listed[f[0]] = strings.Join(f[1:], " ")
		}
	}
	for _, target := range strings.Fields(strings.ReplaceAll(string(phony[1]), "\\\n", " ")) {
		if listed[target] == "" {
			t.Errorf("make help does not list %q with a meaning:\n%s", target, out)
		}
	}
}
