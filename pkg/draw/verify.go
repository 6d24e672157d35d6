package draw

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
)

// Verify's failures, one per property of the draw; match with errors.Is.
var (
	ErrNotDrawn   = errors.New("draw not drawn yet")
	ErrCommitment = errors.New("seed does not match the commitment")
	ErrBeacon     = errors.New("beacon does not check")
	ErrInclusion  = errors.New("entry not in the frozen set")
	ErrValue      = errors.New("ranking value does not match")
	ErrPlace      = errors.New("place does not match the ranking")
	ErrCount      = errors.New("record counts disagree")
)

// Statuses of a Standing.
const (
	StatusWon        = "won"
	StatusWaitlisted = "waitlisted"
	StatusSkipped    = "skipped"
)

// Standing is where an entrant ended up in a drawn record.
type Standing struct {
	Place            int
	Status           string // StatusWon, StatusWaitlisted or StatusSkipped
	WaitlistPosition int    // Place - Cutoff when waitlisted, else 0
}

// BeaconChecker checks a revealed beacon's signature for its round against its public key
// and returns the beacon's value. Drand is the real one.
type BeaconChecker interface {
	Check(b BeaconRef) (value []byte, err error)
}

// Verdict is what Verify established.
type Verdict struct {
	Standing Standing
	// BeaconChecked is false when Verify had no BeaconChecker and took the record's beacon
	// value on trust (or the draw had no beacon); the ranking is then only as unpredictable
	// as the operator is honest.
	BeaconChecked bool
}

// Verify checks a drawn record and one entrant's proof, in this order: the record is drawn;
// the seed matches the commitment; the beacon checks (if the record has one and beacon is
// not nil) and its value is the record's; the proof is for the record's draw; the record
// holds one ranking value per entry; the entrant's leaf is in the tree under the record's
// root; their ranking value is the HMAC of their id under the seed and beacon; the values
// are in rank order and the entrant's place holds their value; the cutoff and the skipped
// places fit the entries. Each failure wraps its sentinel.
//
// A proof taken at the freeze, without value and place, is accepted: Verify computes the
// value and finds the place. Two entrants with equal values (a 2^-256 event) share a run of
// equal values whose order is their ids'; the verifier sees no ids but the entrant's own, so
// any place within that run is accepted.
func Verify(rec Record, p Proof, beacon BeaconChecker) (Verdict, error) {
	var v Verdict
	if rec.Phase != PhaseDrawn {
		return v, fmt.Errorf("%w: phase is %q", ErrNotDrawn, rec.Phase)
	}

	seed, err := ParseSeed(rec.Seed)
	if err != nil {
		return v, fmt.Errorf("%w: %w", ErrCommitment, err)
	}
	if c := seed.Commitment(); c != rec.Commitment {
		return v, fmt.Errorf("%w: SHA-256 of the seed is %s, the commitment %s", ErrCommitment, c, rec.Commitment)
	}

	var beaconValue []byte
	if rec.Beacon != nil {
		if beaconValue, err = hex.DecodeString(rec.Beacon.Value); err != nil || len(beaconValue) == 0 {
			return v, fmt.Errorf("%w: round %d: value %q is not revealed hex", ErrBeacon, rec.Beacon.Round, rec.Beacon.Value)
		}
		if beacon != nil {
			checked, err := beacon.Check(*rec.Beacon)
			if err != nil {
				return v, fmt.Errorf("%w: round %d: %w", ErrBeacon, rec.Beacon.Round, err)
			}
			if !bytes.Equal(checked, beaconValue) {
				return v, fmt.Errorf("%w: round %d: signature gives value %x, the record says %x",
					ErrBeacon, rec.Beacon.Round, checked, beaconValue)
			}
			v.BeaconChecked = true
		}
	}

	if p.SessionID != rec.SessionID || p.PrizeID != rec.PrizeID {
		return v, fmt.Errorf("%w: proof is for draw %d/%d, the record for %d/%d",
			ErrInclusion, p.SessionID, p.PrizeID, rec.SessionID, rec.PrizeID)
	}

	if len(rec.Values) != rec.Entries {
		return v, fmt.Errorf("%w: %d ranking values for %d entries", ErrCount, len(rec.Values), rec.Entries)
	}

	if err := verifyEntry(rec, p); err != nil {
		return v, fmt.Errorf("%w: user %q: %w", ErrInclusion, p.User, err)
	}

	value := Value(Key(seed, beaconValue), p.User)
	if p.Value != "" {
		var claimed [32]byte
		if err := decodeHex(claimed[:], p.Value); err != nil {
			return v, fmt.Errorf("%w: proof's value: %w", ErrValue, err)
		}
		if claimed != value {
			return v, fmt.Errorf("%w: user %q: the seed and beacon give %x, the proof says %x", ErrValue, p.User, value, claimed)
		}
	}

	place, err := verifyPlace(rec.Values, value, p.Place)
	if err != nil {
		return v, fmt.Errorf("%w: user %q: %w", ErrPlace, p.User, err)
	}

	if rec.Cutoff < 0 || rec.Cutoff > rec.Entries {
		return v, fmt.Errorf("%w: cutoff %d outside 0..%d entries", ErrCount, rec.Cutoff, rec.Entries)
	}
	skipped := false
	for i, s := range rec.Skipped {
		if s < 1 || s > rec.Cutoff {
			return v, fmt.Errorf("%w: skipped place %d outside 1..%d (the cutoff)", ErrPlace, s, rec.Cutoff)
		}
		if i > 0 && s <= rec.Skipped[i-1] {
			return v, fmt.Errorf("%w: skipped places not ascending: %d after %d", ErrPlace, s, rec.Skipped[i-1])
		}
		skipped = skipped || s == place
	}

	v.Standing = Standing{Place: place}
	switch {
	case skipped:
		v.Standing.Status = StatusSkipped
	case place <= rec.Cutoff:
		v.Standing.Status = StatusWon
	default:
		v.Standing.Status = StatusWaitlisted
		v.Standing.WaitlistPosition = place - rec.Cutoff
	}
	return v, nil
}

