package sessionstore

import (
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
)

func newID(t *testing.T) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// Against the stack's Redis: a session lives while used within the idle timeout, never past
// its absolute end, and not after it is revoked; the id is not stored.
func TestSessions(t *testing.T) {
	rdb := stacktest.Redis(t)
	ctx := stacktest.Context(t, 10*time.Second)
	s := New(rdb)
	now := time.Now()
	idle, end := 30*time.Minute, now.Add(time.Hour)

	id := newID(t)
	t.Cleanup(func() { _ = s.Revoke(ctx, id) })
	if err := s.Create(ctx, id, now, end, idle); err != nil {
		t.Fatal(err)
	}
	if n, _ := rdb.Exists(ctx, keyPrefix+id).Result(); n != 0 {
		t.Fatal("the session id itself is a key")
	}
	if ttl := rdb.PTTL(ctx, key(id)).Val(); ttl <= 29*time.Minute || ttl > idle {
		t.Fatalf("TTL after create %s, want the idle timeout", ttl)
	}
	// Used 50 minutes in: alive; its TTL is what is left of the hour (10m), not 30m.
	if ok, err := s.Touch(ctx, id, now.Add(50*time.Minute), idle); !ok || err != nil {
		t.Fatalf("touch within the lifetime: %v %v", ok, err)
	}
	if ttl := rdb.PTTL(ctx, key(id)).Val(); ttl > 10*time.Minute || ttl < 9*time.Minute {
		t.Fatalf("TTL near the absolute end %s, want about 10m", ttl)
	}
	// Past the absolute end (the key's TTL not run out yet on a slow clock): refused, deleted.
	if ok, _ := s.Touch(ctx, id, end, idle); ok {
		t.Fatal("a session past its absolute end is live")
	}
	if n := rdb.Exists(ctx, key(id)).Val(); n != 0 {
		t.Fatal("the ended session's key is still there")
	}

	// Revoked: gone at once.
	id2 := newID(t)
	if err := s.Create(ctx, id2, now, end, idle); err != nil {
		t.Fatal(err)
	}
	if err := s.Revoke(ctx, id2); err != nil {
		t.Fatal(err)
	}
	if ok, _ := s.Touch(ctx, id2, now, idle); ok {
		t.Fatal("a revoked session is live")
	}
	// Idle: the key expires by Redis's own clock.
	id3 := newID(t)
	if err := s.Create(ctx, id3, now, end, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if ok, _ := s.Touch(ctx, id3, now, idle); ok {
		t.Fatal("an idle session outlived its idle timeout")
	}
}
