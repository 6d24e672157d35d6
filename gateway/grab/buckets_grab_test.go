package grab

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-pipeline/seckill/gateway/schedule"
	"github.com/seckill-pipeline/seckill/internal/harness"
	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/auth"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// bucketEnv is a gateway grab API on the real stack with one open session whose one prize
// has n stock buckets, every bucket loaded from its row.
type bucketEnv struct {
	*grabEnv
	n      int
	prize  int64
	router *bucketRouter
}

func newBucketEnv(t *testing.T, stockPerSession, n, limit int) *bucketEnv {
	t.Helper()
	_, db := stacktest.Migrated(t)
	rdb := stacktest.Redis(t)
	stacktest.CleanupKeys(t, rdb, db)
	brokers, topics := stacktest.Kafka(t)
	ctx := stacktest.Context(t, 60*time.Second)
	now := time.Now().UTC()
	cat := store.NewCatalog(db, func() time.Time { return now })
	act, err := cat.CreateActivity(ctx, seckill.Activity{
		Name: "bucket grab test", WindowStart: now.Add(-time.Minute), WindowEnd: now.Add(time.Hour),
		Interval: time.Hour, SessionLength: 50 * time.Minute, PerUserLimit: limit,
		Prizes: []seckill.Prize{{Name: "hot", StockPerSession: stockPerSession, Buckets: n}},
	})
	if err != nil {
		t.Fatal(err)
	}
	sessions, _ := cat.Sessions(ctx, act.ID)
	sid, pid := sessions[0].ID, act.Prizes[0].ID
	t.Cleanup(func() {
		for _, pat := range []string{fmt.Sprintf("sk:{%d:%d:*", sid, pid), fmt.Sprintf("sk:{%d:%d}:*", sid, pid)} {
			keys, _ := rdb.Keys(context.Background(), pat).Result()
			if len(keys) > 0 {
				rdb.Del(context.Background(), keys...)
			}
		}
	})
	gate, err := stock.NewGate(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	st, err := cat.Stock(ctx, sid, pid)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := cat.Buckets(ctx, sid, pid)
	if err != nil || len(rows) != n {
		t.Fatalf("%d bucket rows (%v), want %d", len(rows), err, n)
	}
	for _, row := range rows {
		bst := st
		bst.Total, bst.Left, bst.Version = row.Total, row.Left, row.Version
		if _, err := gate.LoadBucket(ctx, bst, row.Bucket, n, seckill.BucketLedger{}, now.Add(2*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	// The others are read afresh on every dry answer (a cache of 1 ns), so no answer here
	// depends on timing.
	api, srv := serveGrabs(t, ctx, db, cat, gate, brokers, topics, func(a *API) {
		a.buckets = newBucketRouter(gate, a.schedule.(*schedule.Cache), time.Nanosecond, time.Minute, a.log)
	})
	router := api.buckets
	return &bucketEnv{grabEnv: &grabEnv{srv: srv, api: api, rdb: rdb, gate: gate, brokers: brokers, topics: topics,
		signer: auth.NewSigner([]byte(jwtSecret), "seckill", "seckill-gateway"), open: sessions[0], prizeA: pid, db: db},
		n: n, prize: pid, router: router}
}

// usersOf returns count user ids whose home bucket of n is b.
func usersOf(prefix string, b, n, count int) []string {
	var out []string
	for i := 0; len(out) < count; i++ {
		u := prefix + strconv.Itoa(i)
		if stock.HomeBucket(u, n) == b {
			out = append(out, u)
		}
	}
	return out
}

// Every user's grabs of a bucketed prize land in their home bucket, and only there: the
// reservation, the status poll and the grab event (keyed session:prize:b, with its bucket).
func TestBucketGrabsLandInHomeBucket(t *testing.T) {
	const n, users = 4, 120
	e := newBucketEnv(t, 400, n, 1)
	s, p := e.open.ID, e.prize
	home := map[string]int{} // request id -> the bucket it must be in
	used := map[int]bool{}
	for i := range users {
		u := "user-" + strconv.Itoa(i)
		a := e.grab(t, e.open, p, u, fmt.Sprintf("key-%06d", i))
		expect(t, "grab of "+u, a, 202, "")
		rid := a.body["request_id"].(string)
		b := stock.HomeBucket(u, n)
		home[rid], used[b] = b, true
		for other := range n {
			ok, err := e.rdb.HExists(context.Background(), stock.BucketKeysFor(s, p, other, n).Reserved, rid).Result()
			if err != nil {
				t.Fatal(err)
			}
			if ok != (other == b) {
				t.Fatalf("%s (home %d): reservation in bucket %d = %v", u, b, other, ok)
			}
		}
		// A second grab of the same user meets the first in the same bucket: the limit.
		expect(t, "second grab of "+u, e.grab(t, e.open, p, u, fmt.Sprintf("again-%06d", i)), 409, "limit_reached")
		poll := e.request(t, "GET", "/api/v1/grabs/"+rid, e.token(t, u), "", "")
		if poll.code != 200 || poll.body["status"] != "queued" {
			t.Fatalf("%s polls %s: %d %v", u, rid, poll.code, poll.body)
		}
		if other := e.request(t, "GET", "/api/v1/grabs/"+rid, e.token(t, "someone-else"), "", ""); other.code != 404 {
			t.Fatalf("another user polls %s: %d %v", rid, other.code, other.body)
		}
	}
	if len(used) != n {
		t.Fatalf("%d users used buckets %v, want all %d", users, used, n)
	}
	states, err := e.gate.Buckets(context.Background(), s, p, n)
	if err != nil {
		t.Fatal(err)
	}
	var left int64
	for _, st := range states {
		left += st.Left
	}
	if left != 400-users {
		t.Fatalf("units left %d, want %d", left, 400-users)
	}

	msgs, err := harness.ReadTopic(stacktest.Context(t, 30*time.Second), e.brokers, e.topics.Grab)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, m := range msgs {
		g, err := event.DecodeGrab(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		b, ok := home[g.RequestID]
		if !ok {
			t.Fatalf("event of an unknown grab %s", g.RequestID)
		}
		key := fmt.Sprintf("%d:%d", s, p)
		if b > 0 {
			key += ":" + strconv.Itoa(b)
		}
		if g.Bucket != b || string(m.Key) != key {
			t.Fatalf("event %s: bucket %d key %q, want %d %q", g.RequestID, g.Bucket, m.Key, b, key)
		}
		if (b == 0) == strings.Contains(string(m.Value), `"bucket"`) {
			t.Fatalf("event %s of bucket %d: %s", g.RequestID, b, m.Value)
		}
		seen++
	}
	if seen != users {
		t.Fatalf("%d grab events, want %d", seen, users)
	}
}

// One user's concurrent grabs with different keys are all judged in the home bucket's
// slot: exactly the per-user limit is admitted, however many race.
func TestPerUserLimitAcrossBuckets(t *testing.T) {
	const n, limit, users, tries = 4, 2, 8, 12
	e := newBucketEnv(t, 200, n, limit)
	var mu sync.Mutex
	admitted := map[string]int{}
	other := map[string]int{}
	var wg sync.WaitGroup
	for u := range users {
		user := "racer-" + strconv.Itoa(u)
		tok := e.token(t, user)
		path := fmt.Sprintf("/api/v1/sessions/%d/prizes/%d/grab", e.open.ID, e.prize)
		for i := range tries {
			wg.Go(func() {
				a := e.request(t, "POST", path, tok, fmt.Sprintf("race-%d-%04d", u, i), "")
				mu.Lock()
				defer mu.Unlock()
				switch {
				case a.code == 202:
					admitted[user]++
				case a.code == 409 && a.body["error"] == "limit_reached":
				default:
					other[fmt.Sprintf("%d %v", a.code, a.body["error"])]++
				}
			})
		}
	}
	wg.Wait()
	if len(other) > 0 {
		t.Fatalf("unexpected answers %v", other)
	}
	for u := range users {
		user := "racer-" + strconv.Itoa(u)
		if admitted[user] != limit {
			t.Errorf("%s admitted %d times, want exactly %d", user, admitted[user], limit)
		}
	}
}

// A dry home bucket is not a sold-out while another bucket holds units or units are in
// flight: 503 rebalancing, and the bucket is flagged wanted. Once every bucket is empty and
// nothing is in flight, sold_out, and the prize-wide memo answers from then on.
func TestNoSoldOutWhileUnitsRemain(t *testing.T) {
	const n = 2
	e := newBucketEnv(t, 4, n, 1) // two units in each bucket
	s, p := e.open.ID, e.prize
	ctx := context.Background()
	zero, one := usersOf("zero-", 0, n, 5), usersOf("one-", 1, n, 3)
	expect(t, "bucket 0, first unit", e.grab(t, e.open, p, zero[0], "z0-key-001"), 202, "")
	expect(t, "bucket 0, last unit", e.grab(t, e.open, p, zero[1], "z1-key-001"), 202, "")

	dry := e.grab(t, e.open, p, zero[2], "z2-key-001")
	expect(t, "bucket 0 dry, bucket 1 holds two", dry, 503, "rebalancing")
	if dry.hdr.Get("Retry-After") != "1" || dry.body["request_id"] != seckill.UserRequestID(s, p, zero[2], "z2-key-001") {
		t.Fatalf("rebalancing answer: %v %v", dry.hdr, dry.body)
	}
	if ttl, err := e.rdb.PTTL(ctx, stock.BucketKeysFor(s, p, 0, n).Wanted()).Result(); err != nil || ttl <= 0 {
		t.Fatalf("bucket 0's wanted flag: ttl %s %v", ttl, err)
	}
	if n, err := e.rdb.Exists(ctx, stock.BucketKeysFor(s, p, 1, n).Wanted()).Result(); err != nil || n != 0 {
		t.Fatal("bucket 1 flagged wanted")
	}
	// No prize-wide sold-out memo was set: a keyless grab asks Redis and hears the same.
	expect(t, "keyless, bucket 0 dry", e.grab(t, e.open, p, zero[3], ""), 503, "rebalancing")
	// A retry with the same key is a fresh attempt: nothing was admitted.
	expect(t, "retry, bucket 0 still dry", e.grab(t, e.open, p, zero[2], "z2-key-001"), 503, "rebalancing")

	expect(t, "bucket 1, first unit", e.grab(t, e.open, p, one[0], "o0-key-001"), 202, "")
	// Bucket 1's last unit is taken by a transfer (step 2): every left is 0, one unit in flight.
	if k, err := e.gate.Take(ctx, s, p, 1, n, 77, 1, 1); err != nil || k != 1 {
		t.Fatalf("take: %d %v", k, err)
	}
	expect(t, "every left 0, a unit in flight", e.grab(t, e.open, p, zero[2], "z2-key-001"), 503, "rebalancing")
	expect(t, "bucket 1 empty, a unit in flight", e.grab(t, e.open, p, one[1], "o1-key-001"), 503, "rebalancing")
	// The transfer ends: bucket 0 gets the unit, and its user gets it.
	if _, err := e.gate.Give(ctx, s, p, 0, n, 77, 1, 1, 1, time.Now().Add(time.Hour), 1); err != nil {
		t.Fatal(err)
	}
	expect(t, "the moved unit", e.grab(t, e.open, p, zero[2], "z2-key-001"), 202, "")

	// Every bucket empty, nothing in flight: a sold-out, final, and memoised for the prize.
	expect(t, "sold out everywhere", e.grab(t, e.open, p, zero[4], "z4-key-001"), 409, "sold_out")
	expect(t, "sold out from the memo", e.grab(t, e.open, p, one[2], ""), 409, "sold_out")
}

// The demand the gateway counted per bucket (admitted and sold_out answers, not limits) is
// added to each bucket's demand key at a flush, and the counters start again from zero.
func TestBucketDemandIsFlushed(t *testing.T) {
	const n = 2
	e := newBucketEnv(t, 2, n, 1) // one unit in each bucket
	s, p := e.open.ID, e.prize
	ctx := context.Background()
	zero := usersOf("dz-", 0, n, 3)
	expect(t, "admitted", e.grab(t, e.open, p, zero[0], "dz0-key-01"), 202, "")
	expect(t, "limit", e.grab(t, e.open, p, zero[0], "dz0-key-02"), 409, "limit_reached")
	expect(t, "dry", e.grab(t, e.open, p, zero[1], "dz1-key-01"), 503, "rebalancing")
	expect(t, "dry again", e.grab(t, e.open, p, zero[2], "dz2-key-01"), 503, "rebalancing")
	e.router.flush(ctx, time.Now())
	demand := func(b int) int64 {
		v, err := e.rdb.Get(ctx, stock.BucketKeysFor(s, p, b, n).Demand()).Int64()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		return v
	}
	if d0, d1 := demand(0), demand(1); d0 != 3 || d1 != 0 {
		t.Fatalf("demand %d, %d; want 3 (one admitted, two sold_out), 0", d0, d1)
	}
	if ttl, err := e.rdb.PTTL(ctx, stock.BucketKeysFor(s, p, 0, n).Demand()).Result(); err != nil || ttl <= 0 {
		t.Fatalf("demand key ttl %s %v", ttl, err)
	}
	e.router.flush(ctx, time.Now()) // nothing new: nothing added
	if d0 := demand(0); d0 != 3 {
		t.Fatalf("demand after an empty flush %d, want 3", d0)
	}
}

// A prize without buckets served by a gateway with the router: the same keys, the same
// event, byte for byte, and no bucket key written.
func TestGrabWithoutBucketsUnchanged(t *testing.T) {
	e := newGrabEnv(t, 1, 5, 1, func(a *API) {
		a.buckets = newBucketRouter(a.gate.(*stock.Gate), a.schedule.(*schedule.Cache), time.Nanosecond, time.Minute, a.log)
	})
	ok := e.grab(t, e.open, e.prizeA, "alice", "alice-key-0001")
	expect(t, "admitted", ok, 202, "")
	expect(t, "sold out", e.grab(t, e.open, e.prizeA, "bob", "bob-key-00001"), 409, "sold_out")
	e.api.buckets.flush(context.Background(), time.Now())
	ctx := context.Background()
	tag := fmt.Sprintf("sk:{%d:%d", e.open.ID, e.prizeA)
	for _, pat := range []string{tag + "}:dem", tag + "}:want", tag + ":*"} {
		keys, err := e.rdb.Keys(ctx, pat).Result()
		if err != nil {
			t.Fatalf("keys %s: %v", pat, err)
		}
		if len(keys) != 0 {
			t.Fatalf("keys %v written for a prize without buckets", keys)
		}
	}
	msgs, err := harness.ReadTopic(stacktest.Context(t, 30*time.Second), e.brokers, e.topics.Grab)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("%d events (%v), want 1", len(msgs), err)
	}
	g := seckill.Grab{RequestID: ok.body["request_id"].(string), UserID: "alice", SessionID: e.open.ID, PrizeID: e.prizeA}
	got, err := event.DecodeGrab(msgs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	g.AdmittedAt = got.AdmittedAt
	want, _ := event.EncodeGrab(g)
	if string(msgs[0].Key) != fmt.Sprintf("%d:%d", e.open.ID, e.prizeA) || string(msgs[0].Value) != string(want.Value) {
		t.Fatalf("event %q %s, want %q %s", msgs[0].Key, msgs[0].Value, want.Key, want.Value)
	}
}
