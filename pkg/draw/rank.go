package draw

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"slices"
)

// Key is the ranking key of a draw: the concatenation seed ‖ beacon value (the seed alone when
// there is no beacon). The seed, committed before entries open, keeps anyone but the operator
// from computing the ranking; the beacon value, unknown to everyone until after the freeze,
// keeps the operator from knowing it while the entry set can still change.
func Key(seed Seed, beaconValue []byte) []byte {
	k := make([]byte, 0, len(seed)+len(beaconValue))
	k = append(k, seed[:]...)
	return append(k, beaconValue...)
}

// Value is user's ranking value under key: HMAC-SHA256(key, user). Lower ranks first.
func Value(key []byte, user string) [32]byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(user))
	var v [32]byte
	m.Sum(v[:0])
	return v
}

// Ranked is one entrant's place in a draw.
type Ranked struct {
	User  string
	Value [32]byte
	Place int // 1-based
}

// Rank ranks users, the frozen set's distinct user ids, by Value under key, ascending. A
// duplicate id is ranked once: an entrant's chance must not grow with the number of times
// their id appears. The result depends only on key and the set of ids, not on their order.
func Rank(key []byte, users []string) []Ranked {
	seen := make(map[string]struct{}, len(users))
	r := make([]Ranked, 0, len(users))
	for _, u := range users {
		if _, dup := seen[u]; dup {
			continue
		}
		seen[u] = struct{}{}
		r = append(r, Ranked{User: u, Value: Value(key, u)})
	}
	slices.SortFunc(r, func(a, b Ranked) int {
		if Less(a, b) {
			return -1
		}
		if Less(b, a) {
			return 1
		}
		return 0
	})
	for i := range r {
		r[i].Place = i + 1
	}
	return r
}

// Less is the draw's order: Value ascending (bytewise), then, for equal values, user id
// ascending (bytewise). Two 256-bit HMAC values are equal with negligible probability; the
// tie-break only makes the order total, so the ranking is a function of the set alone.
func Less(a, b Ranked) bool {
	if c := bytes.Compare(a.Value[:], b.Value[:]); c != 0 {
		return c < 0
	}
	return a.User < b.User
}
