package main

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-pipeline/seckill/pkg/auth"
)

func TestClientIPs(t *testing.T) {
	proxies := newClientIPs([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.2/32"),
		netip.MustParsePrefix("2001:db8:ffff::/48")})
	tests := []struct {
		name    string
		clients *clientIPs
		peer    string
		xff     []string // header lines, in order
		want    string
	}{
		{"no trusted proxies: the peer, header ignored", nil, "198.51.100.7:5000", []string{"203.0.113.1"}, "198.51.100.7"},
		{"untrusted peer: header ignored", proxies, "198.51.100.7:5000", []string{"203.0.113.1"}, "198.51.100.7"},
		{"trusted peer: the address it forwarded for", proxies, "127.0.0.2:5000", []string{"203.0.113.1"}, "203.0.113.1"},
		{"trusted peer without the header: the peer", proxies, "127.0.0.2:5000", nil, "127.0.0.2"},
		{"client-written entries left of the proxy's are not read", proxies, "127.0.0.2:5000",
			[]string{"192.0.2.66, 203.0.113.1"}, "203.0.113.1"},
		{"a spoofed header line before the proxy's own line", proxies, "127.0.0.2:5000",
			[]string{"192.0.2.66", "203.0.113.1"}, "203.0.113.1"},
		{"a chain of trusted proxies is skipped", proxies, "10.0.0.1:5000",
			[]string{"203.0.113.1, 10.0.0.9", "127.0.0.2"}, "203.0.113.1"},
		{"the right-most untrusted address, not the left-most", proxies, "10.0.0.1:5000",
			[]string{"192.0.2.66, 203.0.113.1, 10.0.0.9"}, "203.0.113.1"},
		{"every hop trusted: the left-most", proxies, "10.0.0.1:5000", []string{"10.0.0.8, 10.0.0.9"}, "10.0.0.8"},
		{"garbage passed on by a trusted proxy: that proxy's bucket", proxies, "127.0.0.2:5000",
			[]string{"203.0.113.1, 10.0.0.9, unknown"}, "127.0.0.2"},
		{"garbage further left stops at the last address read", proxies, "127.0.0.2:5000",
			[]string{"evil, 10.0.0.9"}, "10.0.0.9"},
		{"an entry with a port", proxies, "127.0.0.2:5000", []string{"203.0.113.1:4711"}, "203.0.113.1"},
		{"IPv6 in brackets with a port", proxies, "127.0.0.2:5000", []string{"[2001:db8::1]:4711"}, "2001:db8::1"},
		{"IPv6 in brackets", proxies, "127.0.0.2:5000", []string{"[2001:db8::1]"}, "2001:db8::1"},
		{"IPv4-mapped IPv6 is IPv4", proxies, "127.0.0.2:5000", []string{"::ffff:203.0.113.1"}, "203.0.113.1"},
		{"an IPv6 trusted peer", proxies, "[2001:db8:ffff::5]:443", []string{"203.0.113.1"}, "203.0.113.1"},
		{"an IPv4-mapped trusted peer", proxies, "[::ffff:10.1.1.1]:443", []string{"203.0.113.1"}, "203.0.113.1"},
		{"an unparseable peer is used as it is", proxies, "@unix", []string{"203.0.113.1"}, "@unix"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tc.peer
			for _, v := range tc.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			if got := tc.clients.of(r); got != tc.want {
				t.Fatalf("client of peer %s with X-Forwarded-For %q = %q, want %q", tc.peer, tc.xff, got, tc.want)
			}
		})
	}
}

// Through the real gateway: the per-IP bucket is the forwarded client's only when the peer
// is a trusted proxy (here the test itself, on 127.0.0.1); otherwise every request from
// the proxy shares one bucket, whatever X-Forwarded-For says.
func TestPerIPLimitBehindTrustedProxy(t *testing.T) {
	limits := map[string]string{"SECKILL_RATE_PER_IP": "1", "SECKILL_BURST_PER_IP": "2"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range limits {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	poll := func(t *testing.T, pub string, xff ...string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+pub+"/api/v1/grabs/1-1-some-key-0001", nil)
		for _, v := range xff {
			req.Header.Add("X-Forwarded-For", v)
		}
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// Past the per-IP limit the poll answers 401 (no token); over it, 429.
	t.Run("trusted", func(t *testing.T) {
		pub, _ := startGateway(t, with("SECKILL_TRUSTED_PROXIES", "127.0.0.1/32"))
		for i, want := range []int{401, 401, 429} {
			if got := poll(t, pub, "203.0.113.1"); got != want {
				t.Fatalf("client A request %d: %d, want %d", i+1, got, want)
			}
		}
		if got := poll(t, pub, "203.0.113.2"); got != 401 {
			t.Fatalf("client B after client A was limited: %d, want 401 (a bucket of its own)", got)
		}
		// Client A claiming to be B: the entry the proxy appended (A) is the one that counts.
		if got := poll(t, pub, "203.0.113.2, 203.0.113.1"); got != 429 {
			t.Fatalf("client A spoofing B: %d, want 429 (A's bucket)", got)
		}
	})
	t.Run("not trusted", func(t *testing.T) {
		pub, _ := startGateway(t, with())
		for i, want := range []int{401, 401} {
			if got := poll(t, pub, "203.0.113.1"); got != want {
				t.Fatalf("request %d: %d, want %d", i+1, got, want)
			}
		}
		if got := poll(t, pub, "203.0.113.2"); got != 429 {
			t.Fatalf("another forwarded address from an untrusted peer: %d, want 429 (one bucket: the peer's)", got)
		}
	})
}

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
	a := &grabAPI{verifier: verifier, userHeader: "X-User-Id", metrics: newMetrics(prometheus.NewRegistry()),
		clients:     newClientIPs([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}),
		userProxies: newClientIPs([]netip.Prefix{netip.MustParsePrefix("10.9.9.9/32")})}
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
