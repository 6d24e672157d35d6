package draw

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
)

func leafOf(data []byte) [32]byte { return sha256.Sum256(append([]byte{0}, data...)) }

// The Certificate Transparency reference tests' leaves and roots (RFC 6962 reference
// implementation, as pinned by transparency-dev/merkle's testonly package): roots of the first
// n leaves, n = 0..8.
var (
	ctLeaves = []string{"", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f"}
	ctRoots  = []string{
		"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
		"6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
		"fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
		"aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
		"d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
		"4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
		"76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
		"ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
		"5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
	}
)

func rootOf(leaves [][32]byte) [32]byte {
	return (&Tree{levels: buildLevels(leaves)}).Root()
}

func TestRootKnownAnswers(t *testing.T) {
	var leaves [][32]byte
	for n := 0; n <= len(ctLeaves); n++ {
		if got := rootOf(leaves); hex.EncodeToString(got[:]) != ctRoots[n] {
			t.Errorf("root of %d CT leaves = %x, want %s", n, got, ctRoots[n])
		}
		if n < len(ctLeaves) {
			d, _ := hex.DecodeString(ctLeaves[n])
			leaves = append(leaves, leafOf(d))
		}
	}
}

// mth is RFC 9162 §2.1.1's definition, recursively: the reference buildLevels must agree with.
func mth(leaves [][32]byte) [32]byte {
	switch n := len(leaves); n {
	case 0:
		return sha256.Sum256(nil)
	case 1:
		return leaves[0]
	default:
		k := 1
		for k*2 < n {
			k *= 2
		}
		return nodeHash(mth(leaves[:k]), mth(leaves[k:]))
	}
}

// syntheticLeaves are n distinct leaf hashes.
func syntheticLeaves(n int) [][32]byte {
	l := make([][32]byte, n)
	for i := range l {
		l[i] = leafOf([]byte(fmt.Sprint("leaf ", i)))
	}
	return l
}

func TestRootByHand(t *testing.T) {
	l := syntheticLeaves(8)
	h := nodeHash
	cases := []struct {
		n    int
		want [32]byte
	}{
		{1, l[0]},
		{2, h(l[0], l[1])},
		{3, h(h(l[0], l[1]), l[2])},
		{5, h(h(h(l[0], l[1]), h(l[2], l[3])), l[4])},
		{8, h(h(h(l[0], l[1]), h(l[2], l[3])), h(h(l[4], l[5]), h(l[6], l[7])))},
	}
	for _, tc := range cases {
		if got := rootOf(l[:tc.n]); got != tc.want {
			t.Errorf("root of %d leaves = %x, want %x", tc.n, got, tc.want)
		}
	}
	for n := 0; n <= 70; n++ {
		if got, want := rootOf(syntheticLeaves(n)), mth(syntheticLeaves(n)); got != want {
			t.Errorf("root of %d leaves = %x, RFC 9162 MTH %x", n, got, want)
		}
	}
}

func TestProofsVerify(t *testing.T) {
	for size := 1; size <= 40; size++ {
		leaves := syntheticLeaves(size)
		tr := &Tree{levels: buildLevels(leaves)}
		root := tr.Root()
		for i := range size {
			path := tr.Proof(i)
			if err := VerifyInclusion(leaves[i], i, size, path, root); err != nil {
				t.Fatalf("size %d leaf %d: %v", size, i, err)
			}
			// Every change must be refused.
			other := leafOf([]byte("not a leaf"))
			if VerifyInclusion(other, i, size, path, root) == nil {
				t.Errorf("size %d leaf %d: a changed leaf verified", size, i)
			}
			if VerifyInclusion(leaves[i], i, size, path, other) == nil {
				t.Errorf("size %d leaf %d: a changed root verified", size, i)
			}
			for _, j := range []int{i - 1, i + 1, -1, size} {
				if j != i && VerifyInclusion(leaves[i], j, size, path, root) == nil {
					t.Errorf("size %d leaf %d: index %d verified", size, i, j)
				}
			}
			// RFC 9162's path does not always bind the size: a leaf whose path has the same
			// shape in both sizes verifies under either. Any other size must be refused; the
			// record binds the size, as Verify takes it from the record, next to the root.
			for _, s := range []int{size - 1, size + 1, 2 * size} {
				if s <= i || s == size {
					continue
				}
				same := pathShape(i, s) == pathShape(i, size)
				if err := VerifyInclusion(leaves[i], i, s, path, root); (err == nil) != same {
					t.Errorf("size %d leaf %d: with size %d: %v, paths of the same shape: %v", size, i, s, err, same)
				}
			}
			for k := range path {
				bad := append([][32]byte(nil), path...)
				bad[k][0] ^= 1
				if VerifyInclusion(leaves[i], i, size, bad, root) == nil {
					t.Errorf("size %d leaf %d: path element %d changed, verified", size, i, k)
				}
			}
			if VerifyInclusion(leaves[i], i, size, append(path, other), root) == nil {
				t.Errorf("size %d leaf %d: a longer path verified", size, i)
			}
			if len(path) > 0 && VerifyInclusion(leaves[i], i, size, path[:len(path)-1], root) == nil {
				t.Errorf("size %d leaf %d: a shorter path verified", size, i)
			}
		}
	}
}

// pathShape is leaf i's audit path in a tree of size n as the sides its siblings are on, read
// from the level structure rather than from RFC 9162's verification algorithm.
func pathShape(i, n int) string {
	var b strings.Builder
	for ; n > 1; n = (n + 1) / 2 {
		if sib := i ^ 1; sib < n {
			b.WriteByte("RL"[i&1])
		}
		i /= 2
	}
	return b.String()
}

func TestVerifyInclusionSaysWhy(t *testing.T) {
	leaves := syntheticLeaves(5)
	tr := &Tree{levels: buildLevels(leaves)}
	path := tr.Proof(2)
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"index", VerifyInclusion(leaves[2], 5, 5, path, tr.Root()), "out of range"},
		{"long", VerifyInclusion(leaves[2], 2, 5, append(path, leaves[0], leaves[1]), tr.Root()), "too long"},
		{"short", VerifyInclusion(leaves[2], 2, 5, path[:1], tr.Root()), "too short"},
		{"root", VerifyInclusion(leaves[2], 2, 5, path, leaves[0]), "root"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q", tc.err, tc.want)
			}
		})
	}
}

