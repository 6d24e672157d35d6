package store

import (
	"context"
	"database/sql"
	"fmt"

	"gorm.io/gorm"
)

// Lock is a MySQL named lock (GET_LOCK) held on a dedicated connection. It lives and dies
// with that connection, in the same server as the data it guards: unlike a Redis lease it
// survives Redis losing its data, and a MySQL restart frees it only together with every
// transaction of its holder.
type Lock struct {
	conn *sql.Conn
	name string
}

// TryLock takes the named lock if it is free; ok is false when another session holds it.
func TryLock(ctx context.Context, db *gorm.DB, name string) (l *Lock, ok bool, err error) {
	sqlDB, err := db.DB()
	if err != nil {
		return nil, false, err
	}
	conn, err := sqlDB.Conn(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("lock %s: connection: %w", name, err)
	}
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", name).Scan(&got); err != nil {
		conn.Close()
		return nil, false, fmt.Errorf("lock %s: %w", name, err)
	}
	if !got.Valid || got.Int64 != 1 {
		conn.Close()
		return nil, false, nil
	}
	return &Lock{conn: conn, name: name}, true, nil
}

// Held reports an error unless this connection still holds the lock (a restarted server or
// a killed connection lost it).
func (l *Lock) Held(ctx context.Context) error {
	var mine sql.NullInt64
	if err := l.conn.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?) = CONNECTION_ID()", l.name).Scan(&mine); err != nil {
		return fmt.Errorf("lock %s: %w", l.name, err)
	}
	if !mine.Valid || mine.Int64 != 1 {
		return fmt.Errorf("lock %s: no longer held", l.name)
	}
	return nil
}

// Release frees the lock and its connection.
func (l *Lock) Release(ctx context.Context) {
	_, _ = l.conn.ExecContext(ctx, "SELECT RELEASE_LOCK(?)", l.name)
	_ = l.conn.Close()
}
