package stock

import (
	"strings"
	"testing"
)

// hashTag is the part of a key Redis Cluster hashes (CLUSTER KEYSLOT): the text between
// the first '{' and the first '}' after it, when not empty; else the whole key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// Every key a script or pipeline of one session×prize touches, the fence and the revision
// included, hashes on the same non-empty tag, so each call stays in one cluster slot; and
// different session×prizes get different tags, so they spread over the cluster.
func TestKeysShareOneSlot(t *testing.T) {
	for _, c := range []struct{ sid, pid int64 }{{1, 1}, {7, 12}, {1053035869351, 99}} {
		k := KeysFor(c.sid, c.pid)
		keys := append(k.all(), k.Fence, k.revision())
		want := hashTag(k.Meta)
		if want == k.Meta || want == "" {
			t.Fatalf("%s has no hash tag", k.Meta)
		}
		for _, key := range keys {
			if got := hashTag(key); got != want {
				t.Errorf("%s hashes on %q, want %q (the tag of %s)", key, got, want, k.Meta)
			}
		}
	}
	if hashTag(KeysFor(1, 12).Meta) == hashTag(KeysFor(11, 2).Meta) {
		t.Fatal("session 1 prize 12 and session 11 prize 2 share a tag")
	}
}
