// Package clientip names the client behind a request: its address as far as trusted proxies
// vouch for it, and the key a per-client limit counts it under (an IPv6 /64 is one client).
package clientip

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Proxies names the client of a request for the per-IP rate limits. Behind a reverse
// proxy every request's peer is the proxy, so keyed by peer the per-IP buckets would
// collapse into one bucket for every client. The proxy names its client in
// X-Forwarded-For, but a client can send that header too, so it is believed only as far
// as trusted proxies vouch for it: when the peer is trusted, the header's addresses are
// read from the right (each was appended by the hop to its right), skipping trusted
// proxies, and the first untrusted one is the client. What a client wrote further left is
// never reached. A nil *Proxies (no trusted proxies) always answers the peer's address.
type Proxies struct {
	trusted []netip.Prefix
}

// New returns the Proxies that trusts the given networks; nil when there are none.
func New(trusted []netip.Prefix) *Proxies {
	if len(trusted) == 0 {
		return nil
	}
	return &Proxies{trusted: trusted}
}

func (c *Proxies) isTrusted(a netip.Addr) bool {
	for _, p := range c.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// PeerTrusted reports whether r came straight from a trusted proxy: only then is a header
// the proxy sets on its clients' behalf its words rather than the client's. The gateway
// keeps one list per header (X-Forwarded-For, the trusted user header): a proxy is trusted
// with what it overwrites, not with everything it passes on.
func (c *Proxies) PeerTrusted(r *http.Request) bool {
	if c == nil {
		return false
	}
	peer, ok := parseHop(Peer(r))
	return ok && c.isTrusted(peer)
}

// Of returns the client address of r.
func (c *Proxies) Of(r *http.Request) string {
	if c == nil {
		return Peer(r)
	}
	peer, ok := parseHop(Peer(r))
	if !ok || !c.isTrusted(peer) {
		return Peer(r)
	}
	var hops []string
	for _, line := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(line, ",")...)
	}
	at := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := parseHop(hops[i])
		if !ok {
			// A trusted proxy (at) passed on something that is not an address: the client
			// cannot be named past it, so its clients share its bucket.
			return at.String()
		}
		at = a
		if !c.isTrusted(a) {
			return a.String()
		}
	}
	// Every hop is a trusted proxy (or the header is absent): the left-most one is the
	// client as far as anyone can tell.
	return at.String()
}

// parseHop reads one X-Forwarded-For entry: an IPv4 or IPv6 address, optionally with a
// port ("192.0.2.1:4711", "[2001:db8::1]:4711") or in brackets; IPv4-mapped IPv6 addresses
// are read as IPv4, so one client has one bucket.
func parseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return a.Unmap(), true
		}
	}
	return netip.Addr{}, false
}

// Peer is the address of r's peer: the client, or the proxy it came through.
func Peer(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// Bucket names the per-IP bucket of a client address: an IPv4 address is its own bucket,
// an IPv6 address shares its /64 (what one subscriber, or one host's privacy addresses,
// get: keyed by the full address, a single client would have 2^64 buckets). IPv4-mapped
// IPv6 counts as IPv4; something that is not an address is used as it is.
func Bucket(addr string) string {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return addr
	}
	a = a.Unmap()
	if a.Is4() {
		if a.Zone() == "" && len(addr) <= len("255.255.255.255") {
			return addr // already canonical: no allocation on the hot path
		}
		return a.String()
	}
	p, _ := a.WithZone("").Prefix(64)
	return p.String()
}
