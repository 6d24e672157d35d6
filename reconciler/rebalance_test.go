package main

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestRebalancePolicy(t *testing.T) {
	type l = bucketLoad
	type m = bucketMove
	for _, c := range []struct {
		name     string
		buckets  []bucketLoad
		lowWater int64
		want     []bucketMove
	}{
		{"nothing needy: every bucket above low water", []l{{Left: 5, Demand: 9}, {Left: 2, Demand: 0}}, 2, nil},
		{"dry bucket without demand is not needy", []l{{Left: 10}, {Left: 0}}, 2, nil},
		{"nothing left anywhere: nothing to move, sold out", []l{{Left: 0, Wanted: true}, {Left: 0, Demand: 4}}, 1, nil},
		{"wanted dry bucket gets its share from an idle one",
			// weights 1 and 2: shares 3 and 7 of 10 (largest remainder gives the odd unit to bucket 1)
			[]l{{Left: 10}, {Left: 0, Wanted: true}}, 1, []m{{From: 0, To: 1, Units: 7}}},
		{"the last unit goes where the demand is",
			[]l{{Left: 1}, {Left: 0, Wanted: true}}, 1, []m{{From: 0, To: 1, Units: 1}}},
		{"the last unit stays where demand is at least as high",
			[]l{{Left: 1, Demand: 5}, {Left: 0, Wanted: true}}, 1, nil},
		{"in proportion to demand",
			// weights 1, 31, 1, 1 of 34; 68 left: shares 2, 62, 2, 2
			[]l{{Left: 30}, {Left: 0, Demand: 30}, {Left: 20}, {Left: 18}}, 5,
			[]m{{From: 0, To: 1, Units: 28}, {From: 2, To: 1, Units: 18}, {From: 3, To: 1, Units: 16}}},
		{"two needy buckets, most deficit served first from most surplus",
			// weights 1, 11, 6, 1 of 19; 19 left: shares 1, 11, 6, 1
			[]l{{Left: 19}, {Left: 0, Demand: 10}, {Left: 0, Demand: 4, Wanted: true}, {Left: 0}}, 2,
			[]m{{From: 0, To: 1, Units: 11}, {From: 0, To: 2, Units: 6}}},
		{"a needy bucket never donates, even above its share",
			// weights 1, 2, 11 of 14: shares 0, 1, 2 of 3 (the odd unit to bucket 1, largest remainder)
			[]l{{Left: 2}, {Left: 1, Demand: 1}, {Left: 0, Demand: 10}}, 3,
			[]m{{From: 0, To: 2, Units: 2}}},
		{"a single bucket has nowhere to move", []l{{Left: 0, Demand: 3, Wanted: true}}, 1, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := rebalance(c.buckets, c.lowWater)
			if !slices.Equal(got, c.want) {
				t.Fatalf("rebalance(%+v, %d) = %+v, want %+v", c.buckets, c.lowWater, got, c.want)
			}
		})
	}
}

// Over random inputs: the moves never take a donor below zero or below its share (so a
// needy bucket is never a donor), never send to a bucket that is not needy, never name one
// bucket as both ends, and leave the units' sum as it was; asking twice gives the same.
func TestRebalanceNeverOverdraws(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 2))
	for range 20000 {
		n := 1 + r.IntN(8)
		bs := make([]bucketLoad, n)
		for b := range bs {
			bs[b] = bucketLoad{Left: int64(r.IntN(12)), Demand: int64(r.IntN(6)), Wanted: r.IntN(4) == 0}
		}
		low := int64(1 + r.IntN(4))
		moves := rebalance(bs, low)
		if !slices.Equal(moves, rebalance(bs, low)) {
			t.Fatalf("rebalance(%+v) is not deterministic", bs)
		}
		after := make([]int64, n)
		for b := range bs {
			after[b] = bs[b].Left
		}
		for _, mv := range moves {
			needy := func(b int) bool { return bs[b].Left < low && (bs[b].Demand > 0 || bs[b].Wanted) }
			if mv.From == mv.To || mv.Units < 1 || needy(mv.From) || !needy(mv.To) {
				t.Fatalf("rebalance(%+v, %d): bad move %+v", bs, low, mv)
			}
			after[mv.From] -= mv.Units
			after[mv.To] += mv.Units
		}
		var before, sum int64
		for b := range bs {
			before += bs[b].Left
			sum += after[b]
			if after[b] < 0 {
				t.Fatalf("rebalance(%+v, %d) = %+v overdraws bucket %d", bs, low, moves, b)
			}
		}
		if sum != before {
			t.Fatalf("rebalance(%+v) changed the sum %d -> %d", bs, before, sum)
		}
	}
}

func TestLowWaterMark(t *testing.T) {
	for _, c := range []struct {
		total int64
		n     int
		want  int64
	}{{0, 4, 1}, {100, 4, 1}, {1000, 4, 5}, {1_000_000, 8, 2500}, {10, 0, 1}} {
		if got := lowWaterMark(c.total, c.n); got != c.want {
			t.Errorf("lowWaterMark(%d, %d) = %d, want %d", c.total, c.n, got, c.want)
		}
	}
}
