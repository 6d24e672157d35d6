package grab

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/gateway/admission"
	"github.com/seckill-pipeline/seckill/gateway/ratelimit"
)

// An IPv6 client gets a /64 from its provider, so keyed by the full address it would have
// 2^64 buckets: the per-IP limit keys IPv6 by its /64, IPv4 by the address.
func TestPerIPLimitKeysIPv6ByItsSlash64(t *testing.T) {
	a := &API{inflight: make(chan struct{}, 10), metrics: testMetrics(), admission: admission.New(admission.Config{Max: 10}),
		perIP: ratelimit.NewKeyed(0.001, 1, 100, time.Now)}
	h := a.guard("status", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	from := func(peer string) int {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = peer
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	for _, tc := range []struct {
		peer string
		want int
	}{
		{"[2001:db8:1:2::1]:4000", 200},
		{"[2001:db8:1:2::2]:4000", 429},                  // same /64, another address
		{"[2001:db8:1:2:ffff:ffff:ffff:ffff]:4000", 429}, // the /64's last address
		{"[2001:db8:1:3::1]:4000", 200},                  // the next /64
		{"192.0.2.1:4000", 200},
		{"192.0.2.2:4000", 200}, // IPv4: one bucket per address
		{"[::ffff:192.0.2.3]:4000", 200},
		{"[::ffff:192.0.2.3]:4001", 429}, // IPv4-mapped: the IPv4 address's bucket
	} {
		if got := from(tc.peer); got != tc.want {
			t.Errorf("request from %s: %d, want %d", tc.peer, got, tc.want)
		}
	}
}
