package draw

import (
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestValueIsHMAC(t *testing.T) {
	key := Key(Seed{1, 2, 3}, []byte("beacon"))
	for _, u := range []string{"alice", "bob", "u-0001"} {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(u))
		if got := Value(key, u); !hmac.Equal(got[:], m.Sum(nil)) {
			t.Errorf("Value(%s) = %x, want HMAC-SHA256 %x", u, got, m.Sum(nil))
		}
	}
}

func TestKey(t *testing.T) {
	seed := Seed{0: 7, 31: 9}
	if got := Key(seed, nil); string(got) != string(seed[:]) {
		t.Errorf("Key without beacon = %x, want the seed", got)
	}
	if got := Key(seed, []byte{0xab, 0xcd}); string(got) != string(seed[:])+"\xab\xcd" {
		t.Errorf("Key = %x, want seed ‖ beacon", got)
	}
}

func TestRankIndependentOfOrder(t *testing.T) {
	key := Key(Seed{42}, nil)
	users := make([]string, 200)
	for i := range users {
		users[i] = fmt.Sprintf("user-%d", i)
	}
	want := Rank(key, users)
	if len(want) != len(users) {
		t.Fatalf("%d ranked of %d users", len(want), len(users))
	}
	for i, r := range want {
		if r.Place != i+1 || r.Value != Value(key, r.User) {
			t.Fatalf("ranked[%d] = place %d value %x", i, r.Place, r.Value)
		}
		if i > 0 && !Less(want[i-1], r) {
			t.Fatalf("places %d and %d out of order", i, i+1)
		}
	}
	rng := mrand.New(mrand.NewPCG(1, 2))
	for range 20 {
		shuffled := slices.Clone(users)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if got := Rank(key, shuffled); !slices.Equal(got, want) {
			t.Fatal("ranking depends on the input order")
		}
	}
	// Another key, another order: the ranking is the key's, not the ids'.
	if other := Rank(Key(Seed{43}, nil), users); slices.Equal(other, want) {
		t.Error("two seeds gave the same ranking")
	}
}

func TestRankDropsDuplicates(t *testing.T) {
	key := Key(Seed{5}, nil)
	got := Rank(key, []string{"a", "b", "a", "c", "b", "a"})
	want := Rank(key, []string{"c", "b", "a"})
	if !slices.Equal(got, want) || len(got) != 3 {
		t.Errorf("Rank with duplicates = %v, want %v", got, want)
	}
}

func TestLessBreaksTiesByUser(t *testing.T) {
	v := [32]byte{9}
	cases := []struct {
		a, b Ranked
		want bool
	}{
		{Ranked{User: "b", Value: [32]byte{1}}, Ranked{User: "a", Value: [32]byte{2}}, true},
		{Ranked{User: "a", Value: [32]byte{2}}, Ranked{User: "b", Value: [32]byte{1}}, false},
		{Ranked{User: "a", Value: v}, Ranked{User: "b", Value: v}, true},
		{Ranked{User: "b", Value: v}, Ranked{User: "a", Value: v}, false},
		{Ranked{User: "B", Value: v}, Ranked{User: "a", Value: v}, true}, // bytewise: 'B' < 'a'
		{Ranked{User: "a", Value: v}, Ranked{User: "a", Value: v}, false},
	}
	for _, tc := range cases {
		if got := Less(tc.a, tc.b); got != tc.want {
			t.Errorf("Less(%s %x, %s %x) = %v", tc.a.User, tc.a.Value[:1], tc.b.User, tc.b.Value[:1], got)
		}
	}
}

func TestSeed(t *testing.T) {
	s, err := NewSeed(strings.NewReader(strings.Repeat("s", 32)))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(s[:])
	if s.Commitment() != fmt.Sprintf("%x", sum) {
		t.Errorf("Commitment = %s, want %x", s.Commitment(), sum)
	}
	if s.String() != strings.Repeat("73", 32) {
		t.Errorf("String = %s", s)
	}
	if got, err := ParseSeed(s.String()); err != nil || got != s {
		t.Errorf("ParseSeed(String) = %v, %v", got, err)
	}
	for _, bad := range []string{"", strings.Repeat("0", 63), strings.Repeat("0", 65), strings.Repeat("x", 64)} {
		if _, err := ParseSeed(bad); err == nil {
			t.Errorf("ParseSeed(%q) accepted", bad)
		}
	}
	if _, err := NewSeed(strings.NewReader("short")); err == nil {
		t.Error("NewSeed accepted a short read")
	}
}
