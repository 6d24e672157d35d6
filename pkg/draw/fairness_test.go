package draw

import (
	"crypto/sha256"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// The fairness test simulates a sale whose entrants differ in everything a first-come race
// rewards, and checks that the draw gives every kind of entrant the same chance.

const (
	fairUnits = 400
	fairDraws = 30
	// z999 is the two-sided 99.9 % quantile of the standard normal: the check uses the
	// normal approximation to the binomial. Within one draw the 400 winners are drawn
	// without replacement (hypergeometric), whose variance is a little smaller, so the
	// binomial interval is, if anything, loose on the side of not crying wolf.
	z999 = 3.2905
)

type entrantClass string

const (
	classEarly    entrantClass = "early"    // entered within the first 100 ms
	classRepeat   entrantClass = "repeat"   // entered 20 times from many connections in the first second
	classFast     entrantClass = "fast"     // lowest latency: arrives first
	classOrdinary entrantClass = "ordinary" // one entry, any time in the window
)

var classSizes = map[entrantClass]int{classEarly: 500, classRepeat: 500, classFast: 500, classOrdinary: 2500}

// sale is the simulated entry window's outcome.
type sale struct {
	class   map[string]entrantClass
	arrival []string // distinct users in the order their first entry arrived
	entries []Entry  // the frozen set: one entry per user, in arrival order
	sent    int      // entry requests, repeats included
}

// simulateSale lets 4,000 entrants send their entries into a 10 s window. The entry set keeps a
// user's first entry only, so repeats and speed buy an early arrival, which first come, first
// served would reward, and nothing else.
func simulateSale(tb testing.TB) sale {
	tb.Helper()
	rng := mrand.New(mrand.NewPCG(20261206, 4000))
	const window = 10 * time.Second
	type request struct {
		at   time.Duration
		user string
	}
	var reqs []request
	s := sale{class: map[string]entrantClass{}}
	for _, c := range []entrantClass{classEarly, classRepeat, classFast, classOrdinary} {
		for i := range classSizes[c] {
			u := fmt.Sprintf("%s-%04d", c, i)
			s.class[u] = c
			switch c {
			case classFast:
				reqs = append(reqs, request{after(rng, 20*time.Millisecond), u})
			case classEarly:
				reqs = append(reqs, request{after(rng, 100*time.Millisecond), u})
			case classRepeat:
				for range 20 {
					// A burst in the first second: a bot pool hammering the opening.
					reqs = append(reqs, request{after(rng, time.Second), u})
				}
			case classOrdinary:
				reqs = append(reqs, request{100*time.Millisecond + after(rng, window-100*time.Millisecond), u})
			}
		}
	}
	slices.SortStableFunc(reqs, func(a, b request) int { return int(a.at - b.at) })
	seen := map[string]bool{}
	for _, r := range reqs {
		s.sent++
		if seen[r.user] {
			continue
		}
		seen[r.user] = true
		s.arrival = append(s.arrival, r.user)
		var salt Salt
		for i := range salt {
			salt[i] = byte(rng.Uint32())
		}
		s.entries = append(s.entries, Entry{User: r.user, Salt: salt})
	}
	return s
}

// after is a uniform duration in [0, d).
func after(rng *mrand.Rand, d time.Duration) time.Duration {
	return time.Duration(rng.Int64N(int64(d)))
}

// countWinners adds the first units of order to wins by class, refusing a user who wins twice.
func countWinners(order []string, units int, class map[string]entrantClass, wins map[entrantClass]int) error {
	won := make(map[string]bool, units)
	for _, u := range order[:units] {
		if won[u] {
			return fmt.Errorf("user %s wins twice in one draw", u)
		}
		won[u] = true
		wins[class[u]]++
	}
	return nil
}

// checkFair reports every class whose win rate over draws lies outside the 99.9 % interval of
// the uniform rate units/entrants.
func checkFair(wins map[entrantClass]int, draws, units, entrants int) error {
	p := float64(units) / float64(entrants)
	var unfair []string
	for c, size := range classSizes {
		n := float64(size * draws)
		rate := float64(wins[c]) / n
		half := z999 * math.Sqrt(p*(1-p)/n)
		if math.Abs(rate-p) > half {
			unfair = append(unfair, fmt.Sprintf("%s won %.4f of its entrants' chances, outside %.4f ± %.4f", c, rate, p, half))
		}
	}
	if len(unfair) > 0 {
		slices.Sort(unfair)
		return fmt.Errorf("unfair: %s", strings.Join(unfair, "; "))
	}
	return nil
}

func TestDrawIsFair(t *testing.T) {
	s := simulateSale(t)
	if len(s.entries) != 4000 || s.sent != 4000+19*classSizes[classRepeat] {
		t.Fatalf("%d entries from %d requests", len(s.entries), s.sent)
	}
	tr, err := Freeze(1, 1, s.entries)
	if err != nil {
		t.Fatal(err)
	}
	wins := map[entrantClass]int{}
	for d := range fairDraws {
		seed := Seed(sha256.Sum256([]byte(fmt.Sprint("fairness seed ", d))))
		beacon := sha256.Sum256([]byte(fmt.Sprint("fairness beacon ", d)))
		ranked := Rank(Key(seed, beacon[:]), tr.Users())
		order := make([]string, len(ranked))
		for i, r := range ranked {
			order[i] = r.User
		}
		if err := countWinners(order, fairUnits, s.class, wins); err != nil {
			t.Fatalf("draw %d: %v", d, err)
		}
	}
	if err := checkFair(wins, fairDraws, fairUnits, len(s.entries)); err != nil {
		t.Error(err)
	}
	t.Logf("wins over %d draws: %v", fairDraws, wins)
}

// The control: first come, first served on the same sale must fail the same check, or the
// check proves nothing.
func TestFirstComeFirstServedIsCaught(t *testing.T) {
	s := simulateSale(t)
	wins := map[entrantClass]int{}
	for range fairDraws {
		if err := countWinners(s.arrival, fairUnits, s.class, wins); err != nil {
			t.Fatal(err)
		}
	}
	err := checkFair(wins, fairDraws, fairUnits, len(s.entries))
	if err == nil {
		t.Fatalf("first come, first served passed the fairness check: wins %v", wins)
	}
	t.Logf("caught: %v", err)

	// And a ranking that lists a user twice is caught too.
	twice := append([]string{s.arrival[0]}, s.arrival...)
	if err := countWinners(twice, fairUnits, s.class, map[entrantClass]int{}); err == nil {
		t.Error("a user winning twice in one draw went unnoticed")
	}
}
