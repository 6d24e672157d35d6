package mutation

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Every mutation applies to today's tree: the text it replaces is there exactly once. A
// refactor that moves it fails here, in the unit tests, before the chaos run would.
func TestEveryMutationAppliesToTheTree(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	for _, m := range All() {
		t.Run(m.Name, func(t *testing.T) {
			dst := t.TempDir()
			if err := m.Apply(root, dst); err != nil {
				t.Fatal(err)
			}
			for _, e := range m.Edits {
				raw, err := os.ReadFile(filepath.Join(dst, e.File))
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(string(raw), e.New) {
					t.Fatalf("%s does not hold the mutation", e.File)
				}
				orig, err := os.ReadFile(filepath.Join(root, e.File))
				if err != nil || strings.Contains(string(orig), e.New) {
					t.Fatalf("the source tree itself was changed or already broken: %v", err)
				}
			}
		})
	}
}

func TestAMutationWhoseTextMovedIsRefused(t *testing.T) {
	src := t.TempDir()
	for _, f := range []string{"go.mod", "go.sum", "pkg/a.go"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(src, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, f), []byte("x := 1\nx := 1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m := Mutation{Name: "twice", Edits: []Edit{{File: "pkg/a.go", Old: "x := 1\n", New: "x := 2\n"}}}
	if err := m.Apply(src, t.TempDir()); err == nil || !strings.Contains(err.Error(), "2 times") {
		t.Fatalf("want a refusal of an ambiguous edit, got %v", err)
	}
	m.Edits[0].Old = "y := 1\n"
	if err := m.Apply(src, t.TempDir()); err == nil || !strings.Contains(err.Error(), "0 times") {
		t.Fatalf("want a refusal of a missing edit, got %v", err)
	}
}
