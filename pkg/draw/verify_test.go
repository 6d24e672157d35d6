package draw

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// honestDraw runs a draw the way the gateway and reconciler will: commit, freeze, reveal,
// rank. It returns the public record and the tree the proofs come from.
func honestDraw(tb testing.TB, entries []Entry, seed Seed, lb *LocalBeacon, cutoff int, skipped []int) (Record, *Tree) {
	tb.Helper()
	const session, prize, round = 11, 22, 5000
	rec := Record{SessionID: session, PrizeID: prize, Phase: PhaseCommitted, Commitment: seed.Commitment(),
		EntryWindowEnd: time.Date(2026, 12, 6, 20, 0, 0, 0, time.UTC)}
	ref := lb.Ref(round)
	rec.Beacon = &ref

	tr, err := Freeze(session, prize, entries)
	if err != nil {
		tb.Fatal(err)
	}
	root := tr.Root()
	rec.Phase, rec.Entries, rec.Root = PhaseFrozen, tr.Size(), hex.EncodeToString(root[:])

	signed, err := lb.Sign(round)
	if err != nil {
		tb.Fatal(err)
	}
	beaconValue, _ := hex.DecodeString(signed.Value)
	ranked := Rank(Key(seed, beaconValue), tr.Users())
	rec.Phase, rec.Beacon, rec.Seed = PhaseDrawn, &signed, seed.String()
	rec.Values, rec.Cutoff, rec.Skipped = RankingValues(ranked), cutoff, skipped
	return rec, tr
}

// drawnProof is user's proof as the gateway serves it after the draw.
func drawnProof(tb testing.TB, rec Record, tr *Tree, user string) Proof {
	tb.Helper()
	p, ok := tr.ProofOf(user)
	if !ok {
		tb.Fatalf("no proof for %s", user)
	}
	seed, _ := ParseSeed(rec.Seed)
	bv, _ := hex.DecodeString(rec.Beacon.Value)
	v := Value(Key(seed, bv), user)
	p.Value = hex.EncodeToString(v[:])
	p.Place = slices.Index(rec.Values, p.Value) + 1
	return p
}

func testBeacon(tb testing.TB) (*LocalBeacon, *Drand) {
	tb.Helper()
	lb, err := NewLocalBeacon(fixedReader(7))
	if err != nil {
		tb.Fatal(err)
	}
	ref := lb.Ref(0)
	d, err := NewDrand(ref.Scheme, ref.PublicKey)
	if err != nil {
		tb.Fatal(err)
	}
	return lb, d
}

func TestVerifyHonestDraw(t *testing.T) {
	lb, d := testBeacon(t)
	entries := testEntries(t, 50)
	rec, tr := honestDraw(t, entries, Seed{1}, lb, 10, []int{4})

	// The record and proofs travel as JSON: verify what a reader would parse.
	raw, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	var parsed Record
	if err := json.Unmarshal(raw, &parsed); err != nil {
		t.Fatal(err)
	}

	won, waitlisted, skipped := 0, 0, 0
	for _, e := range entries {
		p := drawnProof(t, rec, tr, e.User)
		raw, _ := json.Marshal(p)
		var pp Proof
		if err := json.Unmarshal(raw, &pp); err != nil {
			t.Fatal(err)
		}
		v, err := Verify(parsed, pp, d)
		if err != nil {
			t.Fatalf("%s: %v", e.User, err)
		}
		if !v.BeaconChecked {
			t.Errorf("%s: beacon not checked though a checker was given", e.User)
		}
		want := Standing{Place: p.Place, Status: StatusWaitlisted, WaitlistPosition: p.Place - 10}
		switch {
		case p.Place == 4:
			want = Standing{Place: 4, Status: StatusSkipped}
			skipped++
		case p.Place <= 10:
			want = Standing{Place: p.Place, Status: StatusWon}
			won++
		default:
			waitlisted++
		}
		if v.Standing != want {
			t.Errorf("%s: standing %+v, want %+v", e.User, v.Standing, want)
		}

		// A proof kept from the freeze, without value and place, reaches the same standing.
		frozen, _ := tr.ProofOf(e.User)
		if v2, err := Verify(rec, frozen, d); err != nil || v2.Standing != want {
			t.Errorf("%s: freeze-time proof: %+v, %v", e.User, v2.Standing, err)
		}
		// Without a checker the beacon is taken on trust, and the verdict says so.
		if v3, err := Verify(rec, p, nil); err != nil || v3.BeaconChecked || v3.Standing != want {
			t.Errorf("%s: without a checker: %+v, %v", e.User, v3, err)
		}
	}
	if won != 9 || skipped != 1 || waitlisted != 40 {
		t.Errorf("won %d, skipped %d, waitlisted %d; want 9, 1, 40", won, skipped, waitlisted)
	}
}

