package event

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/seckill-pipeline/seckill/pkg/certs"
)

// SecurityConfig is what an operator sets for the brokers: a SASL mechanism (none, plain,
// scram-sha-256, scram-sha-512) with its user, and a TLS configuration (nil: plaintext).
type SecurityConfig struct {
	Mechanism string
	Username  string
	Password  string
	TLS       *tls.Config
}

// Security is how every Kafka client of a process authenticates and encrypts: writers and
// the admin client through one shared Transport, readers and consumer groups through a
// Dialer with the same mechanism and TLS. Its zero value is today's open local stack
// (plaintext, no SASL), for which Transport and Dialer return nil, kafka-go's defaults. It
// holds the password only inside the SASL mechanism, and prints without it.
type Security struct {
	mechanism string
	username  string
	sasl      sasl.Mechanism
	tls       *tls.Config
	transport *kafka.Transport
}

// NewSecurity checks c and builds the mechanism and the shared transport.
func NewSecurity(c SecurityConfig) (Security, error) {
	s := Security{mechanism: strings.ToLower(strings.TrimSpace(c.Mechanism)), username: c.Username, tls: c.TLS}
	var err error
	switch s.mechanism {
	case "", "none":
		s.mechanism = "none"
		if c.Username != "" || c.Password != "" {
			return Security{}, errors.New("a Kafka user or password is set but the SASL mechanism is none")
		}
	case "plain":
		s.sasl = plain.Mechanism{Username: c.Username, Password: c.Password}
	case "scram-sha-256":
		s.sasl, err = scram.Mechanism(scram.SHA256, c.Username, c.Password)
	case "scram-sha-512":
		s.sasl, err = scram.Mechanism(scram.SHA512, c.Username, c.Password)
	default:
		return Security{}, fmt.Errorf("SASL mechanism %q: want none, plain, scram-sha-256 or scram-sha-512", c.Mechanism)
	}
	if err != nil {
		return Security{}, fmt.Errorf("SASL %s: %w", s.mechanism, err)
	}
	if s.sasl != nil && (c.Username == "" || c.Password == "") {
		return Security{}, fmt.Errorf("SASL %s needs a user and a password", s.mechanism)
	}
	if s.sasl != nil || s.tls != nil {
		s.transport = &kafka.Transport{SASL: s.sasl, TLS: s.tls, DialTimeout: 5 * time.Second}
	}
	return s, nil
}

// Transport is the one transport of the process's writers and admin client (nil: kafka-go's
// default transport).
func (s Security) Transport() *kafka.Transport { return s.transport }

// Dialer returns a dialer for readers and consumer groups (nil: kafka-go's default dialer).
func (s Security) Dialer() *kafka.Dialer {
	if s.transport == nil {
		return nil
	}
	return &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true, SASLMechanism: s.sasl, TLS: s.tls}
}

// Principal names the client to the brokers' ACLs ("User:name"), or says it is anonymous.
func (s Security) Principal() string {
	if s.sasl == nil {
		return "User:ANONYMOUS"
	}
	return "User:" + s.username
}

// String describes the settings for a log line, without the password.
func (s Security) String() string {
	return fmt.Sprintf("sasl=%s user=%q tls=%t", s.mechanism, s.username, s.tls != nil)
}

// WithSecurity makes a writer authenticate and encrypt as s says.
func WithSecurity(s Security) WriterOption {
	return func(w *kafka.Writer) {
		if s.transport != nil {
			w.Transport = s.transport
		}
	}
}

// AdminOption changes how an Admin reaches the brokers.
type AdminOption func(*Admin)

// AdminSecurity makes an Admin authenticate and encrypt as s says.
func AdminSecurity(s Security) AdminOption {
	return func(a *Admin) {
		a.security = s
		if s.transport != nil {
			a.client.Transport = s.transport
		}
	}
}

// Op is what a service does with a topic or a group, in the words of Kafka's ACLs.
type Op string

// The operations a service's start-up check names.
const (
	OpWrite    Op = "WRITE"
	OpRead     Op = "READ"
	OpDescribe Op = "DESCRIBE"
)

// Need is one thing a service must be allowed: an operation on a topic, or on a consumer
// group (Group set, Topic empty).
type Need struct {
	Op    Op
	Topic string
	Group string
}

func (n Need) String() string {
	if n.Group != "" {
		return n.Op.String() + " group " + n.Group
	}
	return n.Op.String() + " topic " + n.Topic
}

func (o Op) String() string { return string(o) }

