package draw

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// MaxUserLen bounds a user id in the entry set.
const MaxUserLen = 64

// leafDomain versions the leaf encoding: a change to it must not yield leaves that collide
// with today's.
const leafDomain = "seckill-draw-entry/v1"

// Salt is an entry's secret, given only to its entrant.
type Salt [16]byte

// NewSalt reads a salt from r; callers pass crypto/rand.Reader.
func NewSalt(r io.Reader) (Salt, error) {
	var s Salt
	if _, err := io.ReadFull(r, s[:]); err != nil {
		return Salt{}, fmt.Errorf("read entry salt: %w", err)
	}
	return s, nil
}

// String is the salt in lowercase hex.
func (s Salt) String() string { return hex.EncodeToString(s[:]) }

// ParseSalt reads a salt written by String: exactly 32 hex digits.
func ParseSalt(h string) (Salt, error) {
	var s Salt
	if err := decodeHex(s[:], h); err != nil {
		return Salt{}, fmt.Errorf("parse salt: %w", err)
	}
	return s, nil
}

// Entry is one entrant in the frozen set.
type Entry struct {
	User string
	Salt Salt
}

// LeafHash is the RFC 9162 leaf hash of e in the draw of sessionID×prizeID:
// SHA-256(0x00 ‖ "seckill-draw-entry/v1" ‖ 0x00 ‖ session ‖ 0x00 ‖ prize ‖ 0x00 ‖ user ‖ 0x00 ‖ salt),
// session and prize in decimal, the salt as its 16 raw bytes. User ids hold no NUL, so the
// fields split one way only.
//
// The salt is why a proof leaks nothing: every proof carries sibling hashes of other
// entrants' leaves, and without a secret in each leaf anyone holding a proof could hash a
// guessed user id and test whether that user entered. The session and prize bind a leaf to
// one draw, so a proof cannot be replayed against another draw's root.
func LeafHash(sessionID, prizeID int64, e Entry) [32]byte {
	h := sha256.New()
	h.Write([]byte{0x00})
	h.Write([]byte(leafDomain))
	h.Write([]byte{0})
	h.Write([]byte(strconv.FormatInt(sessionID, 10)))
	h.Write([]byte{0})
	h.Write([]byte(strconv.FormatInt(prizeID, 10)))
	h.Write([]byte{0})
	h.Write([]byte(e.User))
	h.Write([]byte{0})
	h.Write(e.Salt[:])
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

// nodeHash is an RFC 9162 interior node: SHA-256(0x01 ‖ left ‖ right).
func nodeHash(left, right [32]byte) [32]byte {
	var buf [1 + 64]byte
	buf[0] = 0x01
	copy(buf[1:], left[:])
	copy(buf[33:], right[:])
	return sha256.Sum256(buf[:])
}

// ValidUser reports why u cannot be a user id in the entry set, or nil if it can.
func ValidUser(u string) error {
	switch {
	case u == "":
		return errors.New("empty user id")
	case len(u) > MaxUserLen:
		return fmt.Errorf("user id of %d bytes, longer than %d", len(u), MaxUserLen)
	case strings.IndexByte(u, 0) >= 0:
		return fmt.Errorf("user id %q holds NUL", u)
	}
	return nil
}

// Tree is a draw's frozen entry set: an RFC 9162 Merkle tree whose root the record publishes.
// It is immutable once built and safe for concurrent reads.
type Tree struct {
	sessionID, prizeID int64
	entries            []Entry // in leaf order
	index              map[string]int
	// levels[0] are the leaf hashes; levels[l+1][i] is the parent of levels[l][2i] and
	// levels[l][2i+1], or levels[l][2i] itself when it has no right sibling. Promoting the
	// odd node unhashed is what makes this the RFC 9162 tree for any size: its split at the
	// largest power of two below n leaves exactly those nodes without a sibling.
	levels [][][32]byte
}

// Freeze builds the tree of the draw of sessionID×prizeID over entries. Leaves are sorted by
// hash, so a leaf's index tells nothing of when its entrant entered or who they are. It
// refuses a user id that appears twice or that ValidUser refuses: the set holds one entry per
// user, and an id with a NUL could forge another leaf's fields.
func Freeze(sessionID, prizeID int64, entries []Entry) (*Tree, error) {
	type leaf struct {
		hash  [32]byte
		entry Entry
	}
	leaves := make([]leaf, len(entries))
	seen := make(map[string]struct{}, len(entries))
	for i, e := range entries {
		if err := ValidUser(e.User); err != nil {
			return nil, fmt.Errorf("freeze draw %d/%d: entry %d: %w", sessionID, prizeID, i, err)
		}
		if _, dup := seen[e.User]; dup {
			return nil, fmt.Errorf("freeze draw %d/%d: user %q entered twice", sessionID, prizeID, e.User)
		}
		seen[e.User] = struct{}{}
		leaves[i] = leaf{LeafHash(sessionID, prizeID, e), e}
	}
	slices.SortFunc(leaves, func(a, b leaf) int { return bytes.Compare(a.hash[:], b.hash[:]) })

	t := &Tree{sessionID: sessionID, prizeID: prizeID,
		entries: make([]Entry, len(leaves)), index: make(map[string]int, len(leaves))}
	hashes := make([][32]byte, len(leaves))
	for i, l := range leaves {
		t.entries[i] = l.entry
		t.index[l.entry.User] = i
		hashes[i] = l.hash
	}
	t.levels = buildLevels(hashes)
	return t, nil
}

// buildLevels computes every level of the tree over leaves, bottom up.
func buildLevels(leaves [][32]byte) [][][32]byte {
	levels := [][][32]byte{leaves}
	for cur := leaves; len(cur) > 1; {
		next := make([][32]byte, (len(cur)+1)/2)
		for i := range next {
			if 2*i+1 < len(cur) {
				next[i] = nodeHash(cur[2*i], cur[2*i+1])
			} else {
				next[i] = cur[2*i]
			}
		}
		levels = append(levels, next)
		cur = next
	}
	return levels
}

// Root is the tree's RFC 9162 root hash; for an empty tree, SHA-256 of the empty string.
func (t *Tree) Root() [32]byte {
	top := t.levels[len(t.levels)-1]
	if len(top) == 0 {
		return sha256.Sum256(nil)
	}
	return top[0]
}

// Size is the number of entries.
func (t *Tree) Size() int { return len(t.entries) }

// Index is user's leaf index, and whether user is in the set.
func (t *Tree) Index(user string) (int, bool) {
	i, ok := t.index[user]
	return i, ok
}

// Entry is the entry at leaf i; it panics if i is out of range, as a slice would.
func (t *Tree) Entry(i int) Entry { return t.entries[i] }

// Leaf is the leaf hash at index i; it panics if i is out of range, as a slice would.
func (t *Tree) Leaf(i int) [32]byte { return t.levels[0][i] }

// Users are the entrants' user ids in leaf order.
func (t *Tree) Users() []string {
	u := make([]string, len(t.entries))
	for i, e := range t.entries {
		u[i] = e.User
	}
	return u
}

// Proof is the audit path of leaf i (RFC 9162 §2.1.3.1), leaf to root; it panics if i is out
// of range, as a slice would.
func (t *Tree) Proof(i int) [][32]byte {
	_ = t.levels[0][i]
	var path [][32]byte
	for _, level := range t.levels[:len(t.levels)-1] {
		// A node without a right sibling is carried up unhashed: no path element.
		if sib := i ^ 1; sib < len(level) {
			path = append(path, level[sib])
		}
		i /= 2
	}
	return path
}

// VerifyInclusion checks that leaf is at index in a tree of size leaves with root, given its
// audit path: the algorithm of RFC 9162 §2.1.3.2.
func VerifyInclusion(leaf [32]byte, index, size int, path [][32]byte, root [32]byte) error {
	if index < 0 || index >= size {
		return fmt.Errorf("leaf index %d out of range for a tree of %d leaves", index, size)
	}
	fn, sn := index, size-1
	r := leaf
	for n, p := range path {
		if sn == 0 {
			return fmt.Errorf("audit path too long: %d elements, leaf %d of %d needs %d", len(path), index, size, n)
		}
		if fn&1 == 1 || fn == sn {
			r = nodeHash(p, r)
			for fn&1 == 0 && fn != 0 {
				fn >>= 1
				sn >>= 1
			}
		} else {
			r = nodeHash(r, p)
		}
		fn >>= 1
		sn >>= 1
	}
	if sn != 0 {
		return fmt.Errorf("audit path too short: %d elements for leaf %d of %d", len(path), index, size)
	}
	if r != root {
		return fmt.Errorf("path leads to root %x, want %x", r, root)
	}
	return nil
}
