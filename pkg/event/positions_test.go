package event_test

import (
	"testing"

	"github.com/seckill-pipeline/seckill/pkg/event"
)

func TestPositionsClampAndSayWhy(t *testing.T) {
	bounds := map[int]event.PartitionOffsets{0: {First: 0, End: 10}, 1: {First: 5, End: 10}, 2: {First: 0, End: 3}, 3: {First: 2, End: 8}}
	stored := map[int]int64{0: 4, 1: 2, 2: 7}
	got := event.Positions(bounds, stored)
	for _, tc := range []struct {
		name string
		part int
		want event.Position
	}{
		{"within the log", 0, event.Position{Next: 4, End: 10}},
		{"retention removed unread messages", 1, event.Position{Next: 5, End: 10, Stored: 2, Clamped: event.ClampRetention}},
		{"beyond the end: topic recreated", 2, event.Position{Next: 0, End: 3, Stored: 7, Clamped: event.ClampRecreated}},
		{"never read", 3, event.Position{Next: 2, End: 8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got[tc.part] != tc.want {
				t.Fatalf("partition %d: %+v, want %+v", tc.part, got[tc.part], tc.want)
			}
		})
	}
	if n := event.Backlog(got); n != 6+5+3+6 {
		t.Fatalf("backlog %d, want 20", n)
	}
}
