package main

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
)

// The lifecycle job's keep step looks at every stock bucket of a prize with buckets: a
// reservation pending in bucket 2 keeps bucket 2's keys past their expiry, as one in bucket
// 0 keeps bucket 0's; a bucket with nothing pending is left to expire.
func TestKeepKeepsEveryBucketWithPending(t *testing.T) {
	s := newBucketSale(t, stacktest.Redis(t)) // one grab pending in bucket 0
	ctx := stacktest.Context(t, 30*time.Second)
	v, err := s.gate.Reserve(ctx, seckill.Grab{RequestID: seckill.RequestID(s.sid, s.pid, "k2"), UserID: "u2",
		SessionID: s.sid, PrizeID: s.pid, Bucket: 2, Buckets: saleBuckets, AdmittedAt: time.Now()})
	if err != nil || v.Code != stock.Admitted {
		t.Fatalf("admit one grab in bucket 2: %+v %v", v, err)
	}
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
