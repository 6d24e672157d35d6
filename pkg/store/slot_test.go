package store

import "testing"

func TestFreeSlot(t *testing.T) {
	for _, tc := range []struct {
		name string
		held []int
		want int
	}{
		{"none held", nil, 1},
		{"first held", []int{1}, 2},
		{"a released first slot is reused", []int{2}, 1},
		{"gap in the middle", []int{3, 1}, 2},
		{"all low ones held", []int{2, 1, 3}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := freeSlot(tc.held); got != tc.want {
				t.Fatalf("freeSlot(%v) = %d, want %d", tc.held, got, tc.want)
			}
		})
	}
}