func testEntries(tb testing.TB, n int) []Entry {
	tb.Helper()
	e := make([]Entry, n)
	for i := range e {
		e[i] = Entry{User: fmt.Sprintf("user-%03d", i)}
		e[i].Salt[0], e[i].Salt[15] = byte(i), byte(i>>8)
	}
	return e
}

func TestFreeze(t *testing.T) {
	entries := testEntries(t, 37)
	tr, err := Freeze(7, 9, entries)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Size() != 37 || len(tr.Users()) != 37 {
		t.Fatalf("size %d, %d users, want 37", tr.Size(), len(tr.Users()))
	}
	// Leaves are in hash order, whatever the entries' order.
	rev := append([]Entry(nil), entries...)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	tr2, err := Freeze(7, 9, rev)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Root() != tr2.Root() {
		t.Error("root depends on the entries' order")
	}
	for i := 1; i < tr.Size(); i++ {
		a, b := tr.Leaf(i-1), tr.Leaf(i)
		if string(a[:]) >= string(b[:]) {
			t.Fatalf("leaves %d and %d not in ascending hash order", i-1, i)
		}
	}
	for i, u := range tr.Users() {
		j, ok := tr.Index(u)
		if !ok || j != i || tr.Entry(i).User != u || tr.Leaf(i) != LeafHash(7, 9, tr.Entry(i)) {
			t.Fatalf("user %s: index %d %v, leaf order %d", u, j, ok, i)
		}
		p, ok := tr.ProofOf(u)
		if !ok || p.Index != i || p.User != u || p.SessionID != 7 || p.PrizeID != 9 || p.Value != "" || p.Place != 0 {
			t.Fatalf("ProofOf(%s) = %+v, %v", u, p, ok)
		}
		if err := VerifyInclusion(tr.Leaf(i), i, tr.Size(), tr.Proof(i), tr.Root()); err != nil {
			t.Fatalf("user %s: %v", u, err)
		}
	}
	if _, ok := tr.Index("nobody"); ok {
		t.Error("Index found a user who did not enter")
	}
	if _, ok := tr.ProofOf("nobody"); ok {
		t.Error("ProofOf gave a proof to a user who did not enter")
	}
	// Another draw's leaves differ: a proof cannot travel between draws.
	if other, _ := Freeze(7, 10, entries); other.Root() == tr.Root() {
		t.Error("two prizes' trees over the same entries share a root")
	}
	empty, err := Freeze(7, 9, nil)
	if err != nil || empty.Root() != sha256.Sum256(nil) || empty.Size() != 0 {
		t.Errorf("empty tree: %v, root %x", err, empty.Root())
	}
}

