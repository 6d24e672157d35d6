package event

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

func TestWaitCoordinator(t *testing.T) {
	notCoord := fmt.Errorf("committed offsets of g: %w", kafka.NotCoordinatorForGroup)
	loading := fmt.Errorf("committed offset of t/0: %w", kafka.GroupLoadInProgress)
	unavailable := fmt.Errorf("committed offsets of g: %w", kafka.GroupCoordinatorNotAvailable)
	denied := fmt.Errorf("committed offsets of g: %w", kafka.GroupAuthorizationFailed)
	tests := []struct {
		name      string
		errs      []error // answers in order; nil is success; the last one repeats
		wait      time.Duration
		wantErr   error
		wantCalls int
	}{
		{"ready at once", []error{nil}, time.Second, nil, 1},
		{"fresh broker: not coordinator, loading, then ready", []error{notCoord, unavailable, loading, nil}, time.Second, nil, 4},
		{"a real error is returned at once", []error{denied}, time.Second, kafka.GroupAuthorizationFailed, 1},
		{"a real error after a loading one is returned at once", []error{loading, denied}, time.Second, kafka.GroupAuthorizationFailed, 2},
		{"a coordinator that never loads is reported after the wait", []error{notCoord}, 300 * time.Millisecond, kafka.NotCoordinatorForGroup, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			start := time.Now()
			got, err := waitCoordinator(context.Background(), tc.wait, func() (int, error) {
				e := tc.errs[min(calls, len(tc.errs)-1)]
				calls++
				if e != nil {
					return 0, e
				}
				return 42, nil
			})
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			if err == nil && got != 42 {
				t.Fatalf("value %d, want 42", got)
			}
			if tc.wantCalls > 0 && calls != tc.wantCalls {
				t.Fatalf("%d calls, want %d", calls, tc.wantCalls)
			}
			if elapsed := time.Since(start); elapsed > tc.wait+time.Second {
				t.Fatalf("took %v, bound %v", elapsed, tc.wait)
			}
		})
	}

	t.Run("ctx ends the wait with the coordinator's error", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err := waitCoordinator(ctx, time.Minute, func() (int, error) { return 0, loading })
		if !errors.Is(err, kafka.GroupLoadInProgress) {
			t.Fatalf("error %v, want the coordinator's", err)
		}
	})
}
