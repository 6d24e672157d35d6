package stock_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
)

// The coalescer sends the grabs of one session×prize in a batch as one script call. Every
// grab must get the verdict it gets when reserved alone, in the batch's order, and leave the
// same keys behind: the same grabs, in the same order, are reserved one call each on two
// prizes and as one batch on two twin prizes (interleaved, so the batch is split per
// prize), each prize with the same history (a settled order, a cancelled order whose unit
// went back on sale and whose buyer may grab again). The grabs cover every verdict: a
// repeat within the batch, a request id taken by another user, the per-user limit reached
// by an earlier grab of the batch, the repeats of settled and cancelled grabs, the stock
// running out mid-batch; a prize never loaded answers "not loaded" to each of its grabs.
func TestBatchedAdmissionMatchesOneByOne(t *testing.T) { onEachRedis(t, batchedMatchesOneByOne) }

func batchedMatchesOneByOne(t *testing.T, rdb redis.UniversalClient) {
	single, _, ctx := newGateOn(t, rdb)
	batched, _, _ := newGateOn(t, rdb, stock.WithCoalescing(64, 1))
	sid := testSession(t)
	at := time.UnixMilli(1_900_000_000_000)
	for _, pid := range []int64{1, 2, 3, 4} {
		load(t, single, rdb, ctx, sid, pid, 4, 1)
		settled, cancelled := grab(sid, pid, "u-settled", "settled-key-01"), grab(sid, pid, "u-cancel", "cancel-key-01")
		for _, g := range []seckill.Grab{settled, cancelled} {
			if v, err := single.Reserve(ctx, g); err != nil || v.Code != stock.Admitted {
				t.Fatalf("history of prize %d: %s %v", pid, v.Code, err)
			}
		}
		if _, err := single.Settle(ctx, []stock.SettleBatch{{SessionID: sid, PrizeID: pid, Items: []stock.Settlement{
			{RequestID: settled.RequestID, UserID: "u-settled", OrderID: 77}}}}); err != nil {
			t.Fatal(err)
		}
		if r, err := single.Return(ctx, sid, pid, []stock.UnitReturn{{RequestID: cancelled.RequestID, UserID: "u-cancel",
			OrderID: 78, Reason: "payment_timeout", Resale: true, ReleaseSlot: true}}); err != nil || r.Returned != 1 {
			t.Fatalf("return on prize %d: %+v %v", pid, r, err)
		}
	}
	t.Cleanup(func() {
		for _, pid := range []int64{1, 2, 3, 4} {
			k := stock.KeysFor(sid, pid)
			rdb.Del(ctx, k.Returned)
		}
	})

	type step struct{ user, key string }
	steps := []step{
		{"alice", "a-key-0001"}, // admitted (3 left before the batch: 4, one sold, one back)
		{"alice", "a-key-0001"}, // seen, queued: admitted by the grab before
		{"bob", "a-key-0001"},   // foreign
		{"alice", "a-key-0002"}, // limit (1 per user)
		{"u-settled", "settled-key-01"},
		{"u-cancel", "cancel-key-01"},
		{"u-cancel", "c-key-00001"}, // admitted: the cancelled order's slot was released
		{"bob", "b-key-00001"},      // admitted: the last unit
		{"carol", "c-key-00002"},    // sold out
		{"dave", "d-key-00001"},     // sold out
		{"bob", "b-key-00001"},      // seen, queued
	}
	grabOf := func(pid int64, i int) seckill.Grab {
		g := grab(sid, pid, steps[i].user, steps[i].key)
		g.AdmittedAt = at.Add(time.Duration(i) * time.Millisecond)
		return g
	}
	var want [][2]stock.Verdict // per step: prize 1's and prize 2's verdict
	for i := range steps {
		var pair [2]stock.Verdict
		for j, pid := range []int64{1, 2} {
			v, err := single.Reserve(ctx, grabOf(pid, i))
			if err != nil {
				t.Fatal(err)
			}
			pair[j] = v
		}
		want = append(want, pair)
	}
	// The reference itself must show every verdict, or the comparison proves less than it says.
	codes := map[stock.Code]bool{}
	for _, p := range want {
		codes[p[0].Code] = true
	}
	for _, c := range []stock.Code{stock.Admitted, stock.Seen, stock.Limit, stock.SoldOut, stock.Foreign} {
		if !codes[c] {
			t.Fatalf("the one-by-one reference never answered %s: %+v", c, want)
		}
	}

	var batch []seckill.Grab
	for i := range steps {
		batch = append(batch, grabOf(3, i), grabOf(4, i), grabOf(5, i)) // 5: never loaded
	}
	got, errs := stock.ReserveBatch(ctx, batched, batch)
	for i := range steps {
		for j := range 2 {
			if errs[3*i+j] != nil {
				t.Fatal(errs[3*i+j])
			}
			if got[3*i+j] != want[i][j] {
				t.Errorf("step %d %v on prize %d: batched %+v, one by one %+v", i, steps[i], 3+j, got[3*i+j], want[i][j])
			}
		}
		if errs[3*i+2] != nil || got[3*i+2].Code != stock.NotLoaded {
			t.Errorf("step %d on the unloaded prize: %+v %v, want not loaded", i, got[3*i+2], errs[3*i+2])
		}
	}
	for j, pid := range []int64{3, 4} {
		if a, b := keysState(t, rdb, sid, 1+int64(j)), keysState(t, rdb, sid, pid); a != b {
			t.Errorf("prize %d's keys after the batch:\n%s\nprize %d's one by one:\n%s", pid, b, 1+j, a)
		}
	}
	if n, err := rdb.Exists(ctx, stock.KeysFor(sid, 5).Meta, stock.KeysFor(sid, 5).Users, stock.KeysFor(sid, 5).Reserved).Result(); err != nil || n != 0 {
		t.Errorf("the unloaded prize's keys: %d exist (%v), want none created", n, err)
	}
}

// keysState renders a prize's stock, per-user counts, reservations and outcomes with the
// request ids' session×prize prefix dropped, so twin prizes compare equal.
func keysState(t *testing.T, rdb redis.UniversalClient, sid, pid int64) string {
	t.Helper()
	k := stock.KeysFor(sid, pid)
	ctx := t.Context()
	var b strings.Builder
	left, err := rdb.HGet(ctx, k.Meta, "left").Result()
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "left=%s", left)
	prefix := seckill.RequestID(sid, pid, "")
	for _, key := range []string{k.Users, k.Reserved, k.Outcomes} {
		m, err := rdb.HGetAll(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		fields := make([]string, 0, len(m))
		for f, v := range m {
			fields = append(fields, strings.TrimPrefix(f, prefix)+"="+v)
		}
		slices.Sort(fields)
		fmt.Fprintf(&b, "\n%s: %s", key[strings.LastIndexByte(key, ':')+1:], strings.Join(fields, " "))
	}
	ttl, err := rdb.PTTL(ctx, k.Reserved).Result()
	if err != nil || ttl <= 0 {
		t.Fatalf("reservations of prize %d: TTL %v (%v), want the stock key's", pid, ttl, err)
	}
	return b.String()
}
