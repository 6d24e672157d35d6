package store

import (
	"fmt"
	"testing"
)

func TestSplitBySize(t *testing.T) {
	size := func(n int) int { return n }
	for _, tc := range []struct {
		rows  []int
		limit int
		want  string
	}{
		{[]int{1}, 10, "[[1]]"},
		{[]int{4, 5, 2, 9, 30, 1}, 10, "[[4 5] [2] [9] [30] [1]]"},
		{[]int{10, 10}, 10, "[[10] [10]]"},
	} {
		if got := fmt.Sprint(splitBySize(tc.rows, tc.limit, size)); got != tc.want {
			t.Errorf("splitBySize(%v, %d) = %s, want %s", tc.rows, tc.limit, got, tc.want)
		}
	}
	ones := make([]int, 1201)
	for i := range ones {
		ones[i] = 1
	}
	if parts := splitBySize(ones, 1<<20, size); len(parts) != 3 || len(parts[0]) != 500 || len(parts[2]) != 201 {
		t.Errorf("1201 small rows in %d statements, want 500, 500, 201", len(parts))
	}
}
