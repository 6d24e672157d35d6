package main

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

func TestRetryPolicy(t *testing.T) {
	p := retryPolicy{Immediate: 2, Backoff: 3, Base: 10 * time.Millisecond, Max: 25 * time.Millisecond}
	conflict := fmt.Errorf("persist: %w", seckill.ErrConflict)
	deadlock := &mysql.MySQLError{Number: 1213, Message: "Deadlock found"}
	lockWait := &mysql.MySQLError{Number: 1205, Message: "Lock wait timeout exceeded"}
	gone := &mysql.MySQLError{Number: 2006, Message: "MySQL server has gone away"}
	tests := []struct {
		name      string
		failed    int
		err       error
		want      action
		wantDelay time.Duration
	}{
		{"conflict, first failure", 1, conflict, retryNow, 0},
		{"conflict, last immediate", 2, conflict, retryNow, 0},
		{"conflict, first backoff", 3, conflict, retryLater, 10 * time.Millisecond},
		{"conflict, second backoff doubles", 4, conflict, retryLater, 20 * time.Millisecond},
		{"conflict, backoff capped", 5, conflict, retryLater, 25 * time.Millisecond},
		{"conflict, retries exhausted", 6, conflict, compensate, 0},
		{"deadlock is contention", 1, deadlock, retryNow, 0},
		{"deadlock exhausted", 6, deadlock, compensate, 0},
		{"lock wait timeout is contention", 3, lockWait, retryLater, 10 * time.Millisecond},
		{"no stock row is poison", 1, fmt.Errorf("x: %w", store.ErrNoStockRow), deadLetter, 0},
		{"server gone: wait, never compensate", 50, gone, waitForDB, 25 * time.Millisecond},
		{"bad connection: wait", 1, fmt.Errorf("tx: %w", mysql.ErrInvalidConn), waitForDB, 10 * time.Millisecond},
		{"unknown error is retried, then compensated", 6, errors.New("Error 3819: check constraint"), compensate, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, d := p.decide(tc.failed, tc.err)
			if got != tc.want || d != tc.wantDelay {
				t.Fatalf("decide(%d, %v) = %s %s, want %s %s", tc.failed, tc.err, got, d, tc.want, tc.wantDelay)
			}
		})
	}
}

func TestFullJitterBounds(t *testing.T) {
	for range 1000 {
		d := fullJitter(100 * time.Millisecond)
		if d < 50*time.Millisecond || d > 100*time.Millisecond {
			t.Fatalf("jitter %s outside [50ms, 100ms]", d)
		}
	}
}
