package store

import (
	"strings"
	"testing"
)

func TestSplitStatementsReadsGuards(t *testing.T) {
	body := `-- A comment about the change.
-- unless column orders.paid_at
ALTER TABLE orders ADD COLUMN paid_at DATETIME(6) NULL;
CREATE TABLE IF NOT EXISTS t (
  id INT
);
-- if index t.ix_old
ALTER TABLE t DROP INDEX ix_old;
`
	got, err := splitStatements(body)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("%d statements: %+v", len(got), got)
	}
	if g := got[0].Guard; g == nil || g.WhenExists || g.Kind != "column" || g.Table != "orders" || g.Object != "paid_at" {
		t.Errorf("first guard %+v", g)
	}
	if got[1].Guard != nil {
		t.Errorf("CREATE TABLE got guard %v", got[1].Guard)
	}
	if g := got[2].Guard; g == nil || !g.WhenExists || g.Kind != "index" || g.String() != "if index t.ix_old" {
		t.Errorf("third guard %+v", g)
	}
}

func TestSplitStatementsRefusesBadGuards(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"unknown kind", "-- unless table t.x\nSELECT 1;", `kind "table"`},
		{"no dot", "-- unless column paid_at\nSELECT 1;", "want TABLE.NAME"},
		{"too few words", "-- if column\nSELECT 1;", "want -- if|unless"},
		{"guard inside a statement", "ALTER TABLE t\n-- unless column t.c\nADD COLUMN c INT;", "right above"},
		{"two guards", "-- unless column t.c\n-- unless column t.d\nSELECT 1;", "right above"},
		{"guard at the end", "SELECT 1;\n-- unless column t.c\n", "guards no statement"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := splitStatements(tc.body); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want one containing %q", err, tc.want)
			}
		})
	}
}

// Every embedded migration loads: its guards parse, and no comment line that starts with
// "if" or "unless" is taken for a malformed guard (splitStatements refuses those).
func TestEmbeddedMigrationsLoad(t *testing.T) {
	migs, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range migs {
		if len(m.Checksum) != 64 || len(m.Statements) == 0 {
			t.Errorf("migration %04d_%s: checksum %q, %d statements", m.Version, m.Name, m.Checksum, len(m.Statements))
		}
	}
}
