package harness

import (
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/stock"
)

// The skewed crowd: the same key always goes to the same user (a repeat click must not
// become another user's key), half the bucketed prize's clicks land on users homed in
// bucket 0, and the other prizes' clicks are untouched.
func TestSkewToBucketZero(t *testing.T) {
	const users, n = 500, 4
	plain := Plan(7, 4000, users, 3, 0.2)
	clicks := append([]Click(nil), plain...)
	skewToBucketZero(clicks, n, users, 7)
	byKey := map[string]int{}
	home0, onPrize := 0, 0
	for i, k := range clicks {
		if u, ok := byKey[k.Key]; ok && u != k.User {
			t.Fatalf("key %s clicked by users %d and %d", k.Key, u, k.User)
		}
		byKey[k.Key] = k.User
		if k.Prize != bucketedPrize {
			if k != plain[i] {
				t.Fatalf("click %d on prize %d changed: %+v -> %+v", i, k.Prize, plain[i], k)
			}
			continue
		}
		onPrize++
		if stock.HomeBucket(userName(k.User), n) == 0 {
			home0++
		}
	}
	// Uniform users put a quarter in bucket 0; the skew sends about half more there.
	if share := float64(home0) / float64(onPrize); share < 0.55 || share > 0.7 {
		t.Fatalf("%d of %d clicks on the bucketed prize from bucket 0's users (%.2f), want about 0.62", home0, onPrize, share)
	}
}

// The sold_out column's rule (docs/design.md): an answer is wrong when units it could have
// had were sold after it or are left at the end, unless they came back after the gateway's
// read of the buckets (at most W before the request was sent).
func TestSoldOutsWhileUnitsRemained(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	out := func(sent, answered int) Answer { return Answer{Sent: at(sent), At: at(answered)} }
	const w = 100 * time.Millisecond
	tests := []struct {
		name     string
		outs     []Answer
		left     int
		admitted []time.Time
		back     []unitsBack
		early    int
		worst    int
	}{
		{"sold out for good", []Answer{out(1000, 1005)}, 0, []time.Time{at(10), at(990)}, nil, 0, 0},
		{"a unit left at the end", []Answer{out(1000, 1005)}, 1, nil, nil, 1, 1},
		{"a unit sold after the answer", []Answer{out(1000, 1005)}, 0, []time.Time{at(1200)}, nil, 1, 1},
		{"admitted while the answer was on its way", []Answer{out(1000, 1005)}, 0, []time.Time{at(1003)}, nil, 0, 0},
		{"a return later, resold", []Answer{out(1000, 1005)}, 0, []time.Time{at(1200)}, []unitsBack{{at(1100), 1}}, 0, 0},
		{"a return later, left", []Answer{out(1000, 1005)}, 1, nil, []unitsBack{{at(1100), 1}}, 0, 0},
		{"a return within the cache window", []Answer{out(1000, 1005)}, 1, nil, []unitsBack{{at(950), 1}}, 0, 0},
		{"a return before the window", []Answer{out(1000, 1005)}, 1, nil, []unitsBack{{at(850), 1}}, 1, 1},
		{"drift gave two back later", []Answer{out(1000, 1005)}, 1, []time.Time{at(1500)}, []unitsBack{{at(1400), 2}}, 0, 0},
		{"two answers, one wrong", []Answer{out(1000, 1005), out(2000, 2004)}, 0, []time.Time{at(1500), at(1600)}, []unitsBack{{at(1450), 1}}, 1, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			early, worst, _ := soldOutsWhileUnitsRemained(tc.outs, tc.left, tc.admitted, tc.back, w)
			if early != tc.early || worst != tc.worst {
				t.Fatalf("early %d worst %d, want %d and %d", early, worst, tc.early, tc.worst)
			}
		})
	}
}
