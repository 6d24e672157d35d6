package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"gorm.io/gorm"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migration is one versioned schema change, from migrations/NNNN_name.sql.
type Migration struct {
	Version    int
	Name       string
	Statements []string
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
		out = append(out, Migration{Version: v, Name: name, Statements: splitStatements(string(body))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("two migrations with version %d", out[i].Version)
		}
	}
	return out, nil
}

// splitStatements splits a migration on semicolons that end a line, dropping comment lines.
// Migrations keep to that shape (no semicolons inside string literals or bodies).
func splitStatements(body string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(body, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteString("\n")
		if strings.HasSuffix(trimmed, ";") {
			out = append(out, strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"))
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}

// Migrate applies the migrations the database has not seen yet, in order, and returns the
// versions it applied. A MySQL named lock makes concurrent runs (two pods starting the
// migrate job) take turns instead of racing.
func Migrate(ctx context.Context, db *gorm.DB) ([]int, error) {
	migs, err := Migrations()
	if err != nil {
		return nil, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	conn, err := sqlDB.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: connection: %w", err)
	}
	defer conn.Close()
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK('seckill.migrate', 60)").Scan(&got); err != nil {
		return nil, fmt.Errorf("migrate: lock: %w", err)
	}
	if !got.Valid || got.Int64 != 1 {
		return nil, errors.New("migrate: another migration holds the lock")
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "SELECT RELEASE_LOCK('seckill.migrate')")

	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INT NOT NULL PRIMARY KEY,
		name VARCHAR(128) NOT NULL,
		applied_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)) ENGINE=InnoDB`); err != nil {
		return nil, fmt.Errorf("migrate: schema_migrations: %w", err)
	}
	done := map[int]bool{}
	rows, err := conn.QueryContext(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return nil, fmt.Errorf("migrate: read applied versions: %w", err)
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return nil, err
		}
		done[v] = true
	}
	rows.Close()

	var applied []int
	for _, m := range migs {
		if done[m.Version] {
			continue
		}
		for i, stmt := range m.Statements {
			if _, err := conn.ExecContext(ctx, stmt); err != nil {
				return applied, fmt.Errorf("migration %04d_%s statement %d: %w", m.Version, m.Name, i+1, err)
			}
		}
		if _, err := conn.ExecContext(ctx, "INSERT INTO schema_migrations (version, name) VALUES (?, ?)", m.Version, m.Name); err != nil {
			return applied, fmt.Errorf("migration %04d: record: %w", m.Version, err)
		}
		applied = append(applied, m.Version)
	}
	if err := VerifyCollation(ctx, conn); err != nil {
		return applied, err
	}
	return applied, nil
}

// identifierCollation is what every text column of the schema must compare with: bytes, so
// "abc" and "ABC" are two request ids and "Bob" and "bob" two users, as they are in Redis.
const identifierCollation = "utf8mb4_bin"

// querier is the one call VerifyCollation needs (a *sql.Conn or *sql.DB).
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// VerifyCollation refuses a schema whose text columns do not all use utf8mb4_bin: a column
// left on a server's case-insensitive default would merge identifiers that Redis keeps apart
// (see migration 0004). It names every offending column.
func VerifyCollation(ctx context.Context, q querier) error {
	rows, err := q.QueryContext(ctx, `SELECT TABLE_NAME, COLUMN_NAME, COLLATION_NAME
		FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = DATABASE() AND COLLATION_NAME IS NOT NULL
		  AND COLLATION_NAME <> ? AND TABLE_NAME <> 'schema_migrations'
		ORDER BY TABLE_NAME, ORDINAL_POSITION`, identifierCollation)
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
