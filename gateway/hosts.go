package main

import (
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/seckill-pipeline/seckill/gateway/jsonapi"
)

// adminHosts are the Host headers the admin listener answers, its guard against DNS
// rebinding: a page on evil.example whose name an attacker re-points at the admin address
// makes the browser send "Host: evil.example", so only names the listener is meant to be
// reached by pass. Those are localhost, the listener's own name (SECKILL_ADMIN_ADDR) and
// SECKILL_ADMIN_HOSTS; and any IP address, because a rebinding attack needs a name of the
// attacker's (a page whose origin is the address itself is the listener's own origin).
// The port is checked only where an allowed name gives one: a published or proxied port
// differs from the one the gateway listens on, and the name is what tells a rebound
// request apart.
type adminHosts struct {
	anyPort map[string]bool // host names, lower case, no trailing dot
	exact   map[string]bool // "name:port"
}

func newAdminHosts(listen string, names []string) *adminHosts {
	h := &adminHosts{anyPort: map[string]bool{"localhost": true}, exact: map[string]bool{}}
	if host, _, err := net.SplitHostPort(listen); err == nil && host != "" {
		h.anyPort[normalHost(host)] = true
	}
	for _, n := range names {
		if host, port, err := net.SplitHostPort(n); err == nil {
			h.exact[normalHost(host)+":"+port] = true
		} else {
			h.anyPort[normalHost(n)] = true
		}
	}
	return h
}

func normalHost(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

// allows reports whether the listener serves hostHeader (a request's Host).
func (h *adminHosts) allows(hostHeader string) bool {
	if hostHeader == "" { // HTTP/1.0 without Host: not a browser's
		return true
	}
	host, port, err := net.SplitHostPort(hostHeader)
	if err != nil {
		host, port = hostHeader, ""
	}
	host = normalHost(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	return h.anyPort[host] || (port != "" && h.exact[host+":"+port])
}

// guard answers 421 for a Host the listener does not serve, before anything else runs.
func (h *adminHosts) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.allows(r.Host) {
			jsonapi.WriteError(w, http.StatusMisdirectedRequest, "misdirected_request",
				"this listener does not serve that host name (a guard against DNS rebinding); "+
					"reach it by IP address or localhost, or add the name to SECKILL_ADMIN_HOSTS")
			return
		}
		next.ServeHTTP(w, r)
	})
}
