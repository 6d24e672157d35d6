package main

import (
	"net/http"
	"testing"
	"time"
)

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
