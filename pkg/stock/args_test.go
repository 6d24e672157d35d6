package stock

import (
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
	b.ReportAllocs()
	for range b.N {
		keys, args := reserveArgs(g)
		if len(keys) != 4 || len(args) != 3 {
			b.Fatal(keys, args)
		}
	}
}
