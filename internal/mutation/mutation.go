// Package mutation breaks the pipeline on purpose, one small known bug at a time, in a copy
// of the source tree: a check that never fails proves nothing, so each class of violation the
// chaos rows' history check (internal/linearcheck) claims to catch has a mutation here, the
// row that must catch it, and the class it must be caught as. `go run ./cmd/chaos -mutations`
// builds each broken copy, runs its row against the stack, and fails unless the history
// check says "no" with that class.
package mutation

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/seckill-pipeline/seckill/internal/linearcheck"
)

// Edit replaces the one occurrence of Old in File (relative to the module root) with New.
type Edit struct {
	File, Old, New string
}

// Mutation is one deliberate bug.
type Mutation struct {
	Name  string
	Bug   string // what the broken build does, for people
	Edits []Edit
	Row   string            // the chaos row (harness.Scenarios' name) that must catch it
	Catch linearcheck.Class // the class the row's history check must report
}

// All is every mutation, at least one per class of violation.
func All() []Mutation {
	return []Mutation{
		{
			Name: "sold-out-early", Row: "happy path", Catch: linearcheck.SoldOutEarly,
			Bug:   "the admission script answers sold_out while 5 units are left",
			Edits: []Edit{{File: "pkg/stock/lua/reserve.lua", Old: "  if left <= 0 then\n", New: "  if left <= 5 then\n"}},
		},
		{
			Name: "stale-status", Row: "happy path", Catch: linearcheck.Regressed,
			Bug: "a status read answers a succeeded grab as queued every other millisecond (a stale cache)",
			Edits: []Edit{{File: "gateway/grab/grab.go",
				Old: "\tdefault:\n\t\tjsonapi.Write(w, http.StatusOK, v)\n\t}\n}",
				New: "\tdefault:\n\t\tif v.Status == \"succeeded\" && time.Now().UnixMilli()%2 == 0 {\n\t\t\tv = grabView{RequestID: v.RequestID, Status: \"queued\"}\n\t\t}\n\t\tjsonapi.Write(w, http.StatusOK, v)\n\t}\n}"}},
		},
		{
			Name: "unit-returned-twice", Row: "buckets: cancellation storm with resale", Catch: linearcheck.OverAdmitted,
			Bug: "a cancelled order's unit goes back into Redis twice",
			Edits: []Edit{{File: "pkg/stock/lua/return.lua",
				Old: "      redis.call('HINCRBY', KEYS[1], 'left', 1)\n", New: "      redis.call('HINCRBY', KEYS[1], 'left', 2)\n"}},
		},
		{
			Name: "limit-off-by-one", Row: "happy path", Catch: linearcheck.OverLimit,
			Bug:   "the admission script lets a user hold one grab more than the per-user limit",
			Edits: []Edit{{File: "pkg/stock/lua/reserve.lua", Old: "  if n >= limit then\n", New: "  if n > limit then\n"}},
		},
		{
			Name: "queued-unreadable", Row: "happy path", Catch: linearcheck.Unreadable,
			Bug: "a status read looks only at settled outcomes: a grab still queued reads 404",
			Edits: []Edit{{File: "pkg/stock/gate.go",
				Old: "\t} else if v, err := res.Result(); err == nil {\n", New: "\t} else if v, err := res.Result(); err == nil && false {\n"}},
		},
	}
}

// Apply copies the module at src (go.mod, go.sum and the Go trees the three deployables are
// built from) to dst and applies the mutation's edits there; src is never written.
func (m Mutation) Apply(src, dst string) error {
	for _, f := range []string{"go.mod", "go.sum"} {
		if err := copyFile(filepath.Join(src, f), filepath.Join(dst, f)); err != nil {
			return err
		}
	}
	for _, dir := range []string{"gateway", "consumer", "reconciler", "pkg", "internal"} {
		if err := copyTree(filepath.Join(src, dir), filepath.Join(dst, dir)); err != nil {
			return err
		}
	}
	for _, e := range m.Edits {
		path := filepath.Join(dst, e.File)
		raw, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("mutation %s: %w", m.Name, err)
		}
		if n := bytes.Count(raw, []byte(e.Old)); n != 1 {
			// The code moved on: the mutation must be rewritten, not skipped.
			return fmt.Errorf("mutation %s: %s holds the text to replace %d times, want once: %q", m.Name, e.File, n, firstLine(e.Old))
		}
		if err := os.WriteFile(path, bytes.Replace(raw, []byte(e.Old), []byte(e.New), 1), 0o644); err != nil {
			return fmt.Errorf("mutation %s: %w", m.Name, err)
		}
	}
	return nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func copyTree(src, dst string) error {
	if _, err := os.Stat(src); errors.Is(err, fs.ErrNotExist) {
		return nil // a tree this module does not have (a test's small module)
	}
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		return copyFile(path, filepath.Join(dst, rel))
	})
}

func copyFile(src, dst string) error {
	raw, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	if err := os.WriteFile(dst, raw, 0o644); err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	return nil
}
