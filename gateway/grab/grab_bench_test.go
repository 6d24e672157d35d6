package grab

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/gateway/jsonapi"
	"github.com/seckill-pipeline/seckill/pkg/auth"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// discardWriter is a ResponseWriter that keeps nothing, so the response benchmark counts
// the handler's allocations and not a recorder's.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(int)             {}

// BenchmarkGrab counts the allocations of each in-process step of the grab hot path, for a
// flash crowd where every user is new (so the verifier's cache never hits). Allocation
// counts are the figure to read; timings on a shared machine are not:
//
//	go test -run '^$' -bench Grab -benchmem ./gateway/grab/ ./pkg/stock/
//
// (The admission script's argument building is counted in pkg/stock, where it lives.)
func BenchmarkGrab(b *testing.B) {
	now := time.Now()
	b.Run("verify new user", func(b *testing.B) {
		v, err := auth.NewVerifier([]byte(jwtSecret), "seckill-test", "seckill-gateway", time.Now)
		if err != nil {
			b.Fatal(err)
		}
		s := auth.NewSigner([]byte(jwtSecret), "seckill-test", "seckill-gateway")
		toks := make([]string, b.N)
		for i := range toks {
			if toks[i], err = s.Token(fmt.Sprintf("bench-user-%d", i), now, time.Hour); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if _, err := v.User(toks[i]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parse request", func(b *testing.B) {
		r := httptest.NewRequest("POST", "/api/v1/sessions/12/prizes/34/grab", http.NoBody)
		r.SetPathValue("session", "12")
		r.SetPathValue("prize", "34")
		r.Header.Set("Idempotency-Key", "bench-key-000001")
		w := &discardWriter{h: http.Header{}}
		b.ReportAllocs()
		for range b.N {
			if _, err := parseGrab(w, r); err != nil {
				b.Fatal(err)
			}
		}
	})
	// A request id as the gateway makes one without an Idempotency-Key (a UUIDv7 key) for a
	// session id as big as a time-based one: the event's buffer must fit ids this long.
	g := seckill.Grab{RequestID: seckill.RequestID(1764633600123, 34, "01937f3c-5b2a-7c4e-9a1d-2f6b8e0c4d71"),
		UserID: "bench-user-123456", SessionID: 1764633600123, PrizeID: 34, AdmittedAt: now}
	b.Run("encode event", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := event.EncodeGrab(g); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("write response", func(b *testing.B) {
		w := &discardWriter{h: http.Header{}}
		b.ReportAllocs()
		for range b.N {
			clear(w.h)
			jsonapi.Write(w, http.StatusAccepted, grabView{RequestID: g.RequestID, Status: "queued"})
		}
	})
}
