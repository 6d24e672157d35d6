package grab

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/gateway/clientip"
	"github.com/seckill-pipeline/seckill/pkg/auth"
)

// The trusted user header names the user only on requests from a trusted proxy: anyone
// else who reaches the gateway directly is judged by their bearer token, whatever header
// they send (I6).
func TestUserHeaderOnlyFromTrustedProxies(t *testing.T) {
	verifier, err := auth.NewVerifier([]byte(jwtSecret), "seckill", "seckill-gateway", time.Now)
	if err != nil {
		t.Fatal(err)
	}
	signer := auth.NewSigner([]byte(jwtSecret), "seckill", "seckill-gateway")
	bob, err := signer.Token("bob", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// Two lists: the X-Forwarded-For proxies (10.0.0.0/8) and the auth proxy that sets the
	// user header (10.9.9.9). Being trusted to name the client's address is not being
	// trusted to name the user: a load balancer in 10/8 forwards clients' headers as sent.
	a := &API{verifier: verifier, userHeader: "X-User-Id", metrics: testMetrics(),
		clients:     clientip.New([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}),
		userProxies: clientip.New([]netip.Prefix{netip.MustParsePrefix("10.9.9.9/32")})}
	for _, tc := range []struct {
		name, peer, header, bearer string
		want                       string // "" = 401
	}{
		{"the auth proxy names the user", "10.9.9.9:4000", "alice", "", "alice"},
		{"the auth proxy without the header", "10.9.9.9:4000", "", "", ""},
		{"an X-Forwarded-For proxy passing a client's header on", "10.0.0.7:4000", "alice", "", ""},
		{"an X-Forwarded-For proxy passing a client's token on", "10.0.0.7:4000", "alice", bob, "bob"},
		{"a direct client naming a user", "198.51.100.7:4000", "alice", "", ""},
		{"a direct client naming a user beside its own token", "198.51.100.7:4000", "alice", bob, "bob"},
		{"a direct client with its token", "198.51.100.7:4000", "", bob, "bob"},
		{"a direct client through a proxy it forged in X-Forwarded-For", "198.51.100.7:4000", "alice", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/", nil)
			r.RemoteAddr = tc.peer
			r.Header.Set("X-Forwarded-For", "10.0.0.9")
			if tc.header != "" {
				r.Header.Set("X-User-Id", tc.header)
			}
			if tc.bearer != "" {
				r.Header.Set("Authorization", "Bearer "+tc.bearer)
			}
			w := httptest.NewRecorder()
			got, ok := a.user(w, r)
			switch {
			case tc.want == "" && (ok || w.Code != http.StatusUnauthorized):
				t.Fatalf("user = %q, %v (status %d), want 401", got, ok, w.Code)
			case tc.want != "" && (!ok || got != tc.want):
				t.Fatalf("user = %q, %v (status %d), want %q", got, ok, w.Code, tc.want)
			}
		})
	}
}
