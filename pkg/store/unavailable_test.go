package store_test

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// IsUnavailable says "wait and retry" for a server that cannot take the write right now
// (gone, overloaded, read-only during a failover) and "no" for errors about the write itself.
func TestIsUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"server shutdown 1053", &mysql.MySQLError{Number: 1053}, true},
		{"too many connections 1040", &mysql.MySQLError{Number: 1040, Message: "Too many connections"}, true},
		{"read-only option 1290", &mysql.MySQLError{Number: 1290, Message: "The MariaDB server is running with the --read-only option"}, true},
		{"read-only mode 1836", &mysql.MySQLError{Number: 1836, Message: "Running in read-only mode"}, true},
		{"wrapped read-only", fmt.Errorf("persist batch: %w", &mysql.MySQLError{Number: 1836}), true},
		{"connection lost 2013", &mysql.MySQLError{Number: 2013}, true},
		{"bad connection", mysql.ErrInvalidConn, true},
		{"unexpected EOF", io.ErrUnexpectedEOF, true},
		{"duplicate key 1062", &mysql.MySQLError{Number: 1062}, false},
		{"check constraint 4025", &mysql.MySQLError{Number: 4025}, false},
		{"deadlock 1213", &mysql.MySQLError{Number: 1213}, false},
		{"optimistic conflict", seckill.ErrConflict, false},
		{"other", errors.New("boom"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := store.IsUnavailable(tc.err); got != tc.want {
				t.Fatalf("IsUnavailable(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
