// Package config turns environment variables into typed, validated configuration for the
// three deployables. Every variable has a documented default (README, "Configuration");
// secrets have none and must be set.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// reader reads typed values from a getenv function and collects every problem, so a
// misconfigured service reports all of its bad variables at once.
type reader struct {
	getenv func(string) string
	errs   []error
}

func (r *reader) str(key, def string) string {
	if v := strings.TrimSpace(r.getenv(key)); v != "" {
		return v
	}
	return def
}

func (r *reader) secret(key string, minLen int) string {
	v := r.getenv(key)
	switch {
	case v == "":
		r.errs = append(r.errs, fmt.Errorf("%s is required", key))
	case len(v) < minLen:
		r.errs = append(r.errs, fmt.Errorf("%s must be at least %d bytes", key, minLen))
	}
	return v
}

// optionalSecret reads a secret that may be absent, but is at least minLen bytes when set.
func (r *reader) optionalSecret(key string, minLen int) string {
	v := r.getenv(key)
	if v != "" && len(v) < minLen {
		r.errs = append(r.errs, fmt.Errorf("%s must be at least %d bytes", key, minLen))
	}
	return v
}

// hosts reads a comma-separated list of host names, each optionally with a port
// ("admin.example", "admin.example:8443"), lower-cased; empty gives none.
func (r *reader) hosts(key string) []string {
	var out []string
	for _, s := range strings.Split(r.getenv(key), ",") {
		if s = strings.ToLower(strings.TrimSpace(s)); s == "" {
			continue
		}
		host := s
		if h, port, err := net.SplitHostPort(s); err == nil {
			if n, perr := strconv.Atoi(port); perr != nil || n < 1 || n > 65535 {
				r.errs = append(r.errs, fmt.Errorf("%s: %q has a bad port", key, s))
				continue
			}
			host = h
		}
		if host == "" || strings.ContainsAny(host, "/ @[]") {
			r.errs = append(r.errs, fmt.Errorf("%s: %q is not a host name", key, s))
			continue
		}
		out = append(out, s)
	}
	return out
}

func (r *reader) integer(key string, def, min, max int) int {
	raw := strings.TrimSpace(r.getenv(key))
	if raw == "" {
		return def
	}
	v, err := strconv.Atoi(raw)
	if err != nil || v < min || v > max {
		r.errs = append(r.errs, fmt.Errorf("%s=%q: want an integer in [%d, %d]", key, raw, min, max))
		return def
	}
	return v
}

func (r *reader) duration(key string, def, min, max time.Duration) time.Duration {
	raw := strings.TrimSpace(r.getenv(key))
	if raw == "" {
		return def
	}
	v, err := time.ParseDuration(raw)
	if err != nil || v < min || v > max {
		r.errs = append(r.errs, fmt.Errorf("%s=%q: want a duration in [%s, %s]", key, raw, min, max))
		return def
	}
	return v
}

func (r *reader) boolean(key string, def bool) bool {
	raw := strings.TrimSpace(r.getenv(key))
	if raw == "" {
		return def
	}
	v, err := strconv.ParseBool(raw)
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("%s=%q: want true or false", key, raw))
		return def
	}
	return v
}

func (r *reader) list(key, def string) []string {
	var out []string
	for _, s := range strings.Split(r.str(key, def), ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		r.errs = append(r.errs, fmt.Errorf("%s: want a comma-separated list", key))
	}
	return out
}

// addrs reads a comma-separated list of host:port addresses and returns it normalised
// (entries trimmed, joined by commas).
func (r *reader) addrs(key, def string) string {
	list := r.list(key, def)
	for _, a := range list {
		host, port, err := net.SplitHostPort(a)
		if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
			r.errs = append(r.errs, fmt.Errorf("%s: %q is not a host:port address", key, a))
		}
	}
	return strings.Join(list, ",")
}

// prefixes reads a comma-separated list of CIDR prefixes or single IP addresses (an
// address is its own /32 or /128); empty gives none.
func (r *reader) prefixes(key string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range strings.Split(r.getenv(key), ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
		} else if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
		} else {
			r.errs = append(r.errs, fmt.Errorf("%s: %q is neither a CIDR prefix nor an IP address", key, s))
		}
	}
	return out
}

func (r *reader) level(key, def string) slog.Level {
	var l slog.Level
	raw := r.str(key, def)
	if err := l.UnmarshalText([]byte(raw)); err != nil {
		r.errs = append(r.errs, fmt.Errorf("%s=%q: want debug, info, warn or error", key, raw))
		return slog.LevelInfo
	}
	return l
}

func (r *reader) err() error {
	if len(r.errs) == 0 {
		return nil
	}
	return fmt.Errorf("configuration: %w", errors.Join(r.errs...))
}
