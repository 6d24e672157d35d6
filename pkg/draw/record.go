package draw

import (
	"encoding/hex"
	"time"
)

// Phase is how far a draw has gone; each phase adds fields to its Record.
type Phase string

// Phases, in order.
const (
	PhaseCommitted Phase = "committed" // the seed's commitment and the beacon round are public
	PhaseFrozen    Phase = "frozen"    // entries closed: the entry count and Merkle root are public
	PhaseDrawn     Phase = "drawn"     // the seed, the beacon and every ranking value are public
)

// BeaconRef names the public randomness a draw waits for: a drand round that is produced only
// after the entry window ends, so nobody, the operator included, knows it before the freeze.
type BeaconRef struct {
	Scheme    string `json:"scheme"`
	PublicKey string `json:"public_key"`
	Round     uint64 `json:"round"`
	Signature string `json:"signature,omitempty"` // filled at the reveal
	Value     string `json:"value,omitempty"`     // SHA-256 of the signature, filled at the reveal
}

// Record is a draw's public record: published at the commitment and extended at the freeze and
// the reveal. With an entrant's Proof it is all Verify needs.
type Record struct {
	SessionID      int64      `json:"session_id"`
	PrizeID        int64      `json:"prize_id"`
	Phase          Phase      `json:"phase"`
	Commitment     string     `json:"commitment"` // hex SHA-256 of the seed
	EntryWindowEnd time.Time  `json:"entry_window_end"`
	Beacon         *BeaconRef `json:"beacon,omitempty"`
	Entries        int        `json:"entries"`               // from the freeze on
	Root           string     `json:"merkle_root,omitempty"` // from the freeze on
	// FrozenAt is when the entry set was frozen: with a beacon, anyone can check it came
	// before the committed round was published.
	FrozenAt *time.Time `json:"frozen_at,omitempty"`
	Seed     string     `json:"seed,omitempty"` // revealed
	// Values are every entry's ranking value in rank order. Publishing them all lets each
	// entrant check that their place is the count of values below theirs, without learning
	// whose the other values are.
	Values []string `json:"ranking_values,omitempty"`
	Cutoff int      `json:"cutoff"` // places 1..Cutoff have been offered a unit, in rank order
	// Skipped are places within the cutoff whose admission the stock gate refused (the
	// per-user limit, say), ascending; their units went to the next places.
	Skipped []int `json:"skipped_places,omitempty"`
}

// Proof is one entrant's evidence: their entry and its audit path in the frozen tree, and,
// once drawn, their ranking value and place.
type Proof struct {
	SessionID int64    `json:"session_id"`
	PrizeID   int64    `json:"prize_id"`
	User      string   `json:"user_id"`
	Salt      string   `json:"salt"`
	Index     int      `json:"leaf_index"`
	Path      []string `json:"path"`
	Value     string   `json:"ranking_value,omitempty"`
	Place     int      `json:"place,omitempty"`
}

// ProofOf is the inclusion part of user's proof (no value or place), and whether user entered.
func (t *Tree) ProofOf(user string) (Proof, bool) {
	i, ok := t.index[user]
	if !ok {
		return Proof{}, false
	}
	path := t.Proof(i)
	hexPath := make([]string, len(path))
	for j, p := range path {
		hexPath[j] = hex.EncodeToString(p[:])
	}
	return Proof{SessionID: t.sessionID, PrizeID: t.prizeID, User: user,
		Salt: t.entries[i].Salt.String(), Index: i, Path: hexPath}, true
}

// RankingValues are the Values of a record for ranking r, in r's order, in lowercase hex.
func RankingValues(r []Ranked) []string {
	v := make([]string, len(r))
	for i, x := range r {
		v[i] = hex.EncodeToString(x.Value[:])
	}
	return v
}
