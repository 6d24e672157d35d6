package retry

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

func TestDecide(t *testing.T) {
	p := Policy{Immediate: 2, Backoff: 3, Base: 10 * time.Millisecond, Max: 25 * time.Millisecond}
	conflict := fmt.Errorf("persist: %w", seckill.ErrConflict)
	deadlock := &mysql.MySQLError{Number: 1213, Message: "Deadlock found"}
	lockWait := &mysql.MySQLError{Number: 1205, Message: "Lock wait timeout exceeded"}
	duplicate := &mysql.MySQLError{Number: 1062, Message: "Duplicate entry"}
	gone := &mysql.MySQLError{Number: 2006, Message: "MySQL server has gone away"}
	tests := []struct {
		name      string
		failed    int
		err       error
		want      Action
		wantDelay time.Duration
	}{
		{"conflict, first failure", 1, conflict, Now, 0},
		{"conflict, last immediate", 2, conflict, Now, 0},
		{"conflict, first backoff", 3, conflict, Later, 10 * time.Millisecond},
		{"conflict, second backoff doubles", 4, conflict, Later, 20 * time.Millisecond},
		{"conflict, backoff capped", 5, conflict, Later, 25 * time.Millisecond},
		{"conflict, retries exhausted", 6, conflict, Compensate, 0},
		{"deadlock is contention", 1, deadlock, Now, 0},
		{"deadlock exhausted", 6, deadlock, Compensate, 0},
		{"lock wait timeout is contention", 3, lockWait, Later, 10 * time.Millisecond},
		{"duplicate key: a fresh transaction resolves it", 1, duplicate, Now, 0},
		{"no stock row is poison", 1, fmt.Errorf("x: %w", store.ErrNoStockRow), DeadLetter, 0},
		{"no such stock bucket is poison", 1, fmt.Errorf("x: %w", store.ErrNoBucket), DeadLetter, 0},
		{"grabs of two buckets in one call is poison", 1, fmt.Errorf("x: %w", store.ErrMixedBuckets), DeadLetter, 0},
		{"server gone: wait, never compensate", 50, gone, WaitForDB, 25 * time.Millisecond},
		{"bad connection: wait", 1, fmt.Errorf("tx: %w", mysql.ErrInvalidConn), WaitForDB, 10 * time.Millisecond},
		{"unknown error is retried, then compensated", 6, errors.New("Error 3819: check constraint"), Compensate, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, d := p.Decide(tc.failed, tc.err)
			if got != tc.want || d != tc.wantDelay {
				t.Fatalf("Decide(%d, %v) = %s %s, want %s %s", tc.failed, tc.err, got, d, tc.want, tc.wantDelay)
			}
		})
	}
}

func TestFullJitterBounds(t *testing.T) {
	for range 1000 {
		d := FullJitter(100 * time.Millisecond)
		if d < 50*time.Millisecond || d > 100*time.Millisecond {
			t.Fatalf("jitter %s outside [50ms, 100ms]", d)
		}
	}
}
