package main

import "slices"

// The rebalance policy of stock buckets (docs/design.md), as a pure function: what the
// rebalance loop reads (each bucket's left, the demand it saw since the last round, whether
// a gateway asked for units) in, the transfers to make out.

// bucketLoad is one bucket as the rebalance loop sees it.
type bucketLoad struct {
	Left   int64 // units left in Redis
	Demand int64 // grabs answered since the last round, sold_out answers included
	Wanted bool  // a gateway found this bucket dry while others held units
}

// bucketMove is one transfer the policy asks for.
type bucketMove struct {
	From, To int
	Units    int64
}

// lowWaterMark is the left below which a bucket with demand asks for units: 2 % of the
// prize's stock per bucket, at least 1.
func lowWaterMark(prizeTotal int64, n int) int64 {
	if n < 1 {
		n = 1
	}
	return max(1, prizeTotal*2/(100*int64(n)))
}

// rebalance returns the transfers that give every needy bucket (left below lowWater, with
// demand or wanted) its share of the units left, where a bucket's share is the units left
// split in proportion to its demand plus one (so a bucket nobody asked of this round still
// keeps some, and a bucket somebody asked of gets at least what rounding allows). Units come
// only from buckets holding more than their share, most surplus first, and never from a
// needy bucket; no bucket is asked for more than its surplus, so no transfer takes a donor
// below its own share. Shares are rounded by largest remainder, ties going to the bucket
// already holding more (no move for nothing), then to the lower bucket: the result is
// deterministic.
func rebalance(buckets []bucketLoad, lowWater int64) []bucketMove {
	var total, weights int64
	needy := false
	w := make([]int64, len(buckets))
	for b, l := range buckets {
		total += max(l.Left, 0)
		w[b] = max(l.Demand, 0) + 1
		if l.Wanted {
			w[b]++
		}
		weights += w[b]
		if l.Left < lowWater && (l.Demand > 0 || l.Wanted) {
			needy = true
		}
	}
	if !needy || total == 0 {
		return nil
	}
	share := make([]int64, len(buckets))
	rem := make([]int64, len(buckets))
	given := int64(0)
	for b := range buckets {
		share[b] = total * w[b] / weights
		rem[b] = total * w[b] % weights
		given += share[b]
	}
	order := make([]int, len(buckets))
	for b := range order {
		order[b] = b
	}
	slices.SortStableFunc(order, func(a, b int) int {
		if rem[a] != rem[b] {
			return cmpDesc(rem[a], rem[b])
		}
		return cmpDesc(buckets[a].Left, buckets[b].Left)
	})
	for i := 0; given < total; i++ {
		share[order[i%len(order)]]++
		given++
	}

	type gap struct {
		b int
		n int64
	}
	var deficits, surpluses []gap
	for b, l := range buckets {
		isNeedy := l.Left < lowWater && (l.Demand > 0 || l.Wanted)
		switch {
		case isNeedy && share[b] > l.Left:
			deficits = append(deficits, gap{b, share[b] - l.Left})
		case !isNeedy && l.Left > share[b]:
			surpluses = append(surpluses, gap{b, l.Left - share[b]})
		}
	}
	byMost := func(x, y gap) int {
		if x.n != y.n {
			return cmpDesc(x.n, y.n)
		}
		return x.b - y.b
	}
	slices.SortFunc(deficits, byMost)
	slices.SortFunc(surpluses, byMost)
	var out []bucketMove
	for i, j := 0, 0; i < len(deficits) && j < len(surpluses); {
		n := min(deficits[i].n, surpluses[j].n)
		out = append(out, bucketMove{From: surpluses[j].b, To: deficits[i].b, Units: n})
		deficits[i].n -= n
		surpluses[j].n -= n
		if deficits[i].n == 0 {
			i++
		}
		if surpluses[j].n == 0 {
			j++
		}
	}
	return out
}

func cmpDesc(a, b int64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}