// verifyEntry recomputes the proof's leaf and checks it is included under the record's root.
func verifyEntry(rec Record, p Proof) error {
	if err := ValidUser(p.User); err != nil {
		return err
	}
	salt, err := ParseSalt(p.Salt)
	if err != nil {
		return err
	}
	var root [32]byte
	if err := decodeHex(root[:], rec.Root); err != nil {
		return fmt.Errorf("record's merkle root: %w", err)
	}
	path := make([][32]byte, len(p.Path))
	for i, h := range p.Path {
		if err := decodeHex(path[i][:], h); err != nil {
			return fmt.Errorf("path element %d: %w", i, err)
		}
	}
	leaf := LeafHash(rec.SessionID, rec.PrizeID, Entry{User: p.User, Salt: salt})
	return VerifyInclusion(leaf, p.Index, rec.Entries, path, root)
}

// verifyPlace checks that values are in rank order and that place (1-based) holds value; with
// place 0 it finds the first place that does. It returns the place.
func verifyPlace(values []string, value [32]byte, place int) (int, error) {
	if place < 0 || place > len(values) {
		return 0, fmt.Errorf("place %d outside 1..%d", place, len(values))
	}
	found := 0
	var prev [32]byte
	for i, h := range values {
		var cur [32]byte
		if err := decodeHex(cur[:], h); err != nil {
			return 0, fmt.Errorf("ranking value at place %d: %w", i+1, err)
		}
		if i > 0 && bytes.Compare(prev[:], cur[:]) > 0 {
			return 0, fmt.Errorf("ranking values out of order at place %d: %x after %x", i+1, cur, prev)
		}
		if found == 0 && cur == value {
			found = i + 1
		}
		prev = cur
	}
	if found == 0 {
		return 0, fmt.Errorf("value %x is not among the ranking values", value)
	}
	if place == 0 {
		return found, nil
	}
	var at [32]byte
	_ = decodeHex(at[:], values[place-1]) // decoded once above without error
	if at != value {
		return 0, fmt.Errorf("place %d holds %x, the entrant's value %x is first at place %d", place, at, value, found)
	}
	return place, nil
}