// CheckAccess asks the brokers, at start-up, for what each need touches (the topic's
// metadata; the group's committed offsets), so a refused login, an untrusted certificate or
// a missing ACL stops the service with a message naming the principal, the operation and
// the topic or group, instead of failing at the first sale. Only refusals fail the check:
// brokers that are down or still starting are the readiness probe's business, and the
// services ride out a Kafka outage. A metadata answer proves DESCRIBE, which every topic ACL
// implies; a WRITE or READ denied beyond DESCRIBE surfaces at the first write or fetch.
func (a *Admin) CheckAccess(ctx context.Context, needs ...Need) error {
	// Bounded: brokers that hang (an outage) delay the start by this much at most, and are
	// not a refusal.
	ctx, cancel := context.WithTimeout(ctx, checkAccessBudget)
	defer cancel()
	if err := a.probeTLS(ctx); err != nil {
		return err
	}
	var errs []error
	for _, n := range needs {
		var err error
		if n.Group != "" {
			var resp *kafka.OffsetFetchResponse
			if resp, err = a.client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: n.Group}); err == nil {
				err = resp.Error
			}
		} else {
			_, err = a.partitionIDs(ctx, n.Topic)
		}
		if err != nil && a.security.sasl != nil && errors.Is(err, kafka.UnknownTopicOrPartition) {
			// kafka-go answers a topic's metadata from the cluster metadata it cached, which
			// the brokers gave without the topics this principal may not DESCRIBE: a topic
			// without an ACL looks unknown, not refused. An authenticated service whose topic
			// is unknown at start-up is refused either way (kafkainit creates the topics first).
			errs = append(errs, fmt.Errorf("kafka: principal %s cannot %s topic %s: the brokers do not show it to this principal (no ACL allows it to DESCRIBE the topic, or the topic does not exist): %w",
				a.security.Principal(), n.Op, n.Topic, err))
			continue
		}
		if err != nil && Refused(err) {
			errs = append(errs, a.Denied(n, err))
			if !authorization(err) {
				break // a login or TLS refusal is the same for every need
			}
		}
	}
	return errors.Join(errs...)
}

// probeTLS completes a TLS handshake with the first broker that accepts a connection, so an
// untrusted certificate or a plaintext listener is named before any request.
func (a *Admin) probeTLS(ctx context.Context) error {
	if a.security.tls == nil {
		return nil
	}
	for _, b := range a.brokers {
		err := certs.Probe(ctx, b, a.security.tls, 3*time.Second)
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" || errors.Is(err, certs.ErrNoHandshakeAnswer) {
			// Down or hanging: the readiness probe's business. (A plaintext Kafka listener
			// closes on a TLS hello rather than waiting, so silence is a hang.)
			continue
		}
		if err != nil {
			return fmt.Errorf("kafka %s (%s, %s): %w", b, a.security.Principal(), a.security, certs.Explain(err, true, "SECKILL_KAFKA_TLS"))
		}
		return nil
	}
	return nil
}

// checkAccessBudget bounds CheckAccess.
const checkAccessBudget = 5 * time.Second

// authorization reports a broker's ACL refusal.
func authorization(err error) bool {
	return errors.Is(err, kafka.TopicAuthorizationFailed) || errors.Is(err, kafka.GroupAuthorizationFailed) ||
		errors.Is(err, kafka.ClusterAuthorizationFailed)
}

// Refused reports whether err is the brokers refusing this client (an ACL, the SASL login,
// the TLS handshake, or a TLS listener closing a plaintext connection), as opposed to
// brokers that are down or busy: retrying will not help, the configuration must change.
func Refused(err error) bool {
	if authorization(err) || errors.Is(err, kafka.SASLAuthenticationFailed) ||
		errors.Is(err, kafka.UnsupportedSASLMechanism) || errors.Is(err, kafka.IllegalSASLState) {
		return true
	}
	h := certs.Hint(err, true, "")
	return h != "" && h != "the server is unreachable" || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// Denied turns a broker's authorization error into "kafka: principal User:x is not allowed
// to WRITE topic y" and explains a transport failure (unknown CA, plaintext to a TLS
// listener); any other error is returned with the need it was for.
func (a *Admin) Denied(n Need, err error) error {
	return denied(a.security, n, err)
}

func denied(s Security, n Need, err error) error {
	switch {
	case errors.Is(err, kafka.TopicAuthorizationFailed):
		return fmt.Errorf("kafka: principal %s is not allowed to %s topic %s (ACL): %w", s.Principal(), n.Op, n.Topic, err)
	case errors.Is(err, kafka.GroupAuthorizationFailed):
		return fmt.Errorf("kafka: principal %s is not allowed to %s group %s (ACL): %w", s.Principal(), n.Op, n.Group, err)
	case errors.Is(err, kafka.ClusterAuthorizationFailed):
		return fmt.Errorf("kafka: principal %s is not allowed the cluster operation needed to %s (ACL): %w", s.Principal(), n, err)
	case errors.Is(err, kafka.SASLAuthenticationFailed):
		return fmt.Errorf("kafka: SASL %s authentication of %s refused (wrong user or password): %w", s.mechanism, s.Principal(), err)
	case errors.Is(err, kafka.UnsupportedSASLMechanism) || errors.Is(err, kafka.IllegalSASLState):
		return fmt.Errorf("kafka: the brokers do not accept SASL %s for %s on this listener (another mechanism, or a listener without SASL): %w", s.mechanism, s.Principal(), err)
	}
	return fmt.Errorf("kafka (%s, %s) to %s: %w", s.Principal(), s, n, certs.Explain(err, s.tls != nil, "SECKILL_KAFKA_TLS"))
}
