// Package store is the MySQL system of record, through gorm: models, versioned migrations,
// and the batched conditional stock update.
package store

import (
	"context"
	"crypto/tls"
	"database/sql"
	"errors"
	"fmt"
	"time"

	driver "github.com/go-sql-driver/mysql"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/seckill-pipeline/seckill/pkg/certs"
)

// Conn is how to reach MySQL: a DSN plus what a DSN should not carry as text.
type Conn struct {
	DSN      string
	Password string      // overrides the DSN's password when set (kept out of the DSN)
	TLS      *tls.Config // the server's private CA (and a client certificate); nil: as the DSN says
}

// CheckDSN reports whether dsn parses, and refuses a tls= parameter next to a TLS
// configuration given separately (which one would win is not obvious to a reader).
func CheckDSN(dsn string, withTLS bool) error {
	cfg, err := driver.ParseDSN(dsn)
	if err != nil {
		return err
	}
	if withTLS && cfg.TLSConfig != "" && cfg.TLSConfig != "false" {
		return fmt.Errorf("has tls=%s while SECKILL_MYSQL_TLS=true: remove it from the DSN", cfg.TLSConfig)
	}
	return nil
}

// Open connects to MySQL/MariaDB through gorm with a DSN alone and pings it.
func Open(ctx context.Context, dsn string) (*gorm.DB, error) {
	return Connect(ctx, Conn{DSN: dsn})
}

// Connect connects to MySQL/MariaDB through gorm and pings it. The TLS configuration goes
// to the driver's connector, not through its process-wide registry of named configs, so
// two connections with two CAs in one process (tests) cannot see each other's. A refusal
// names the server and the user, never the password or the DSN.
func Connect(ctx context.Context, c Conn) (*gorm.DB, error) {
	cfg, err := c.config()
	if err != nil {
		return nil, err
	}
	where := fmt.Sprintf("mysql %s as user %s", cfg.Addr, cfg.User)
	connector, err := driver.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	pool := sql.OpenDB(connector)
	// Ping before gorm asks the version, so a refusal gets its server-and-user words here.
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = pool.PingContext(pctx)
	cancel()
	if err != nil {
		_ = pool.Close()
		return nil, fmt.Errorf("%s: %w", where, explain(err, cfg.TLS != nil))
	}
	db, err := gorm.Open(mysql.New(mysql.Config{Conn: pool, DSNConfig: cfg}), &gorm.Config{
		Logger:                 logger.Discard,
		SkipDefaultTransaction: true, // every write path here opens its own transaction on purpose
		PrepareStmt:            false,
		NowFunc:                func() time.Time { return time.Now().UTC() },
	})
	if err != nil {
		_ = pool.Close()
		return nil, fmt.Errorf("open %s: %w", where, err)
	}
	pool.SetMaxOpenConns(64)
	pool.SetMaxIdleConns(32)
	pool.SetConnMaxLifetime(30 * time.Minute)
	return db, nil
}

// config is the driver's configuration for c: the password and TLS given beside the DSN.
func (c Conn) config() (*driver.Config, error) {
	cfg, err := driver.ParseDSN(c.DSN)
	if err != nil {
		return nil, fmt.Errorf("mysql DSN: %w", err)
	}
	if c.Password != "" {
		cfg.Passwd = c.Password
	}
	if c.TLS != nil {
		cfg.TLS = c.TLS.Clone()
		cfg.TLSConfig = ""
	}
	return cfg, nil
}

// Sampler opens a small pool without connecting: for a server the caller only samples
// (a replica's status), whose absence must not stop a start-up; each query dials as needed
// and keeps no idle session. A sampled replica may be promoted and later fenced, and a
// failover waits until no service session is left on the fenced server: idle sessions kept
// here held the cluster profile's switchover for its full 30 s (chaos, seed 24006).
func Sampler(c Conn) (*sql.DB, error) {
	cfg, err := c.config()
	if err != nil {
		return nil, err
	}
	connector, err := driver.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysql %s as user %s: %w", cfg.Addr, cfg.User, err)
	}
	pool := sql.OpenDB(connector)
	pool.SetMaxOpenConns(2)
	pool.SetMaxIdleConns(0) // none kept
	return pool, nil
}

// explain adds what an operator should check to a refused connection. MySQL answers a
// plaintext client at a server that requires TLS with 3159 ("secure transport"), which names
// itself, but MariaDB with require_secure_transport answers 1045 "Access denied", the same
// as a wrong password: a plaintext client is told both causes. A TLS client at a plaintext
// server gets ErrNoTLS.
func explain(err error, usedTLS bool) error {
	if errors.Is(err, driver.ErrNoTLS) {
		return fmt.Errorf("%w (the server does not offer TLS: plaintext server, or SECKILL_MYSQL_TLS set by mistake)", err)
	}
	var me *driver.MySQLError
	if !usedTLS && errors.As(err, &me) && me.Number == 1045 {
		return fmt.Errorf("%w (wrong user or password, or the server requires TLS: MariaDB's require_secure_transport refuses a plaintext login with this error; set SECKILL_MYSQL_TLS=true)", err)
	}
	return certs.Explain(err, usedTLS, "SECKILL_MYSQL_TLS")
}

// Ping checks the connection pool can reach the server.
func Ping(ctx context.Context, db *gorm.DB) error {
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	return sqlDB.PingContext(ctx)
}

// ReadOnly reports whether the server refuses writes from the pipeline's users: read_only
// is on (MySQL's super_read_only implies it), as on a replica, a demoted primary or a server
// an operator froze. Writes then fail with error 1290 and the consumers wait.
func ReadOnly(ctx context.Context, db *gorm.DB) (bool, error) {
	var on int
	if err := db.WithContext(ctx).Raw("SELECT @@global.read_only").Row().Scan(&on); err != nil {
		return false, fmt.Errorf("read @@global.read_only: %w", err)
	}
	return on != 0, nil
}

// Close closes the pool under db.
func Close(db *gorm.DB) error {
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	return sqlDB.Close()
}
