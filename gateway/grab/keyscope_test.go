package grab

import (
	"log/slog"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/internal/harness"
	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/retry"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
	"github.com/seckill-pipeline/seckill/pkg/writepath"
)

// An Idempotency-Key is its user's own (issue 39): another user sending the same key makes
// a grab of their own (its own request id, admitted, its own order), and the first user's
// grab and order are untouched. On a prize with stock buckets the users are put in
// different home buckets, where a shared request id was admitted twice and one 202 had no
// order, and in the same one, where it was refused as a conflict.
func TestIdempotencyKeyIsPerUser(t *testing.T) {
	const key = "shared-key-0001"
	t.Run("plain prize", func(t *testing.T) {
		e := newGrabEnv(t, 5, 5, 1)
		sameKeyOwnGrabs(t, e, e.open.ID, e.prizeA, key, "alice", "bob", "carol")
	})
	t.Run("bucketed prize", func(t *testing.T) {
		const n = 4
		e := newBucketEnv(t, 8, n, 1)
		a := usersOf("alice-", 1, n, 2) // two users who share home bucket 1
		b := usersOf("bob-", 3, n, 1)[0]
		sameKeyOwnGrabs(t, e.grabEnv, e.open.ID, e.prize, key, a[0], b, a[1])
	})
}

// sameKeyOwnGrabs has users grab one prize with the same key, first users[0], then the
// others, and each one retry; then it persists the grab events as the consumer would and
// checks that every user has exactly their own order, which only they can poll.
func sameKeyOwnGrabs(t *testing.T, e *grabEnv, sid, pid int64, key string, users ...string) {
	t.Helper()
	ctx := stacktest.Context(t, 60*time.Second)
	s := seckill.Session{ID: sid}
	rids := map[string]string{} // user -> request id
	owner := map[string]string{}
	for _, u := range users {
		a := e.grab(t, s, pid, u, key)
		expect(t, u+" grabs with the shared key", a, 202, "")
		rid, _ := a.body["request_id"].(string)
		if a.body["status"] != "queued" {
			t.Fatalf("%s: %v, want a new grab, queued", u, a.body)
		}
		if other, taken := owner[rid]; taken {
			t.Fatalf("%s was answered %s, the request id of %s's grab", u, rid, other)
		}
		rids[u], owner[rid] = rid, u
	}
	// Each user's retry with the key is still their own grab, the first user's included.
	for _, u := range users {
		again := e.grab(t, s, pid, u, key)
		expect(t, u+"'s retry", again, 202, "")
		if again.body["request_id"] != rids[u] {
			t.Fatalf("%s's retry answered %v, want %s", u, again.body, rids[u])
		}
	}

	// The consumer's write path, over every event the gateway published (the retries'
	// re-publications included).
	msgs, err := harness.ReadTopic(ctx, e.brokers, e.topics.Grab)
	if err != nil {
		t.Fatal(err)
	}
	batches, poison := writepath.GroupGrabs(msgs)
	if len(poison) > 0 {
		t.Fatalf("poison on the grab topic: %v", poison)
	}
	w := writepath.New(store.NewOrders(e.db), e.gate, retry.Default(), nil, slog.New(slog.DiscardHandler), time.Now)
	for _, b := range batches {
		res, err := w.Persist(ctx, b.Key, b.Items)
		if err != nil {
			t.Fatal(err)
		}
		w.Settle(ctx, []stock.SettleBatch{w.Settlement(ctx, b.Key, res)})
	}

	var n int64
	if err := e.db.Table("orders").Where("session_id = ? AND prize_id = ?", sid, pid).Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	if n != int64(len(users)) {
		t.Fatalf("%d orders, want one per user (%d)", n, len(users))
	}
	for _, u := range users {
		o, err := store.NewOrders(e.db).ByRequestID(ctx, rids[u])
		if err != nil || o.UserID != u || o.Status != seckill.OrderSucceeded {
			t.Fatalf("%s's order %s: %+v %v, want %s's, succeeded", u, rids[u], o, err, u)
		}
		poll := e.request(t, "GET", "/api/v1/grabs/"+rids[u], e.token(t, u), "", "")
		if poll.code != 200 || poll.body["status"] != "succeeded" || poll.body["order_id"] != float64(o.ID) {
			t.Fatalf("%s polls %s: %d %v, want succeeded, order %d", u, rids[u], poll.code, poll.body, o.ID)
		}
		for _, other := range users {
			if other == u {
				continue
			}
			if p := e.request(t, "GET", "/api/v1/grabs/"+rids[u], e.token(t, other), "", ""); p.code != 404 {
				t.Fatalf("%s polls %s's grab %s: %d %v, want 404", other, u, rids[u], p.code, p.body)
			}
		}
	}
}

// A request id an older gateway made from a client's raw key (before keys were derived per
// user) still polls for its owner, from Redis during the sale and from MySQL once the keys
// are gone, and is still nobody else's; a new grab with that key is another id.
func TestRawKeyRequestIDStillPolls(t *testing.T) {
	e := newGrabEnv(t, 5, 5, 2)
	ctx := stacktest.Context(t, 30*time.Second)
	sid, pid := e.open.ID, e.prizeA
	old := seckill.RequestID(sid, pid, "old-raw-key-0001")
	v, err := e.gate.Reserve(ctx, seckill.Grab{RequestID: old, UserID: "alice", SessionID: sid, PrizeID: pid, AdmittedAt: time.Now()})
	if err != nil || v.Code != stock.Admitted {
		t.Fatalf("reserve %s: %v %v", old, v, err)
	}
	poll := func(user string) answer { return e.request(t, "GET", "/api/v1/grabs/"+old, e.token(t, user), "", "") }
	if p := poll("alice"); p.code != 200 || p.body["status"] != "queued" || p.body["request_id"] != old {
		t.Fatalf("owner polls %s from Redis: %d %v", old, p.code, p.body)
	}
	expect(t, "another user polls it", poll("bob"), 404, "not_found")
	again := e.grab(t, e.open, pid, "alice", "old-raw-key-0001")
	expect(t, "the raw key sent again", again, 202, "")
	if again.body["request_id"] != seckill.UserRequestID(sid, pid, "alice", "old-raw-key-0001") {
		t.Fatalf("the raw key sent again answered %v, want the derived id", again.body)
	}

	res, err := store.NewOrders(e.db).Persist(ctx, sid, pid, []seckill.Grab{{RequestID: old, UserID: "alice",
		SessionID: sid, PrizeID: pid, AdmittedAt: time.Now()}}, time.Now())
	if err != nil || res.Succeeded != 1 {
		t.Fatalf("persist %s: %+v %v", old, res, err)
	}
	k := stock.KeysFor(sid, pid)
	if err := e.rdb.Del(ctx, k.Meta, k.Users, k.Reserved, k.Outcomes).Err(); err != nil {
		t.Fatal(err)
	}
	if p := poll("alice"); p.code != 200 || p.body["status"] != "succeeded" || p.body["order_id"] == nil {
		t.Fatalf("owner polls %s from MySQL: %d %v", old, p.code, p.body)
	}
	expect(t, "another user polls it from MySQL", poll("bob"), 404, "not_found")
}
