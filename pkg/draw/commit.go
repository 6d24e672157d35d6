// Package draw is the fair sale's draw: for a prize whose units are given by a draw instead of
// first come, first served, it holds the commitment to a secret seed, the frozen entry set (a
// Merkle tree over salted entries), the ranking keyed by the seed and a public beacon, the
// public record and an entrant's proof, and the verifier anyone can run on them. It is pure
// logic: the gateway, the reconciler and verify-draw do the I/O and call it.
package draw

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
)

// Seed is the operator's secret for one draw. Its commitment is published before entries
// open and the seed itself only after the entry set is frozen, so the operator cannot pick a
// seed that favours an entrant it already knows, and nobody can predict the ranking early.
type Seed [32]byte

// NewSeed reads a seed from r; callers pass crypto/rand.Reader.
func NewSeed(r io.Reader) (Seed, error) {
	var s Seed
	if _, err := io.ReadFull(r, s[:]); err != nil {
		return Seed{}, fmt.Errorf("read draw seed: %w", err)
	}
	return s, nil
}

// Commitment is the lowercase hex SHA-256 of the seed, the value published before the draw.
// A 256-bit random seed needs no extra blinding: the hash is preimage resistant on its own.
func (s Seed) Commitment() string {
	sum := sha256.Sum256(s[:])
	return hex.EncodeToString(sum[:])
}

// String is the seed in lowercase hex, the form revealed in the record.
func (s Seed) String() string { return hex.EncodeToString(s[:]) }

// ParseSeed reads a seed written by String: exactly 64 hex digits.
func ParseSeed(h string) (Seed, error) {
	var s Seed
	if err := decodeHex(s[:], h); err != nil {
		return Seed{}, fmt.Errorf("parse seed: %w", err)
	}
	return s, nil
}

// decodeHex fills dst from exactly 2*len(dst) hex digits of h.
func decodeHex(dst []byte, h string) error {
	if len(h) != 2*len(dst) {
		return fmt.Errorf("want %d hex digits, got %d characters", 2*len(dst), len(h))
	}
	if _, err := hex.Decode(dst, []byte(h)); err != nil {
		return fmt.Errorf("not hex: %w", err)
	}
	return nil
}
