package ratelimit

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// A full key table evicts the least recently used key, not every key: a client that
// cycles through fresh addresses (or users) cannot reset the bucket of a client it wants
// to unblock, and the table never holds more than maxKeys.
func TestLimiterEvictsLeastRecentlyUsedKeys(t *testing.T) {
	now := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	l := NewKeyed(0.001, 1, 3, func() time.Time { return now })
	allowed := func(key string) bool { ok, _ := l.Allow(key); return ok }
	for _, k := range []string{"a", "b", "c"} {
		if !allowed(k) {
			t.Fatalf("first request of %s refused", k)
		}
	}
	allowed("a") // a is now the most recently used; b the least
	if !allowed("d") {
		t.Fatal("a new key refused")
	}
	for _, k := range []string{"c", "d", "a"} { // leaves c the least recently used
		if allowed(k) {
			t.Fatalf("%s got a fresh bucket: the table dropped more than the least recently used key", k)
		}
	}
	if !allowed("b") { // evicted: starts with a full bucket again (c, the oldest now, goes)
		t.Fatal("the evicted key is still limited")
	}
	// A flood of fresh keys while one client keeps coming back: its bucket survives.
	for i := range 1000 {
		allowed(fmt.Sprintf("flood-%d", i))
		if i%2 == 0 && allowed("a") {
			t.Fatalf("a's bucket was reset by the flood at key %d", i)
		}
	}
	if n := l.Len(); n > 3 {
		t.Fatalf("%d keys held, want at most 3", n)
	}
	// Time refills buckets as before.
	now = now.Add(2000 * time.Second)
	if !allowed("a") {
		t.Fatal("a refused after its bucket refilled")
	}
}

// The per-IP limiter sits on the grab path: one call per request under a lock shared by
// every request. go test -run '^$' -bench KeyedLimiter -benchtime 200ms ./gateway/ratelimit/
func BenchmarkKeyedLimiter(b *testing.B) {
	for _, tc := range []struct {
		name      string
		keys, max int // distinct clients cycled through; the table's bound
	}{
		{"hits", 10_000, 200_000},
		{"misses and evictions", 200_000, 10_000},
	} {
		keys := make([]string, tc.keys)
		for i := range keys {
			keys[i] = fmt.Sprintf("2001:db8:%x:%x::/64", i>>16, i&0xffff)
		}
		b.Run(tc.name, func(b *testing.B) {
			l := NewKeyed(1e9, 1e9, tc.max, time.Now)
			var seed atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				i := int(seed.Add(1) * 104729)
				for pb.Next() {
					l.Allow(keys[i%len(keys)])
					i += 7919
				}
			})
		})
	}
}
