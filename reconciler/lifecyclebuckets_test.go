package main

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// The lifecycle job's keep step looks at every stock bucket of a prize with buckets: a
// reservation pending in bucket 2 keeps bucket 2's keys past their expiry, as one in bucket
// 0 keeps bucket 0's; a bucket with nothing pending is left to expire.
func TestKeepKeepsEveryBucketWithPending(t *testing.T) {
	s := newBucketSale(t, stacktest.Redis(t)) // one grab pending in bucket 0
	ctx := stacktest.Context(t, 30*time.Second)
	s.admitIn(t, 2, "u2", "k2")
	// The buckets were loaded to expire in two hours; the job keeps keys that would expire
	// within its grace (three hours here) while something is pending.
	grace := 3 * time.Hour
	j := lifecycleJob{catalog: s.cat, gate: s.gate, grace: grace, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	sessions, err := s.cat.SessionsOverlapping(ctx, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var ours []seckill.Session
	for _, sess := range sessions {
		if sess.ID == s.sid {
			ours = append(ours, sess)
		}
	}
	sum := map[string]int64{}
	now := time.Now()
	if err := j.keep(ctx, s.acquire(t), now, ours, sum); err != nil {
		t.Fatal(err)
	}
	if sum["keys_extended_pending"] != 2 {
		t.Errorf("kept %d buckets' keys, want 2 (buckets 0 and 2)", sum["keys_extended_pending"])
	}
	for b := range saleBuckets {
		ttl, err := s.rdb.PTTL(ctx, stock.BucketKeysFor(s.sid, s.pid, b, saleBuckets).Meta).Result()
		if err != nil {
			t.Fatal(err)
		}
		kept := ttl > 2*time.Hour+30*time.Minute
		if want := b == 0 || b == 2; kept != want {
			t.Errorf("bucket %d: TTL %v, kept %v, want kept %v", b, ttl, kept, want)
		}
	}
}

// The final report of a prize with buckets waits for a grab pending in any bucket, not only
// bucket 0: a report is written once, and one written before a bucket-2 grab settles would
// be short of it for good.
func TestReportWaitsForEveryBucket(t *testing.T) {
	s := newBucketSale(t, stacktest.Redis(t)) // one grab pending in bucket 0
	ctx := stacktest.Context(t, 30*time.Second)
	s.admitIn(t, 2, "u2", "k2")
	// Bucket 0's grab gone from its keys (as once its order settled it): only bucket 2 holds one.
	if err := s.rdb.Del(ctx, stock.BucketKeysFor(s.sid, s.pid, 0, saleBuckets).Reserved).Err(); err != nil {
		t.Fatal(err)
	}
	sess, err := s.cat.Session(ctx, s.sid)
	if err != nil {
		t.Fatal(err)
	}
	after := sess.End.Add(time.Minute) // the session has ended; its keys are within their grace
	j := lifecycleJob{catalog: s.cat, gate: s.gate, orders: store.NewOrders(s.db), returns: store.NewReturns(s.db),
		grace: 3 * time.Hour, log: slog.New(slog.NewTextHandler(io.Discard, nil)), now: func() time.Time { return after }}
	res, err := j.Run(ctx, s.acquire(t))
	if err != nil {
		t.Fatal(err)
	}
	if res.Summary["reports"] != 0 || res.Summary["report_pending"] != 1 {
		t.Fatalf("reports %d, report_pending %d; want no report while bucket 2 holds a grab (0 and 1)",
			res.Summary["reports"], res.Summary["report_pending"])
	}
	if done, err := s.cat.Reported(ctx, s.sid, s.pid); err != nil || done {
		t.Fatalf("reported %v (%v): the report was written with a grab pending in bucket 2", done, err)
	}
}
