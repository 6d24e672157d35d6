package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/internal/harness"
	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/exception"
	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// staleBuckets is N for the stale tests' prize: 2 units in each of 4 stock buckets.
const staleBuckets = 4

func newBucketedRecEnv(t *testing.T) *recEnv {
	t.Helper()
	return recEnvOf(t, stacktest.NewBucketedPrize(t, 2, staleBuckets, 1))
}

// userIn returns a user whose home bucket among n is b (stock.HomeBucket), named from prefix.
func userIn(t *testing.T, prefix string, b, n int) string {
	t.Helper()
	for i := range 10_000 {
		if u := fmt.Sprintf("%s-%d", prefix, i); stock.HomeBucket(u, n) == b {
			return u
		}
	}
	t.Fatalf("no user %s-* has home bucket %d of %d", prefix, b, n)
	return ""
}

// grabHome admits one grab of user in their home bucket, as the gateway does, and produces
// nothing: the gateway died between the admission and the produce.
func (e *recEnv) grabHome(user string) seckill.Grab {
	e.t.Helper()
	return e.grabHomeAt(user, time.Now())
}

// grabHomeAt is grabHome admitted at admitted (as grabAt: a reservation made old without
// sleeping).
func (e *recEnv) grabHomeAt(user string, admitted time.Time) seckill.Grab {
	e.t.Helper()
	e.seq++
	g := seckill.Grab{RequestID: seckill.RequestID(e.session, e.prize, fmt.Sprintf("key-%s-%04d", user, e.seq)),
		UserID: user, SessionID: e.session, PrizeID: e.prize, Bucket: stock.HomeBucket(user, staleBuckets), Buckets: staleBuckets, AdmittedAt: admitted.UTC()}
	if v, err := e.gate.Reserve(e.ctx, g); err != nil || v.Code != stock.Admitted {
		e.t.Fatalf("reserve %s in bucket %d: %s %v", user, g.Bucket, v.Code, err)
	}
	return g
}

// bucketSides reads every bucket's left: MySQL's rows and Redis's keys, and Redis's pending
// reservations.
func (e *recEnv) bucketSides() (mysql, redis []int, pending int64) {
	e.t.Helper()
	bs, err := store.NewCatalog(e.db, time.Now).Buckets(e.ctx, e.session, e.prize)
	if err != nil {
		e.t.Fatal(err)
	}
	rs, err := e.gate.Buckets(e.ctx, e.session, e.prize, staleBuckets)
	if err != nil {
		e.t.Fatal(err)
	}
	snaps, err := e.gate.BucketSnapshots(e.ctx, seckill.SessionPrize{Session: e.session, Prize: e.prize}, staleBuckets)
	if err != nil {
		e.t.Fatal(err)
	}
	for b := range staleBuckets {
		mysql = append(mysql, bs[b].Left)
		redis = append(redis, int(rs[b].Left))
		pending += snaps[b].Pending
	}
	return mysql, redis, pending
}

