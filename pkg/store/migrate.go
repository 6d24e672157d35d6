package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migration is one versioned schema change, from migrations/NNNN_name.sql.
type Migration struct {
	Version    int
	Name       string
	Statements []Statement
	// Checksum is the SHA-256 of the file as embedded: an applied migration whose file
	// changed afterwards is refused, since the database did not run what the file now says.
	Checksum string
}

// Statement is one SQL statement of a migration and the guard that makes it idempotent.
type Statement struct {
	SQL   string
	Guard *Guard // nil: the statement is idempotent by itself (CREATE TABLE IF NOT EXISTS)
}

// Guard is a condition on the schema, checked in information_schema before its statement
// runs: MySQL 8 has no ALTER TABLE ... ADD COLUMN IF NOT EXISTS (MariaDB's clauses), so a
// migration interrupted half-way is made safe to run again by the runner instead. Written in
// a migration as a comment line right above the statement:
//
//	-- unless column orders.paid_at       (skip the statement when the column exists)
//	-- unless index orders.ix_state       (... when the index exists)
//	-- unless constraint orders.ck_state  (... when the constraint exists)
//	-- if index exception_cases.uq_old    (run only when it exists: a DROP)
type Guard struct {
	WhenExists bool   // true: "if" (run when the object exists); false: "unless"
	Kind       string // column, index or constraint
	Table      string
	Object     string
}

func (g Guard) String() string {
	word := "unless"
	if g.WhenExists {
		word = "if"
	}
	return fmt.Sprintf("%s %s %s.%s", word, g.Kind, g.Table, g.Object)
}

// Migrations returns the embedded migrations in version order.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		base := strings.TrimSuffix(e.Name(), ".sql")
		num, name, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration file %q: want NNNN_name.sql", e.Name())
		}
		body, err := migrationFiles.ReadFile("migrations/" + e.Name())
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", e.Name(), err)
		}
		stmts, err := splitStatements(string(body))
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", e.Name(), err)
		}
		sum := sha256.Sum256(body)
		out = append(out, Migration{Version: v, Name: name, Statements: stmts, Checksum: hex.EncodeToString(sum[:])})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("two migrations with version %d", out[i].Version)
		}
	}
	return out, nil
}

