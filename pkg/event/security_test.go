package event_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/internal/certtest"
	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/event"
)

func security(t *testing.T, c event.SecurityConfig) event.Security {
	t.Helper()
	s, err := event.NewSecurity(c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func pool(t *testing.T, ca *certtest.CA) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(ca.CAFile(t))
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(b)
	return p
}

// A client the brokers refuse (untrusted certificate, plaintext to a TLS listener, TLS to
// a plaintext one, a SASL mechanism the listener does not offer) is stopped by the start-up
// check with the broker, the principal and the reason named, never the password; brokers
// that are down are not a refusal (the services ride out an outage).
func TestCheckAccessNamesRefusals(t *testing.T) {
	const password = "kafka-password-31337"
	brokers, topics := stacktest.Kafka(t)
	trusted, other := certtest.NewCA(t), certtest.NewCA(t)
	tlsAddr := certtest.Listen(t, trusted)
	need := event.Need{Op: event.OpWrite, Topic: topics.Grab.Name}
	tests := []struct {
		name    string
		brokers []string
		sec     event.SecurityConfig
		want    []string // substrings; nil: no error
	}{
		{"open local stack", brokers, event.SecurityConfig{}, nil},
		{"unknown CA", []string{tlsAddr}, event.SecurityConfig{Mechanism: "scram-sha-512", Username: "gateway", Password: password,
			TLS: &tls.Config{RootCAs: pool(t, other)}},
			[]string{tlsAddr, "User:gateway", "certificate signed by unknown authority"}},
		{"plaintext to a TLS listener", []string{tlsAddr}, event.SecurityConfig{},
			[]string{"User:ANONYMOUS", topics.Grab.Name, "may require TLS (set SECKILL_KAFKA_TLS=true)"}},
		{"TLS to a plaintext listener", brokers, event.SecurityConfig{TLS: &tls.Config{RootCAs: pool(t, trusted)}},
			[]string{brokers[0], "does not speak TLS"}},
		{"SASL to a listener without it", brokers, event.SecurityConfig{Mechanism: "plain", Username: "gateway", Password: password},
			[]string{"User:gateway", "do not accept SASL plain"}},
		{"brokers down", []string{stacktest.FreeAddr(t)}, event.SecurityConfig{Mechanism: "scram-sha-512", Username: "gateway", Password: password}, nil},
		{"brokers hang", []string{hang(t)}, event.SecurityConfig{}, nil},
		{"brokers hang, with TLS", []string{hang(t)}, event.SecurityConfig{TLS: &tls.Config{RootCAs: pool(t, trusted)}}, nil},
	}
	secured := stacktest.KafkaSecurity(t).Transport() != nil
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if secured && tc.brokers[0] == brokers[0] {
				// These cases are about an open listener; internal/securetest has the secure
				// profile's own refusals.
				t.Skip("the stack's brokers are secured (secure profile): no open listener")
			}
			admin, err := event.NewAdmin(tc.brokers, event.AdminSecurity(security(t, tc.sec)))
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			err = admin.CheckAccess(stacktest.Context(t, 30*time.Second), need)
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("the check took %s: a hanging broker must not hold a start-up long", took)
			}
			if tc.want == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), password) {
				t.Errorf("error shows the password: %q", err)
			}
		})
	}
}

// hang accepts TCP connections and never answers: a broker that hangs.
func hang(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// A missing ACL is named with the principal, the operation and the topic or group.
func TestDeniedNamesTopicAndOperation(t *testing.T) {
	sec := security(t, event.SecurityConfig{Mechanism: "scram-sha-512", Username: "gateway", Password: "pw"})
	admin, err := event.NewAdmin([]string{"127.0.0.1:1"}, event.AdminSecurity(sec))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		need event.Need
		err  error
		want string
	}{
		{event.Need{Op: event.OpWrite, Topic: "seckill.grab"}, kafka.TopicAuthorizationFailed,
			"kafka: principal User:gateway is not allowed to WRITE topic seckill.grab"},
		{event.Need{Op: event.OpRead, Group: "seckill-orders"}, fmt.Errorf("offset fetch: %w", kafka.GroupAuthorizationFailed),
			"kafka: principal User:gateway is not allowed to READ group seckill-orders"},
		{event.Need{Op: event.OpWrite, Topic: "seckill.grab"}, kafka.ClusterAuthorizationFailed,
			"not allowed the cluster operation needed to WRITE topic seckill.grab"},
		{event.Need{Op: event.OpRead, Topic: "t"}, kafka.SASLAuthenticationFailed,
			"SASL scram-sha-512 authentication of User:gateway refused (wrong user or password)"},
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) {
			got := admin.Denied(tc.need, tc.err)
			if !strings.Contains(got.Error(), tc.want) || !errors.Is(got, tc.err) && !errors.Is(got, errors.Unwrap(tc.err)) {
				t.Fatalf("got %q, want it to say %q and wrap the broker's error", got, tc.want)
			}
			if !event.Refused(tc.err) {
				t.Errorf("%v is not counted as a refusal", tc.err)
			}
		})
	}
}

// Every writer and admin client of a process shares the one secured transport; readers get
// a dialer with the same SASL and TLS; the open stack's zero Security changes nothing.
func TestSecurityReachesEveryClient(t *testing.T) {
	sec := security(t, event.SecurityConfig{Mechanism: "scram-sha-256", Username: "u", Password: "pw", TLS: &tls.Config{}})
	w, err := event.NewWriter([]string{"127.0.0.1:1"}, "t", event.WithSecurity(sec))
	if err != nil {
		t.Fatal(err)
	}
	if w.Transport != sec.Transport() || sec.Transport().SASL == nil || sec.Transport().TLS == nil {
		t.Fatalf("writer transport %v, want the security's", w.Transport)
	}
	if d := sec.Dialer(); d == nil || d.SASLMechanism == nil || d.TLS == nil {
		t.Fatalf("dialer %+v without SASL or TLS", d)
	}
	if strings.Contains(sec.String(), "pw") {
		t.Errorf("Security prints its password: %s", sec)
	}
	open := security(t, event.SecurityConfig{})
	w, err = event.NewWriter([]string{"127.0.0.1:1"}, "t", event.WithSecurity(open))
	if err != nil {
		t.Fatal(err)
	}
	if w.Transport != nil || open.Dialer() != nil {
		t.Fatal("the open stack's settings changed the default transport or dialer")
	}
}
