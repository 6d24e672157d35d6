package stock_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-pipeline/seckill/pkg/stock"
)

// With reservations piling up (Kafka down during a crowd), the snapshot script must stay
// O(1): a Lua script blocks every other client, admission included, for as long as it
// runs. The listing moves to paged HSCAN outside Lua, and still returns each reservation
// exactly once.
func TestSnapshotStaysO1WithManyReservations(t *testing.T) {
	const pending = 200_000
	g, rdb, ctx := newGate(t)
	sid := testSession(t)
	const pid = 11
	load(t, g, rdb, ctx, sid, pid, pending+5, 1)
	k := stock.KeysFor(sid, pid)
	// UNLINK: freeing a 200k-field hash with DEL would itself block Redis for a while.
	t.Cleanup(func() { rdb.Unlink(context.Background(), k.Reserved) })

	admitted := time.Now().Add(-time.Minute).UnixMilli()
	want := make(map[string]string, pending)
	// One HSET of 5,000 fields per round trip: one pipeline of all 200k (about 10 MB in one
	// write) outlasted the client's 1 s write timeout on a loaded machine.
	args := make([]any, 0, 2*5000)
	for i := range pending {
		rid, user := fmt.Sprintf("%d:%d:key-%08d", sid, pid, i), fmt.Sprintf("user-%d", i)
		want[rid] = user
		args = append(args, rid, user+"|"+strconv.FormatInt(admitted, 10))
		if len(args) == cap(args) {
			if err := rdb.HSet(ctx, k.Reserved, args...).Err(); err != nil {
				t.Fatal(err)
			}
			args = args[:0]
		}
	}
	// As if the crowd had been admitted.
	if err := rdb.HIncrBy(ctx, k.Meta, "left", -pending).Err(); err != nil {
		t.Fatal(err)
	}

	// The script as shipped, run on its own to see its reply and its time inside Redis.
	src, err := os.ReadFile("lua/snapshot.lua")
	if err != nil {
		t.Fatal(err)
	}
	script := redis.NewScript(string(src))
	if err := script.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	reply, err := script.Run(ctx, rdb, []string{k.Meta, k.Reserved, k.Returned}).Slice()
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	// (An HGETALL of the hash "for scale" used to follow: its 10 MB reply outlasted the
	// client's 1 s read timeout on a loaded machine, and it proved nothing the reply's
	// shape below does not.)
	t.Logf("snapshot.lua with %d reservations: %s round trip", pending, took)
	if len(reply) > 8 {
		t.Fatalf("snapshot reply has %d elements, want a few scalars", len(reply))
	}
	for i, v := range reply {
		if l, ok := v.([]any); ok {
			t.Fatalf("snapshot reply element %d is a list of %d: O(pending) work inside Lua", i, len(l))
		}
	}

	v, err := g.View(ctx, sid, pid)
	if err != nil {
		t.Fatal(err)
	}
	if !v.Loaded || v.Left != 5 || v.Total != pending+5 || v.Pending != pending {
		t.Fatalf("view left %d total %d pending %d loaded %v; want 5, %d, %d, true", v.Left, v.Total, v.Pending, v.Loaded, pending+5, pending)
	}
	list, err := g.Reservations(ctx, sid, pid)
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string][]stock.Reservation{"View.Reserved": v.Reserved, "Reservations": list} {
		seen := make(map[string]bool, len(got))
		for _, r := range got {
			if seen[r.RequestID] {
				t.Fatalf("%s: %s listed twice", name, r.RequestID)
			}
			seen[r.RequestID] = true
			if u, ok := want[r.RequestID]; !ok || u != r.UserID || r.AdmittedAt.UnixMilli() != admitted {
				t.Fatalf("%s: unexpected %+v", name, r)
			}
		}
		if len(seen) != pending {
			t.Fatalf("%s: %d reservations, want %d", name, len(seen), pending)
		}
	}
}
