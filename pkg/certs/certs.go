// Package certs builds the client TLS configurations the services use toward Redis, Kafka
// and MySQL from PEM files (a private CA, an optional client certificate), and explains a
// failed handshake in words an operator can act on.
package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"time"
)

// Files names the PEM files of one server's TLS settings. An empty CAFile trusts the
// system roots (a managed service with a public CA); CertFile and KeyFile go together.
type Files struct {
	CAFile     string
	CertFile   string
	KeyFile    string
	ServerName string // overrides the host name the server's certificate must carry
}

// Client returns a TLS client configuration from f (TLS 1.2 or later). readFile is
// os.ReadFile outside tests. Errors name the file, never its content.
func Client(f Files, readFile func(string) ([]byte, error)) (*tls.Config, error) {
	if readFile == nil {
		readFile = os.ReadFile
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.CAFile != "" {
		pem, err := readFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s: no PEM certificate in it", f.CAFile)
		}
		c.RootCAs = pool
	}
	if (f.CertFile == "") != (f.KeyFile == "") {
		return nil, errors.New("a client certificate needs both its certificate file and its key file")
	}
	if f.CertFile != "" {
		certPEM, err := readFile(f.CertFile)
		if err != nil {
			return nil, fmt.Errorf("read client certificate: %w", err)
		}
		keyPEM, err := readFile(f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("read client key: %w", err)
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			// X509KeyPair's errors describe the PEM blocks, never the key bytes.
			return nil, fmt.Errorf("client certificate %s with key %s: %w", f.CertFile, f.KeyFile, err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

// ErrNoHandshakeAnswer is Probe's error when the server accepted the connection but did not
// answer the TLS hello: a plaintext server waiting for the rest of a command (Redis), or one
// that hangs. The caller knows which is likelier.
var ErrNoHandshakeAnswer = errors.New("no answer to the TLS hello")

// Probe dials addr and completes a TLS handshake with c within timeout, so a service finds
// out at start-up, in words, that the server's certificate is not trusted or that the port
// does not speak TLS at all: a plaintext server left waiting for the rest of a "command" that
// is really a TLS hello would otherwise only show as a client's dial timeout.
func Probe(ctx context.Context, addr string, c *tls.Config, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	c = c.Clone()
	if c.ServerName == "" {
		if host, _, err := net.SplitHostPort(addr); err == nil {
			c.ServerName = host
		}
	}
	tc := tls.Client(conn, c)
	err = tc.HandshakeContext(ctx)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("TLS handshake: %w within %s (the server does not speak TLS on this port, or hangs)", ErrNoHandshakeAnswer, timeout)
	case errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET):
		return fmt.Errorf("TLS handshake: %w (the server closed the connection: it does not speak TLS on this port, or wants a client certificate)", err)
	}
	return fmt.Errorf("TLS handshake: %w", err)
}

// Hint says in a few words what a connection error most likely means, given whether the
// client spoke TLS and the variable that switches TLS on ("" when the error is not about
// the transport). The server's own words (wrong password, missing ACL) need no hint.
func Hint(err error, usedTLS bool, tlsVar string) string {
	if err == nil {
		return ""
	}
	var unknown x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var rec tls.RecordHeaderError
	msg := err.Error()
	switch {
	case errors.As(err, &unknown) || strings.Contains(msg, "certificate signed by unknown authority"):
		return "the server's certificate is not signed by the configured CA (check the CA file)"
	case errors.As(err, &hostname):
		return "the server's certificate does not name this host (set the TLS server name)"
	case errors.As(err, &invalid):
		return "the server's certificate is invalid (expired or not for serving)"
	case errors.As(err, &rec) || strings.Contains(msg, "first record does not look like a TLS handshake"):
		return "the server does not speak TLS on this port (plaintext port, or " + tlsVar + " set by mistake)"
	case !usedTLS && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		strings.Contains(msg, "connection reset") || strings.Contains(msg, "EOF") || strings.Contains(msg, "malformed packet") ||
		strings.Contains(msg, "unexpected response") || strings.Contains(msg, "invalid connection")):
		return "the server closed a plaintext connection: it may require TLS (set " + tlsVar + "=true)"
	case strings.Contains(msg, "tls: ") && strings.Contains(msg, "certificate required"):
		return "the server requires a client certificate"
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return "the server is unreachable"
	}
	return ""
}

// Explain appends Hint's words to err's, if it has any.
func Explain(err error, usedTLS bool, tlsVar string) error {
	if h := Hint(err, usedTLS, tlsVar); h != "" {
		return fmt.Errorf("%w (%s)", err, h)
	}
	return err
}
