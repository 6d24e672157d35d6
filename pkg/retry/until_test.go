package retry

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	errKafka := errors.New("kafka: not enough replicas")
	fast := persistent{timeout: time.Second, base: time.Millisecond, max: 2 * time.Millisecond}
	tests := []struct {
		name      string
		fails     int  // attempts that fail before one succeeds (-1: all fail)
		cancelAt  int  // cancel ctx after this many failures (0: never)
		cancelled bool // ctx already ended before Until is called
		wantTries int
		wantErr   []error // what the returned error wraps; none: nil
	}{
		{name: "first attempt acknowledged", fails: 0, wantTries: 1},
		{name: "retried until acknowledged", fails: 3, wantTries: 4},
		{name: "ctx ends while failing", fails: -1, cancelAt: 2, wantTries: 2, wantErr: []error{context.Canceled, errKafka}},
		{name: "ctx ended before: the attempt still runs", fails: 0, cancelled: true, wantTries: 1},
		{name: "ctx ended before and the attempt fails: stop after it", fails: -1, cancelled: true, wantTries: 1,
			wantErr: []error{context.Canceled, errKafka}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancelled {
				cancel()
			}
			tries, failures := 0, 0
			err := fast.until(ctx, func(actx context.Context) error {
				tries++
				// Each attempt is detached from ctx and bounded by its own timeout.
				if actx.Err() != nil {
					t.Errorf("attempt %d: its context already ended: %v", tries, actx.Err())
				}
				if dl, ok := actx.Deadline(); !ok || time.Until(dl) > fast.timeout {
					t.Errorf("attempt %d: deadline %v (set %v), want within %v", tries, dl, ok, fast.timeout)
				}
				if tc.fails < 0 || tries <= tc.fails {
					return errKafka
				}
				return nil
			}, func(err error) {
				failures++
				if !errors.Is(err, errKafka) {
					t.Errorf("failed told %v, want the attempt's error", err)
				}
				if failures == tc.cancelAt {
					cancel()
				}
			})
			if tries != tc.wantTries {
				t.Errorf("attempts = %d, want %d", tries, tc.wantTries)
			}
			if failures != tries-1 && (tc.wantErr == nil || failures != tries) {
				t.Errorf("failed called %d times for %d attempts", failures, tries)
			}
			if tc.wantErr == nil && err != nil {
				t.Fatalf("err = %v, want nil", err)
			}
			for _, want := range tc.wantErr {
				if !errors.Is(err, want) {
					t.Errorf("err = %v, want it to wrap %v", err, want)
				}
			}
		})
	}
}

// TestUntilPauses checks the pauses double from base up to max: the wait is bounded, so a
// Kafka outage is not hammered and a recovered one is noticed within max.
func TestUntilPauses(t *testing.T) {
	p := persistent{timeout: time.Second, base: 2 * time.Millisecond, max: 8 * time.Millisecond}
	var at []time.Time
	err := p.until(context.Background(), func(context.Context) error {
		at = append(at, time.Now())
		if len(at) < 6 {
			return errors.New("unavailable")
		}
		return nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Pauses at least 2, 4, 8, 8, 8 ms (timers never fire early; they may fire late under load).
	for i, min := range []time.Duration{2, 4, 8, 8, 8} {
		if gap := at[i+1].Sub(at[i]); gap < min*time.Millisecond {
			t.Errorf("pause %d = %v, want at least %v", i+1, gap, min*time.Millisecond)
		}
	}
}
