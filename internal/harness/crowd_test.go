package harness

import (
	"testing"
	"time"
)

func TestLongestErrorRun(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tests := []struct {
		name  string
		at    []time.Time
		codes []int
		want  time.Duration
		n     int
	}{
		{"no errors", []time.Time{at(0), at(10)}, []int{202, 409}, 0, 0},
		{"one 503 alone", []time.Time{at(0), at(10), at(20)}, []int{202, 503, 202}, 0, 1},
		// Out of order as the crowd's goroutines append them: sorted by time first.
		{"a run broken by a 202, the longer one wins", []time.Time{at(300), at(0), at(100), at(150), at(700), at(400)},
			[]int{503, 502, 0, 202, 503, 503}, 400 * time.Millisecond, 3},
		{"network errors count as errors", []time.Time{at(0), at(50), at(90)}, []int{0, 0, 202}, 50 * time.Millisecond, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := &AttemptLog{at: tc.at, codes: tc.codes}
			got, n := l.LongestErrorRun()
			if got != tc.want || n != tc.n {
				t.Fatalf("LongestErrorRun() = %s, %d; want %s, %d", got, n, tc.want, tc.n)
			}
		})
	}
}