func TestFreezeRefuses(t *testing.T) {
	cases := []struct {
		name    string
		entries []Entry
		want    string
	}{
		{"duplicate", []Entry{{User: "a"}, {User: "b"}, {User: "a", Salt: Salt{1}}}, "twice"},
		{"empty", []Entry{{User: "a"}, {User: ""}}, "empty"},
		{"long", []Entry{{User: strings.Repeat("x", MaxUserLen+1)}}, "longer"},
		{"nul", []Entry{{User: "a\x00b"}}, "NUL"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Freeze(1, 1, tc.entries)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Freeze: %v, want an error saying %q", err, tc.want)
			}
		})
	}
	if _, err := Freeze(1, 1, []Entry{{User: strings.Repeat("x", MaxUserLen)}}); err != nil {
		t.Errorf("a %d-byte user id was refused: %v", MaxUserLen, err)
	}
}

func TestLeafHashLayout(t *testing.T) {
	e := Entry{User: "alice", Salt: Salt{0: 0xaa, 15: 0xbb}}
	data := "\x00seckill-draw-entry/v1\x0012\x00345\x00alice\x00" + string(e.Salt[:])
	if got, want := LeafHash(12, 345, e), sha256.Sum256([]byte(data)); got != want {
		t.Errorf("LeafHash = %x, want %x", got, want)
	}
}

func TestSaltRoundTrip(t *testing.T) {
	s, err := NewSalt(strings.NewReader("0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ParseSalt(s.String()); err != nil || got != s {
		t.Errorf("ParseSalt(%s) = %v, %v", s, got, err)
	}
	for _, bad := range []string{"", "00", strings.Repeat("0", 31), strings.Repeat("0", 33), strings.Repeat("g", 32)} {
		if _, err := ParseSalt(bad); err == nil {
			t.Errorf("ParseSalt(%q) accepted", bad)
		}
	}
	if _, err := NewSalt(strings.NewReader("short")); err == nil {
		t.Error("NewSalt accepted a short read")
	}
}

// A million entries must freeze in seconds: run with -run Million -v to see the time.
func TestFreezeMillion(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	entries := make([]Entry, 1_000_000)
	for i := range entries {
		entries[i] = Entry{User: fmt.Sprintf("u%07d", i)}
		entries[i].Salt[0], entries[i].Salt[1], entries[i].Salt[2] = byte(i), byte(i>>8), byte(i>>16)
	}
	tr, err := Freeze(1, 2, entries)
	if err != nil {
		t.Fatal(err)
	}
	i, _ := tr.Index("u0123456")
	if err := VerifyInclusion(tr.Leaf(i), i, tr.Size(), tr.Proof(i), tr.Root()); err != nil {
		t.Fatal(err)
	}
	if n := len(tr.Proof(i)); n != 20 {
		t.Errorf("proof of %d elements in a tree of 1,000,000, want 20", n)
	}
}