func TestVerifyCatchesTampering(t *testing.T) {
	lb, d := testBeacon(t)
	entries := testEntries(t, 50)
	seed := Seed{1}
	rec, tr := honestDraw(t, entries, seed, lb, 10, []int{4})
	victim := entries[17].User
	proof := drawnProof(t, rec, tr, victim)

	// The operator drops the victim's entry and redraws without it.
	var without []Entry
	for _, e := range entries {
		if e.User != victim {
			without = append(without, e)
		}
	}
	dropped, _ := honestDraw(t, without, seed, lb, 10, []int{4})
	staleCount := dropped
	staleCount.Entries = rec.Entries

	otherSeed := rec
	otherSeed.Seed = Seed{2}.String()

	swapped := rec
	swapped.Values = slices.Clone(rec.Values)
	a, b := proof.Place-1, proof.Place // swap the victim's value with the next one
	if b == len(swapped.Values) {
		a, b = a-1, a
	}
	swapped.Values[a], swapped.Values[b] = swapped.Values[b], swapped.Values[a]

	sig43, _ := lb.Sign(5001)
	badSig := rec
	badBeacon := *rec.Beacon
	badBeacon.Signature, badBeacon.Value = sig43.Signature, sig43.Value
	badSig.Beacon = &badBeacon

	wrongValue := rec
	wrongValueBeacon := *rec.Beacon
	wrongValueBeacon.Value = sig43.Value
	wrongValue.Beacon = &wrongValueBeacon

	frozen := rec
	frozen.Phase = PhaseFrozen

	otherPrize := proof
	otherPrize.PrizeID++

	claimsBetter := proof
	claimsBetter.Value = rec.Values[0]
	if claimsBetter.Value == proof.Value {
		claimsBetter.Value = rec.Values[1]
	}

	wrongPlace := proof
	wrongPlace.Place = proof.Place%len(rec.Values) + 1

	bigCutoff := rec
	bigCutoff.Cutoff = rec.Entries + 1

	skipOutside := rec
	skipOutside.Skipped = []int{4, 11}

	skipUnsorted := rec
	skipUnsorted.Skipped = []int{5, 4}

	otherSalt := proof
	otherSalt.Salt = Salt{0xee}.String()

	cases := []struct {
		name    string
		rec     Record
		proof   Proof
		checker BeaconChecker
		want    error
	}{
		{"dropped entry", dropped, proof, d, ErrInclusion},
		{"dropped entry, count not updated", staleCount, proof, d, ErrCount},
		{"changed seed", otherSeed, proof, d, ErrCommitment},
		{"changed value order", swapped, proof, d, ErrPlace},
		{"wrong beacon signature", badSig, proof, d, ErrBeacon},
		{"beacon value not the signature's", wrongValue, proof, d, ErrBeacon},
		{"beacon value unchecked and wrong", wrongValue, proof, nil, ErrValue},
		{"not drawn", frozen, proof, d, ErrNotDrawn},
		{"proof of another prize", rec, otherPrize, d, ErrInclusion},
		{"another salt", rec, otherSalt, d, ErrInclusion},
		{"a better value claimed", rec, claimsBetter, d, ErrValue},
		{"wrong place", rec, wrongPlace, d, ErrPlace},
		{"cutoff beyond the entries", bigCutoff, proof, d, ErrCount},
		{"skipped place beyond the cutoff", skipOutside, proof, d, ErrPlace},
		{"skipped places unsorted", skipUnsorted, proof, d, ErrPlace},
	}
	sentinels := []error{ErrNotDrawn, ErrCommitment, ErrBeacon, ErrInclusion, ErrValue, ErrPlace, ErrCount}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Verify(tc.rec, tc.proof, tc.checker)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Verify: %v, want %v", err, tc.want)
			}
			for _, s := range sentinels {
				if s != tc.want && errors.Is(err, s) {
					t.Errorf("error %v also matches %v", err, s)
				}
			}
		})
	}
}

func TestVerifyWithoutBeacon(t *testing.T) {
	entries := testEntries(t, 5)
	seed := Seed{3}
	tr, err := Freeze(1, 2, entries)
	if err != nil {
		t.Fatal(err)
	}
	root := tr.Root()
	ranked := Rank(Key(seed, nil), tr.Users())
	rec := Record{SessionID: 1, PrizeID: 2, Phase: PhaseDrawn, Commitment: seed.Commitment(), Entries: 5,
		Root: hex.EncodeToString(root[:]), Seed: seed.String(), Values: RankingValues(ranked), Cutoff: 2}
	for _, r := range ranked {
		p, _ := tr.ProofOf(r.User)
		v, err := Verify(rec, p, nil)
		if err != nil || v.Standing.Place != r.Place || v.BeaconChecked {
			t.Errorf("%s: %+v, %v; want place %d", r.User, v, err, r.Place)
		}
	}
}

func ExampleVerify() {
	lb, _ := NewLocalBeacon(fixedReader(7))
	seed := Seed{1}
	entries := []Entry{{User: "alice"}, {User: "bob"}, {User: "carol"}}
	tr, _ := Freeze(1, 1, entries)
	signed, _ := lb.Sign(10)
	bv, _ := hex.DecodeString(signed.Value)
	root := tr.Root()
	rec := Record{SessionID: 1, PrizeID: 1, Phase: PhaseDrawn, Commitment: seed.Commitment(), Beacon: &signed,
		Entries: tr.Size(), Root: hex.EncodeToString(root[:]), Seed: seed.String(),
		Values: RankingValues(Rank(Key(seed, bv), tr.Users())), Cutoff: 1}
	d, _ := NewDrand(signed.Scheme, signed.PublicKey)
	for _, u := range []string{"alice", "bob", "carol"} {
		p, _ := tr.ProofOf(u)
		v, err := Verify(rec, p, d)
		fmt.Println(u, v.Standing.Status, v.BeaconChecked, err)
	}
	// Output:
	// alice won true <nil>
	// bob waitlisted true <nil>
	// carol waitlisted true <nil>
}