// splitStatements splits a migration on semicolons that end a line, dropping comment lines
// except a guard ("-- if ..." / "-- unless ..."), which belongs to the statement below it.
// Migrations keep to that shape (no semicolons inside string literals or bodies).
func splitStatements(body string) ([]Statement, error) {
	var out []Statement
	var cur strings.Builder
	var guard *Guard
	for n, line := range strings.Split(body, "\n") {
		trimmed := strings.TrimSpace(line)
		if g, ok, err := parseGuard(trimmed); err != nil {
			return nil, fmt.Errorf("line %d: %w", n+1, err)
		} else if ok {
			if guard != nil || cur.Len() > 0 {
				return nil, fmt.Errorf("line %d: a guard must stand right above the statement it guards", n+1)
			}
			guard = &g
			continue
		}
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteString("\n")
		if strings.HasSuffix(trimmed, ";") {
			out = append(out, Statement{SQL: strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"), Guard: guard})
			cur.Reset()
			guard = nil
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, Statement{SQL: s, Guard: guard})
	} else if guard != nil {
		return nil, fmt.Errorf("guard %q guards no statement", guard)
	}
	return out, nil
}

// parseGuard reads "-- if|unless column|index|constraint TABLE.OBJECT"; ok is false for any
// other line.
func parseGuard(line string) (Guard, bool, error) {
	rest, ok := strings.CutPrefix(line, "--")
	if !ok {
		return Guard{}, false, nil
	}
	f := strings.Fields(rest)
	if len(f) == 0 || (f[0] != "if" && f[0] != "unless") {
		return Guard{}, false, nil
	}
	if len(f) != 3 {
		return Guard{}, false, fmt.Errorf("guard %q: want -- if|unless column|index|constraint TABLE.NAME", line)
	}
	switch f[1] {
	case "column", "index", "constraint":
	default:
		return Guard{}, false, fmt.Errorf("guard %q: kind %q: want column, index or constraint", line, f[1])
	}
	table, object, ok := strings.Cut(f[2], ".")
	if !ok || table == "" || object == "" {
		return Guard{}, false, fmt.Errorf("guard %q: want TABLE.NAME, not %q", line, f[2])
	}
	return Guard{WhenExists: f[0] == "if", Kind: f[1], Table: table, Object: object}, true, nil
}

// exists answers a guard's question from information_schema (MySQL 8 and MariaDB alike).
func (g Guard) exists(ctx context.Context, q rowQuerier) (bool, error) {
	var query string
	switch g.Kind {
	case "column":
		query = `SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = ?`
	case "index":
		query = `SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND INDEX_NAME = ?`
	case "constraint":
		query = `SELECT COUNT(*) FROM information_schema.TABLE_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = DATABASE() AND TABLE_NAME = ? AND CONSTRAINT_NAME = ?`
	default:
		return false, fmt.Errorf("guard %s: unknown kind", g)
	}
	var n int
	if err := q.QueryRowContext(ctx, query, g.Table, g.Object).Scan(&n); err != nil {
		return false, fmt.Errorf("guard %s: %w", g, err)
	}
	return n > 0, nil
}

// rowQuerier is what the guards and the bookkeeping need from a connection.
type rowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Result is what a Migrate run did.
type Result struct {
	Applied []int // versions applied by this run, in order
	// Resumed names the migrations an earlier run started and did not finish (the process
	// or the connection died between two statements); this run finished them.
	Resumed []string
}

// Migrate applies the migrations the database has not seen yet, in order. A MySQL named
// lock makes concurrent runs (two pods starting the migrate job) take turns instead of
// racing. Each migration is recorded before its first statement and marked finished after
// its last, so an interrupted one is found, reported by name and finished by the next run
// (its statements are guarded or idempotent). An applied migration whose file was edited
// since is refused by name.
func Migrate(ctx context.Context, db *gorm.DB) (Result, error) {
	var res Result
	migs, err := Migrations()
	if err != nil {
		return res, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return res, err
	}
	conn, err := sqlDB.Conn(ctx)
	if err != nil {
		return res, fmt.Errorf("migrate: connection: %w", err)
	}
	defer conn.Close()
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK('seckill.migrate', 60)").Scan(&got); err != nil {
		return res, fmt.Errorf("migrate: lock: %w", err)
	}
	if !got.Valid || got.Int64 != 1 {
		return res, errors.New("migrate: another migration holds the lock")
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "SELECT RELEASE_LOCK('seckill.migrate')")

	if err := ensureMigrationsTable(ctx, conn); err != nil {
		return res, err
	}
	applied, err := appliedMigrations(ctx, conn)
	if err != nil {
		return res, err
	}
	for _, m := range migs {
		a, seen := applied[m.Version]
		switch {
		case seen && a.checksum == "":
			// Applied before checksums were kept: adopt the file as it is now.
			if _, err := conn.ExecContext(ctx, "UPDATE schema_migrations SET checksum = ? WHERE version = ?", m.Checksum, m.Version); err != nil {
				return res, fmt.Errorf("migration %04d_%s: record checksum: %w", m.Version, m.Name, err)
			}
		case seen && a.checksum != m.Checksum:
			return res, fmt.Errorf("migration %04d_%s was edited after it was applied (checksum %.12s recorded, %.12s now): "+
				"restore the file and add the change as a new migration", m.Version, m.Name, a.checksum, m.Checksum)
		}
		if seen && a.finished {
			continue
		}
		if seen {
			res.Resumed = append(res.Resumed, fmt.Sprintf("%04d_%s", m.Version, m.Name))
		} else if _, err := conn.ExecContext(ctx, "INSERT INTO schema_migrations (version, name, checksum, finished) VALUES (?, ?, ?, 0)",
			m.Version, m.Name, m.Checksum); err != nil {
			return res, fmt.Errorf("migration %04d_%s: record start: %w", m.Version, m.Name, err)
		}
		if err := runStatements(ctx, conn, m); err != nil {
			return res, err
		}
		if _, err := conn.ExecContext(ctx, "UPDATE schema_migrations SET finished = 1, applied_at = CURRENT_TIMESTAMP(3) WHERE version = ?", m.Version); err != nil {
			return res, fmt.Errorf("migration %04d_%s: record finish: %w", m.Version, m.Name, err)
		}
		res.Applied = append(res.Applied, m.Version)
	}
	if err := VerifyCollation(ctx, conn); err != nil {
		return res, err
	}
	return res, nil
}

// runStatements runs m's statements in order, skipping each whose guard says it is done.
func runStatements(ctx context.Context, conn *sql.Conn, m Migration) error {
	for i, st := range m.Statements {
		if st.Guard != nil {
			exists, err := st.Guard.exists(ctx, conn)
			if err != nil {
				return fmt.Errorf("migration %04d_%s statement %d: %w", m.Version, m.Name, i+1, err)
			}
			if exists != st.Guard.WhenExists {
				continue
			}
		}
		if _, err := conn.ExecContext(ctx, st.SQL); err != nil {
			return fmt.Errorf("migration %04d_%s statement %d (of %d; the migration stays unfinished and the next run resumes it): %w",
				m.Version, m.Name, i+1, len(m.Statements), err)
		}
	}
	return nil
}

// ensureMigrationsTable creates schema_migrations, and adds the columns that runs before
// checksums lacked (a migration recorded then was finished: it was recorded only after).
func ensureMigrationsTable(ctx context.Context, conn *sql.Conn) error {
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INT NOT NULL PRIMARY KEY,
		name VARCHAR(128) NOT NULL,
		applied_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
		checksum CHAR(64) NOT NULL DEFAULT '',
		finished TINYINT(1) NOT NULL DEFAULT 1) ENGINE=InnoDB`); err != nil {
		return fmt.Errorf("migrate: schema_migrations: %w", err)
	}
	for _, c := range []struct{ name, ddl string }{
		{"checksum", "ALTER TABLE schema_migrations ADD COLUMN checksum CHAR(64) NOT NULL DEFAULT ''"},
		{"finished", "ALTER TABLE schema_migrations ADD COLUMN finished TINYINT(1) NOT NULL DEFAULT 1"},
	} {
		g := Guard{Kind: "column", Table: "schema_migrations", Object: c.name}
		exists, err := g.exists(ctx, conn)
		if err != nil {
			return fmt.Errorf("migrate: schema_migrations: %w", err)
		}
		if !exists {
			if _, err := conn.ExecContext(ctx, c.ddl); err != nil {
				return fmt.Errorf("migrate: schema_migrations add %s: %w", c.name, err)
			}
		}
	}
	return nil
}

type appliedMigration struct {
	checksum string
	finished bool
}

func appliedMigrations(ctx context.Context, conn querier) (map[int]appliedMigration, error) {
	rows, err := conn.QueryContext(ctx, "SELECT version, checksum, finished FROM schema_migrations")
	if err != nil {
		return nil, fmt.Errorf("migrate: read applied versions: %w", err)
	}
	defer rows.Close()
	out := map[int]appliedMigration{}
	for rows.Next() {
		var v int
		var a appliedMigration
		if err := rows.Scan(&v, &a.checksum, &a.finished); err != nil {
			return nil, fmt.Errorf("migrate: read applied versions: %w", err)
		}
		out[v] = a
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("migrate: read applied versions: %w", err)
	}
	return out, nil
}

// identifierCollation is what every text column of the schema must compare with: bytes, so
// "abc" and "ABC" are two request ids and "Bob" and "bob" two users, as they are in Redis.
const identifierCollation = "utf8mb4_bin"

// asciiCollation is the other binary collation a column may use: a column that holds ASCII
// only by its format (orders.trace_context, a W3C traceparent) stores one byte a character
// and compares bytes just the same.
const asciiCollation = "ascii_bin"

// querier is the one call VerifyCollation needs (a *sql.Conn or *sql.DB).
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// VerifyCollation refuses a schema whose text columns do not all use utf8mb4_bin (or
// ascii_bin, as binary): a column left on a server's case-insensitive default would merge
// identifiers that Redis keeps apart (see migration 0004). It names every offending column.
func VerifyCollation(ctx context.Context, q querier) error {
	rows, err := q.QueryContext(ctx, `SELECT TABLE_NAME, COLUMN_NAME, COLLATION_NAME
		FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = DATABASE() AND COLLATION_NAME IS NOT NULL
		  AND COLLATION_NAME NOT IN (?, ?) AND TABLE_NAME <> 'schema_migrations'
		ORDER BY TABLE_NAME, ORDINAL_POSITION`, identifierCollation, asciiCollation)
	if err != nil {
		return fmt.Errorf("verify collations: %w", err)
	}
	defer rows.Close()
	var bad []string
	for rows.Next() {
		var table, column, collation string
		if err := rows.Scan(&table, &column, &collation); err != nil {
			return fmt.Errorf("verify collations: %w", err)
		}
		bad = append(bad, fmt.Sprintf("%s.%s (%s)", table, column, collation))
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("verify collations: %w", err)
	}
	if len(bad) > 0 {
		return fmt.Errorf("schema check: text columns must use %s, found %s; run `ALTER TABLE <t> CONVERT TO CHARACTER SET utf8mb4 COLLATE %s` or re-run migration 0004",
			identifierCollation, strings.Join(bad, ", "), identifierCollation)
	}
	return nil
}

// SchemaState is how the database's schema compares with this build's migrations, for
// `reconciler --check` before an upgrade.
type SchemaState struct {
	Applied     int      // migrations of this build the database has finished
	Pending     []string // this build's migrations the database has not applied: run `gateway migrate` first
	Interrupted []string // started and not finished: `gateway migrate` finishes them
	Edited      []string // applied from a file this build changed since (Migrate refuses it)
	Newer       []int    // applied versions this build does not know: the database was migrated by a newer release
}

// Problems are what stops this build from running on the schema: anything pending,
// interrupted or edited. A newer schema is not a problem by itself (a release's migrations
// must leave the previous release working, which is what lets a roll go back), and is
// reported as a note.
func (s SchemaState) Problems() []string {
	var out []string
	if len(s.Pending) > 0 {
		out = append(out, fmt.Sprintf("migrations not applied: %s (run gateway migrate first)", strings.Join(s.Pending, ", ")))
	}
	if len(s.Interrupted) > 0 {
		out = append(out, fmt.Sprintf("migrations interrupted: %s (run gateway migrate to finish them)", strings.Join(s.Interrupted, ", ")))
	}
	if len(s.Edited) > 0 {
		out = append(out, fmt.Sprintf("migrations edited after they were applied: %s", strings.Join(s.Edited, ", ")))
	}
	return out
}

// CheckSchema reads the applied migrations and compares them with this build's; it writes
// nothing (the services' DML user may run it).
func CheckSchema(ctx context.Context, db *gorm.DB) (SchemaState, error) {
	var st SchemaState
	migs, err := Migrations()
	if err != nil {
		return st, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return st, err
	}
	applied, err := appliedMigrations(ctx, sqlDB)
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1146 { // no schema_migrations: never migrated
		applied, err = nil, nil
	}
	if err != nil {
		return st, err
	}
	known := map[int]bool{}
	for _, m := range migs {
		known[m.Version] = true
		name := fmt.Sprintf("%04d_%s", m.Version, m.Name)
		a, seen := applied[m.Version]
		switch {
		case !seen:
			st.Pending = append(st.Pending, name)
		case !a.finished:
			st.Interrupted = append(st.Interrupted, name)
		case a.checksum != "" && a.checksum != m.Checksum:
			st.Edited = append(st.Edited, name)
		default:
			st.Applied++
		}
	}
	for v := range applied {
		if !known[v] {
			st.Newer = append(st.Newer, v)
		}
	}
	sort.Ints(st.Newer)
	return st, nil
}