// waitBucketsSettled waits until no bucket holds a pending reservation.
func (e *recEnv) waitBucketsSettled() {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, _, pending := e.bucketSides()
		if pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%d reservations still pending in the buckets after 30s", pending)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// settledIn asserts that g's outcome is recorded on bucket b's keys as state, its reservation
// gone there, and that no other bucket knows it.
func (e *recEnv) settledIn(g seckill.Grab, b int, state string) stock.Lookup {
	e.t.Helper()
	var found stock.Lookup
	for other := range staleBuckets {
		l, err := e.gate.LookupBucket(e.ctx, g.RequestID, other, staleBuckets)
		if err != nil {
			e.t.Fatal(err)
		}
		switch {
		case other == b && (!l.Found || l.Status.State != state || l.Owner != g.UserID):
			e.t.Fatalf("%s on bucket %d's keys: %+v, want %s for %s", g.RequestID, b, l, state, g.UserID)
		case other != b && l.Found:
			e.t.Fatalf("%s found on bucket %d's keys (%+v); it was admitted in bucket %d", g.RequestID, other, l, b)
		}
		if other == b {
			found = l
		}
	}
	return found
}

// The invariant of issue 27's buckets: a 202 is never lost. A grab admitted in bucket >= 1
// (real Redis admission in the user's home bucket) whose gateway died before Kafka
// acknowledged its event becomes exactly one order in its bucket's row after one reconciler
// run and the real consumer: the re-published event carries the bucket and its key
// session:prize:b, the order's bucket is the admitting one, Redis settles on that bucket's
// keys, and every bucket's Redis left equals its row's. A second run changes nothing. A lost
// grab of bucket 0 of the same prize goes the old way (key session:prize, no bucket field).
func TestStaleReservationInABucketBecomesOneOrder(t *testing.T) {
	e := newBucketedRecEnv(t)
	e.startConsumer()
	// Older than SECKILL_STALE_AFTER.
	inTwo := e.grabHomeAt(userIn(t, "lost", 2, staleBuckets), time.Now().Add(-staleAge))
	inZero := e.grabHomeAt(userIn(t, "lost", 0, staleBuckets), time.Now().Add(-staleAge))
	rep, err := e.once()
	if err != nil {
		t.Fatal(err)
	}
	if s := jobOf(rep, "stale"); s.Summary["republished"] != 2 || s.Summary["stale"] != 2 {
		t.Fatalf("stale job %+v, want both lost grabs re-published", s)
	}
	e.waitOrders(2)
	e.waitBucketsSettled()
	for _, g := range []seckill.Grab{inTwo, inZero} {
		if n := e.orders("request_id = ? AND bucket = ? AND status = 'succeeded'", g.RequestID, g.Bucket); n != 1 {
			t.Fatalf("%s: %d succeeded orders in bucket %d, want 1", g.RequestID, n, g.Bucket)
		}
		e.settledIn(g, g.Bucket, "succeeded")
	}
	msgs, err := harness.ReadTopic(e.ctx, e.brokers, e.topics.Grab)
	if err != nil || len(msgs) != 2 {
		t.Fatalf("grab topic: %d events (%v), want the 2 re-published", len(msgs), err)
	}
	keys := map[string]int{}
	for _, m := range msgs {
		g, err := event.DecodeGrab(m.Value)
		if err != nil || !slices.ContainsFunc(m.Headers, func(h kafka.Header) bool { return h.Key == "republished-by" }) {
			t.Fatalf("re-published event %q %v, headers %v", m.Value, err, m.Headers)
		}
		keys[string(m.Key)] = g.Bucket
	}
	want := map[string]int{string(event.BucketPartitionKey(e.session, e.prize, 2)): 2, string(event.PartitionKey(e.session, e.prize)): 0}
	if fmt.Sprint(keys) != fmt.Sprint(want) {
		t.Fatalf("re-published keys and buckets %v, want %v", keys, want)
	}
	mysql, redis, _ := e.bucketSides()
	if !slices.Equal(mysql, []int{1, 2, 1, 2}) || !slices.Equal(redis, mysql) {
		t.Fatalf("after the consumer: MySQL left %v, Redis left %v; want [1 2 1 2] on both", mysql, redis)
	}

	// A second run finds nothing stale and changes nothing.
	rep, err = e.once()
	if s := jobOf(rep, "stale"); err != nil || s.Summary["stale"] != 0 || s.Summary["republished"] != 0 || e.orders("1=1") != 2 {
		t.Fatalf("second run: %+v %v, %d orders", s, err, e.orders("1=1"))
	}
	m2, r2, _ := e.bucketSides()
	if !slices.Equal(m2, mysql) || !slices.Equal(r2, redis) {
		t.Fatalf("second run moved stock: MySQL %v, Redis %v", m2, r2)
	}
	if msgs, err := harness.ReadTopic(e.ctx, e.brokers, e.topics.Grab); err != nil || len(msgs) != 2 {
		t.Fatalf("grab topic after the second run: %d events (%v), want 2", len(msgs), err)
	}
}

// A grab admitted in bucket >= 1 whose order MySQL holds but whose settlement never reached
// Redis (the consumer lost Redis after the commit) is settled on its bucket's keys by the
// stale job, not re-published; a second run finds nothing.
func TestStaleReservationInABucketWithItsOrderIsSettled(t *testing.T) {
	e := newBucketedRecEnv(t)
	g := e.grabHomeAt(userIn(t, "unsettled", 3, staleBuckets), time.Now().Add(-staleAge)) // older than SECKILL_STALE_AFTER
	res, err := store.NewOrders(e.db).Persist(e.ctx, e.session, e.prize, []seckill.Grab{g}, time.Now())
	if err != nil || len(res.Outcomes) != 1 || res.Bucket != 3 {
		t.Fatalf("persist: %+v %v", res, err)
	}
	rep, err := e.once()
	if s := jobOf(rep, "stale"); err != nil || s.Summary["settled"] != 1 || s.Summary["republished"] != 0 {
		t.Fatalf("stale job %+v %v, want the reservation settled, nothing re-published", s, err)
	}
	if l := e.settledIn(g, 3, "succeeded"); l.Status.OrderID != res.Outcomes[0].OrderID {
		t.Fatalf("outcome %+v, want order %d", l, res.Outcomes[0].OrderID)
	}
	mysql, redis, pending := e.bucketSides()
	if !slices.Equal(mysql, []int{2, 2, 2, 1}) || !slices.Equal(redis, mysql) || pending != 0 {
		t.Fatalf("MySQL left %v, Redis left %v, %d pending; want [2 2 2 1] on both, none pending", mysql, redis, pending)
	}
	if msgs, err := harness.ReadTopic(e.ctx, e.brokers, e.topics.Grab); err != nil || len(msgs) != 0 {
		t.Fatalf("grab topic: %d events (%v), want none", len(msgs), err)
	}
	rep, err = e.once()
	if s := jobOf(rep, "stale"); err != nil || s.Summary["stale"] != 0 || e.orders("1=1") != 1 {
		t.Fatalf("second run: %+v %v", s, err)
	}
}

// sentMessages records what a producer was asked to write.
type sentMessages []kafka.Message

func (s *sentMessages) WriteMessages(_ context.Context, msgs ...kafka.Message) error {
	*s = append(*s, msgs...)
	return nil
}

// The stale job asks whether a bucket's events are in flight on that bucket's partition
// (key session:prize:b), not on the prize's: a lost grab of bucket b waits (up to the bound)
// while b's partition lags, and is re-published, with its bucket and b's key, while only
// bucket 0's partition lags. A case for a person names the bucket. After the session's key
// grace, a pending reservation in bucket b alone still keeps the prize in the job's scope.
func TestStaleJobReadsTheBucketsPartition(t *testing.T) {
	op := stacktest.NewBucketedPrize(t, 2, staleBuckets, 1)
	ctx := stacktest.Context(t, 30*time.Second)
	// A partition count and a bucket whose partition is not bucket 0's.
	parts, b := 0, 0
	for p := 2; p <= 64 && b == 0; p++ {
		for c := 1; c < staleBuckets; c++ {
			if event.PartitionOf(event.BucketPartitionKey(op.SessionID, op.PrizeID, c), p) != event.PartitionOf(event.PartitionKey(op.SessionID, op.PrizeID), p) {
				parts, b = p, c
				break
			}
		}
	}
	if b == 0 {
		t.Fatal("every bucket's key lands on bucket 0's partition")
	}
	partOf := func(bucket int) int {
		return event.PartitionOf(event.BucketPartitionKey(op.SessionID, op.PrizeID, bucket), parts)
	}
	user := userIn(t, "waits", b, staleBuckets)
	g := seckill.Grab{RequestID: seckill.RequestID(op.SessionID, op.PrizeID, "key-waits"), UserID: user, SessionID: op.SessionID,
		PrizeID: op.PrizeID, Bucket: b, Buckets: staleBuckets, AdmittedAt: time.Now().UTC()}
	if v, err := op.Gate.Reserve(ctx, g); err != nil || v.Code != stock.Admitted {
		t.Fatalf("reserve in bucket %d: %v %v", b, v.Code, err)
	}
	l := lease.New(op.DB, "t-stale-"+stacktest.ID(t), time.Minute)
	h, ok, err := l.TryAcquire(ctx)
	if err != nil || !ok {
		t.Fatalf("lease: %v %v", ok, err)
	}
	lag := &payLag{lag: map[int]int64{partOf(b): 1}}
	var sent sentMessages
	var cases caseLog
	job := staleJob{catalog: store.NewCatalog(op.DB, time.Now), gate: op.Gate, orders: store.NewOrders(op.DB),
		lag: grabLag{reader: lag, group: "g", topic: event.Topic{Name: "t", Partitions: parts}}, grabs: &sent,
		stale: time.Second, bound: time.Hour, grace: time.Hour,
		republished: prometheus.NewCounter(prometheus.CounterOpts{Name: "r"}), settled: prometheus.NewCounter(prometheus.CounterOpts{Name: "s"}),
		cases: &cases, caseAfter: 30 * time.Second, log: slog.New(slog.DiscardHandler),
		now: func() time.Time { return time.Now().Add(time.Minute) }} // the reservation is a minute old

	res, err := job.Run(ctx, h.Fence)
	if err != nil || res.Summary["in_flight"] != 1 || res.Summary["republished"] != 0 || len(sent) != 0 {
		t.Fatalf("bucket %d's partition lagging: %+v %v, %d sent; want the reservation in flight", b, res.Summary, err, len(sent))
	}
	lag.lag = map[int]int64{partOf(0): 1}
	res, err = job.Run(ctx, h.Fence)
	if err != nil || res.Summary["republished"] != 1 || len(sent) != 1 {
		t.Fatalf("bucket 0's partition lagging: %+v %v, %d sent; want bucket %d's grab re-published", res.Summary, err, len(sent), b)
	}
	got, err := event.DecodeGrab(sent[0].Value)
	if err != nil || got.Bucket != b || got.UserID != user || string(sent[0].Key) != string(event.BucketPartitionKey(op.SessionID, op.PrizeID, b)) {
		t.Fatalf("re-published %q key %q (%v), want bucket %d keyed %s", sent[0].Value, sent[0].Key, err, b,
			event.BucketPartitionKey(op.SessionID, op.PrizeID, b))
	}
	if len(cases) != 1 || cases[0].RequestID != g.RequestID || !strings.Contains(fmt.Sprint(cases[0].Evidence), fmt.Sprintf("bucket:%d", b)) {
		t.Fatalf("cases %+v, want one naming bucket %d", cases, b)
	}

	// Past the key grace the job still looks at a prize whose only pending reservation is in
	// bucket b (bucket 0 has none), until it has its order.
	if err := op.DB.Exec("UPDATE sessions SET starts_at = ?, ends_at = ? WHERE id = ?",
		time.Now().UTC().Add(-3*time.Hour), time.Now().UTC().Add(-2*time.Hour), op.SessionID).Error; err != nil {
		t.Fatal(err)
	}
	res, err = job.Run(ctx, h.Fence)
	if err != nil || res.Summary["republished"] != 1 || len(sent) != 2 {
		t.Fatalf("session ended past the grace: %+v %v, %d sent; want bucket %d's grab re-published again", res.Summary, err, len(sent), b)
	}
}

// The workbench's replay looks for a grab's reservation on its stock bucket's keys: a dead
// letter of a grab admitted in bucket 1 (the bucket read from the event) and a stale case of
// one in bucket 3 (from the case's evidence, or, for a case that does not name it, the
// user's home bucket) are produced again, each with its bucket and key session:prize:b. A
// dead letter naming a bucket the prize does not have is refused for that reason.
func TestWorkbenchReplaysABucketsGrabs(t *testing.T) {
	e := newBucketedRecEnv(t)
	dead := e.grabHome(userIn(t, "dead", 1, staleBuckets))
	stale := e.grabHome(userIn(t, "stale", 3, staleBuckets))
	old := e.grabHome(userIn(t, "old", 2, staleBuckets))
	forged := seckill.Grab{RequestID: seckill.RequestID(e.session, e.prize, "key-forged"), UserID: "mallory", SessionID: e.session,
		PrizeID: e.prize, Bucket: staleBuckets, AdmittedAt: time.Now().UTC()}
	cases := store.NewExceptions(e.db)
	for _, g := range []seckill.Grab{dead, forged} {
		m, err := event.EncodeGrab(g)
		if err != nil {
			t.Fatal(err)
		}
		m.Topic = e.topics.Grab.Name
		if err := cases.Record(e.ctx, time.Now(), exception.DeadLetterReport(event.Poison{Msg: m, Cause: errors.New("mysql down")})); err != nil {
			t.Fatal(err)
		}
	}
	noBucket := exception.StaleReport(e.session, e.prize, stock.Reservation{RequestID: old.RequestID, UserID: old.UserID, AdmittedAt: old.AdmittedAt}, time.Hour)
	if err := cases.Record(e.ctx, time.Now(), noBucket, exception.StaleReport(e.session, e.prize,
		stock.Reservation{RequestID: stale.RequestID, UserID: stale.UserID, AdmittedAt: stale.AdmittedAt, Bucket: 3}, time.Hour)); err != nil {
		t.Fatal(err)
	}
	var grabs, comp sentMessages
	replayer := exception.NewReplayer(store.NewOrders(e.db), store.NewCatalog(e.db, time.Now), e.gate, e.topics, &grabs, &comp)
	byRID := map[string]store.Case{}
	for _, c := range append(e.cases(seckill.CaseDeadLetter), e.cases(seckill.CaseStaleReservation)...) {
		byRID[c.RequestID] = c
	}
	_, err := cases.Act(e.ctx, byRID[forged.RequestID].ID, store.ActReplay, "carol", "192.0.2.7", "", time.Now(), replayer.Replay)
	if !errors.Is(err, store.ErrNotReplayable) || !strings.Contains(err.Error(), "bucket") {
		t.Fatalf("replay of a grab of bucket %d: %v, want a refusal naming the bucket", staleBuckets, err)
	}
	for _, g := range []seckill.Grab{dead, stale, old} {
		if _, err := cases.Act(e.ctx, byRID[g.RequestID].ID, store.ActReplay, "carol", "192.0.2.7", "", time.Now(), replayer.Replay); err != nil {
			t.Fatalf("replay %s of bucket %d: %v", g.RequestID, g.Bucket, err)
		}
	}
	if len(grabs) != 3 || len(comp) != 0 {
		t.Fatalf("%d grabs and %d compensation events produced, want 3 and 0", len(grabs), len(comp))
	}
	for i, g := range []seckill.Grab{dead, stale, old} {
		got, err := event.DecodeGrab(grabs[i].Value)
		if err != nil || got.RequestID != g.RequestID || got.Bucket != g.Bucket || got.UserID != g.UserID ||
			string(grabs[i].Key) != string(event.BucketPartitionKey(e.session, e.prize, g.Bucket)) {
			t.Fatalf("replayed %q key %q (%v), want %s of bucket %d keyed %s", grabs[i].Value, grabs[i].Key, err, g.RequestID, g.Bucket,
				event.BucketPartitionKey(e.session, e.prize, g.Bucket))
		}
	}
}

// The compensation replay keeps a grab's stock bucket end to end: grabs of buckets 1 and 3
// (one of them twice) on the compensation topic become one order each in their bucket's
// row, settled on their bucket's keys, and each bucket's Redis left equals its row's.
func TestCompensationReplaysABucketsGrabs(t *testing.T) {
	e := newBucketedRecEnv(t)
	one := e.grabHome(userIn(t, "comp", 1, staleBuckets))
	three := e.grabHome(userIn(t, "comp", 3, staleBuckets))
	e.publish(e.topics.Compensation.Name, one, three, one)
	rep, err := e.once()
	if c := jobOf(rep, "compensation"); err != nil || c.Summary["replayed"] != 3 || c.Summary["succeeded"] != 2 {
		t.Fatalf("compensation job %+v %v, want 3 replayed, 2 succeeded", c, err)
	}
	for _, g := range []seckill.Grab{one, three} {
		if n := e.orders("request_id = ? AND bucket = ? AND status = 'succeeded'", g.RequestID, g.Bucket); n != 1 {
			t.Fatalf("%s: %d succeeded orders in bucket %d, want 1", g.RequestID, n, g.Bucket)
		}
		e.settledIn(g, g.Bucket, "succeeded")
	}
	mysql, redis, pending := e.bucketSides()
	if !slices.Equal(mysql, []int{2, 1, 2, 1}) || !slices.Equal(redis, mysql) || pending != 0 || e.orders("1=1") != 2 {
		t.Fatalf("MySQL left %v, Redis left %v, %d pending, %d orders; want [2 1 2 1] on both, none pending, 2 orders",
			mysql, redis, pending, e.orders("1=1"))
	}
}
