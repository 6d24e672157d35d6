package mysql8

import (
	"fmt"
	"strings"
	"testing"

	"vitess.io/vitess/go/vt/sqlparser"

	"github.com/seckill-pipeline/seckill/pkg/store"
)

// The MySQL versions the schema must migrate on: 8.0 (RDS, Aurora, Cloud SQL) and 8.4 LTS.
var versions = []string{"8.0.36", "8.4.3"}

func parser(t *testing.T, version string) *sqlparser.Parser {
	t.Helper()
	p, err := sqlparser.New(sqlparser.Options{MySQLServerVersion: version})
	if err != nil {
		t.Fatalf("MySQL %s parser: %v", version, err)
	}
	return p
}

// Every statement of every migration parses with a MySQL 8 grammar. ParseStrictDDL, not
// Parse: Parse logs a DDL syntax error and returns a partial statement with a nil error, so a
// check built on it could not fail.
func TestMigrationsParseAsMySQL8(t *testing.T) {
	migs, err := store.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(migs) == 0 {
		t.Fatal("no migrations found")
	}
	for _, version := range versions {
		p := parser(t, version)
		n := 0
		for _, m := range migs {
			for i, st := range m.Statements {
				if _, err := p.ParseStrictDDL(st.SQL); err != nil {
					t.Errorf("MySQL %s: migration %04d_%s statement %d does not parse: %v\n%s", version, m.Version, m.Name, i+1, err, st.SQL)
				}
				n++
			}
		}
		t.Logf("MySQL %s: %d statements of %d migrations parsed", version, n, len(migs))
	}
}

// An ALTER TABLE changes one thing, and one that adds or drops carries the guard that makes
// it idempotent: MySQL 8 has no IF [NOT] EXISTS on ALTER's clauses, so the runner checks
// information_schema, and one guard can speak for one clause only.
func TestAlterStatementsAreGuardedAndSingle(t *testing.T) {
	migs, err := store.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	p := parser(t, versions[0])
	for _, m := range migs {
		for i, st := range m.Statements {
			where := fmt.Sprintf("migration %04d_%s statement %d", m.Version, m.Name, i+1)
			stmt, err := p.ParseStrictDDL(st.SQL)
			if err != nil {
				continue // TestMigrationsParseAsMySQL8 reports it
			}
			switch s := stmt.(type) {
			case *sqlparser.AlterTable:
				if len(s.AlterOptions) != 1 {
					t.Errorf("%s: %d clauses in one ALTER TABLE; write one statement per change, each with its guard", where, len(s.AlterOptions))
				}
				if st.Guard == nil {
					if addsOrDrops(s) {
						t.Errorf("%s: ALTER TABLE that adds or drops without a guard (-- unless|if column|index|constraint TABLE.NAME)", where)
					}
				} else if !strings.EqualFold(st.Guard.Table, s.Table.Name.String()) {
					t.Errorf("%s: guard %s is about another table than %s", where, st.Guard, s.Table.Name.String())
				}
			case *sqlparser.CreateTable:
				if !s.IfNotExists {
					t.Errorf("%s: CREATE TABLE without IF NOT EXISTS cannot run twice", where)
				}
			}
		}
	}
}

// addsOrDrops tells an ALTER whose second run would fail (the column, index or constraint
// is there already, or gone) from one that is idempotent by itself (CONVERT TO, MODIFY).
func addsOrDrops(s *sqlparser.AlterTable) bool {
	for _, o := range s.AlterOptions {
		switch o.(type) {
		case *sqlparser.AddColumns, *sqlparser.AddIndexDefinition, *sqlparser.AddConstraintDefinition,
			*sqlparser.DropColumn, *sqlparser.DropKey, *sqlparser.RenameColumn, *sqlparser.RenameIndex:
			return true
		}
	}
	return false
}

// The check can fail: MariaDB-only statements are refused by the MySQL 8 grammar.
func TestGrammarRefusesMariaDBOnlySyntax(t *testing.T) {
	for _, sql := range []string{
		"ALTER TABLE t ADD COLUMN IF NOT EXISTS c INT",
		"ALTER TABLE t DROP INDEX IF EXISTS ix",
		"ALTER TABLE t ADD KEY IF NOT EXISTS ix (c)",
		"ALTER TABLE t ADD CONSTRAINT IF NOT EXISTS ck CHECK (c > 0)",
	} {
		for _, version := range versions {
			if _, err := parser(t, version).ParseStrictDDL(sql); err == nil {
				t.Errorf("MySQL %s grammar accepted MariaDB-only %q", version, sql)
			}
		}
	}
}
