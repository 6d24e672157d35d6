// Package config turns environment variables into typed, validated configuration for the
// three deployables. Every variable has a documented default (README, "Configuration");
// secrets have none and must be set.
package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/certs"
)

// reader reads typed values from a getenv function and collects every problem, so a
// misconfigured service reports all of its bad variables at once.
type reader struct {
	getenv   func(string) string
	readFile func(string) ([]byte, error) // os.ReadFile unless a test says otherwise
	errs     []error
}

func newReader(getenv func(string) string) *reader {
	return &reader{getenv: getenv, readFile: os.ReadFile}
}

func (r *reader) str(key, def string) string {
	if v := strings.TrimSpace(r.getenv(key)); v != "" {
		return v
	}
	return def
}

// secretValue reads a secret from key or from the file fileKey (key_FILE) names: a mounted
// Kubernetes secret, trailing newlines trimmed. Errors name the variables and the path, never
// the content. Both names are spelled out by the callers so a search of the tree finds them.
func (r *reader) secretValue(key, fileKey string) string {
	v, path := r.getenv(key), strings.TrimSpace(r.getenv(fileKey))
	switch {
	case path == "":
		return v
	case v != "":
		r.errs = append(r.errs, fmt.Errorf("%s and %s are both set: set one", key, fileKey))
		return ""
	}
	b, err := r.readFile(path)
	if err != nil {
		// os.ReadFile's error names the path and the reason (no such file, permission).
		r.errs = append(r.errs, fmt.Errorf("%s=%s: %w", fileKey, path, unwrapPath(err)))
		return ""
	}
	v = SecretFromFile(b)
	if v == "" {
		r.errs = append(r.errs, fmt.Errorf("%s=%s: the file is empty", fileKey, path))
	}
	return v
}

// ReadSecretFile reads the secret a file holds (SecretFromFile); the error names the
// operation and the reason, not the path (the caller names it with its variable).
func ReadSecretFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", unwrapPath(err)
	}
	return SecretFromFile(b), nil
}

// SecretFromFile is the secret a file's content holds: trailing newlines trimmed (an editor's
// or `kubectl create secret --from-file`'s), nothing else.
func SecretFromFile(b []byte) string { return strings.TrimRight(string(b), "\r\n") }

// previousSecret reads the previous value of a secret being rotated, from key or the file
// fileKey names. Unlike a secret, a file that does not exist or is empty means "none": between
// rotations the previous key is absent from the mounted Secret (or empty), and the gateway
// re-reads the file while it runs.
func (r *reader) previousSecret(key, fileKey string, minLen int) string {
	v, path := r.getenv(key), strings.TrimSpace(r.getenv(fileKey))
	switch {
	case path == "":
	case v != "":
		r.errs = append(r.errs, fmt.Errorf("%s and %s are both set: set one", key, fileKey))
		return ""
	default:
		b, err := r.readFile(path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			r.errs = append(r.errs, fmt.Errorf("%s=%s: %w", fileKey, path, unwrapPath(err)))
			return ""
		}
		v = SecretFromFile(b)
	}
	if v != "" && len(v) < minLen {
		r.errs = append(r.errs, fmt.Errorf("%s must be at least %d bytes", key, minLen))
	}
	return v
}

// unwrapPath drops the path from a *fs.PathError (the caller names it already).
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("cannot %s it: %w", pe.Op, pe.Err)
	}
	return err
}

func (r *reader) secret(key, fileKey string, minLen int) string {
	v := r.secretValue(key, fileKey)
	switch {
	case v == "" && strings.TrimSpace(r.getenv(fileKey)) != "":
		// already reported by secretValue
	case v == "":
		r.errs = append(r.errs, fmt.Errorf("%s is required (or %s, a file holding it)", key, fileKey))
	case len(v) < minLen:
		r.errs = append(r.errs, fmt.Errorf("%s must be at least %d bytes", key, minLen))
	}
	return v
}

// optionalSecret reads a secret (from key or the file fileKey names) that may be absent,
// but is at least minLen bytes when set.
func (r *reader) optionalSecret(key, fileKey string, minLen int) string {
	v := r.secretValue(key, fileKey)
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

// fraction reads a share of something, a number in (0, 1].
func (r *reader) fraction(key string, def float64) float64 {
	raw := strings.TrimSpace(r.getenv(key))
	if raw == "" {
		return def
	}
	v, err := strconv.ParseFloat(raw, 64)
	// Written so NaN fails too.
	if err != nil || !(v > 0 && v <= 1) {
		r.errs = append(r.errs, fmt.Errorf("%s=%q: want a number in (0, 1], such as 0.9", key, raw))
		return def
	}
	return v
}

// number reads a decimal number in [min, max].
func (r *reader) number(key string, def, min, max float64) float64 {
	raw := strings.TrimSpace(r.getenv(key))
	if raw == "" {
		return def
	}
	v, err := strconv.ParseFloat(raw, 64)
	// Written so NaN fails too.
	if err != nil || !(v >= min && v <= max) {
		r.errs = append(r.errs, fmt.Errorf("%s=%q: want a number in [%g, %g]", key, raw, min, max))
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

// tlsVars names one server's TLS settings.
type tlsVars struct{ On, CAFile, CertFile, KeyFile, ServerName string }

// tlsClient reads one server's TLS settings: v.On switches TLS on; the CA file (the server's
// CA; empty trusts the system roots), a client certificate and key, and the server name
// refine it. It returns nil when TLS is off. Files are read now, so a missing or bad one
// stops the service before it connects anywhere.
func (r *reader) tlsClient(v tlsVars) *tls.Config {
	on := r.boolean(v.On, false)
	f := certs.Files{
		CAFile:     strings.TrimSpace(r.getenv(v.CAFile)),
		CertFile:   strings.TrimSpace(r.getenv(v.CertFile)),
		KeyFile:    strings.TrimSpace(r.getenv(v.KeyFile)),
		ServerName: strings.TrimSpace(r.getenv(v.ServerName)),
	}
	if !on {
		if f != (certs.Files{}) {
			// A CA file without TLS would leave the connection in plaintext while the
			// operator believes it is verified.
			r.errs = append(r.errs, fmt.Errorf("%s, %s, %s or %s set without %s=true", v.CAFile, v.CertFile, v.KeyFile, v.ServerName, v.On))
		}
		return nil
	}
	c, err := certs.Client(f, r.readFile)
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("%s: %w", v.On, err))
		return nil
	}
	return c
}
