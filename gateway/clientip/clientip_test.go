package clientip

import (
	"net/http/httptest"
	"net/netip"
	"testing"
)

func TestClientIPs(t *testing.T) {
	proxies := New([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.2/32"),
		netip.MustParsePrefix("2001:db8:ffff::/48")})
	tests := []struct {
		name    string
		clients *Proxies
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
			if got := tc.clients.Of(r); got != tc.want {
				t.Fatalf("client of peer %s with X-Forwarded-For %q = %q, want %q", tc.peer, tc.xff, got, tc.want)
			}
		})
	}
}

func TestIPBucket(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.1":                     "192.0.2.1",
		"2001:db8:1:2:3:4:5:6":          "2001:db8:1:2::/64",
		"2001:DB8:1:2::9":               "2001:db8:1:2::/64",
		"::ffff:192.0.2.1":              "192.0.2.1",
		"fe80::1%eth0":                  "fe80::/64",
		"@unix":                         "@unix",
		"":                              "",
		"2001:db8:ffff:ffff:ffff:1:2:3": "2001:db8:ffff:ffff::/64",
	} {
		if got := Bucket(in); got != want {
			t.Errorf("Bucket(%q) = %q, want %q", in, got, want)
		}
	}
}
