package stock

import (
	"slices"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// BenchmarkGrabAdmissionArgs counts the allocations of building one grab's admission
// script call (keys and arguments), part of the gateway's grab hot path:
//
//	go test -run '^$' -bench Grab -benchmem ./pkg/stock/
func BenchmarkGrabAdmissionArgs(b *testing.B) {
	g := seckill.Grab{RequestID: seckill.RequestID(12, 34, "bench-key-000001"), UserID: "bench-user-1",
		SessionID: 12, PrizeID: 34, AdmittedAt: time.Now()}
	// A bucket ≥ 1 of a prize of 4 adds its tag's search (placement.go).
	bucketed := g
	bucketed.Bucket, bucketed.Buckets = 3, 4
	for name, g := range map[string]seckill.Grab{"bucket 0": g, "bucket 3 of 4": bucketed} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				keys, args := reserveArgs(g)
				if len(keys) != 4 || len(args) != 3 {
					b.Fatal(keys, args)
				}
			}
		})
	}
}

// The script's keys built on the hot path are exactly those of KeysFor.
func TestReserveArgsKeysAreKeysFor(t *testing.T) {
	for _, k := range []seckill.SessionPrize{{Session: 1, Prize: 1}, {Session: 12, Prize: 34}, {Session: 9007199254740993, Prize: 7}} {
		g := seckill.Grab{RequestID: "r", UserID: "u", SessionID: k.Session, PrizeID: k.Prize, AdmittedAt: time.UnixMilli(1234)}
		keys, args := reserveArgs(g)
		if want := KeysFor(k.Session, k.Prize).all(); !slices.Equal(keys, want) {
			t.Fatalf("keys %v, want %v", keys, want)
		}
		if !slices.Equal(args, []any{"r", "u", int64(1234)}) {
			t.Fatalf("args %v", args)
		}
	}
}
