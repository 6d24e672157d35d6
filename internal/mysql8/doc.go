// Package mysql8 checks the schema migrations against a MySQL 8 grammar (vitess's parser),
// since no MySQL 8 server can run where the tests run: MariaDB, which the tests migrate for
// real, accepts clauses MySQL 8 refuses (ALTER TABLE ... ADD COLUMN IF NOT EXISTS and
// friends), so a migration that passes there can still stop `gateway migrate` on MySQL 8,
// RDS, Aurora or Cloud SQL.
//
// It is its own module so that vitess and what it requires (a newer MySQL driver among
// them) stay out of the services' dependency graph; `make lint` runs it.
package mysql8
