// Package auth issues and verifies the user tokens the gateway trusts: HS256 JWTs with a
// required expiry, issuer and audience. The user id comes only from a verified token.
package auth

import (
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// method is the only accepted algorithm. Pinning it blocks "alg: none" and algorithm
// confusion (an RS256 public key used as an HMAC secret).
const method = "HS256"

// Verifier checks user tokens.
type Verifier struct {
	secret []byte
	parser *jwt.Parser
}

// NewVerifier returns a Verifier for tokens signed with secret by issuer for audience.
func NewVerifier(secret []byte, issuer, audience string, now func() time.Time) (*Verifier, error) {
	if len(secret) < 32 {
		return nil, errors.New("jwt secret must be at least 32 bytes")
	}
	return &Verifier{
		secret: secret,
		parser: jwt.NewParser(
			jwt.WithValidMethods([]string{method}),
			jwt.WithExpirationRequired(),
			jwt.WithIssuer(issuer),
			jwt.WithAudience(audience),
			jwt.WithIssuedAt(),
			jwt.WithLeeway(5*time.Second),
			jwt.WithTimeFunc(now),
		),
	}, nil
}

// ErrInvalid wraps every reason a token is refused.
var ErrInvalid = errors.New("invalid token")

// User verifies a token and returns its subject, the user id.
func (v *Verifier) User(token string) (string, error) {
	claims := &jwt.RegisteredClaims{}
	_, err := v.parser.ParseWithClaims(token, claims, func(*jwt.Token) (any, error) { return v.secret, nil })
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if !seckill.ValidUserID(claims.Subject) {
		return "", fmt.Errorf("%w: subject is not a valid user id", ErrInvalid)
	}
	return claims.Subject, nil
}

// Signer issues user tokens (for the demo, tests, the load generator and the invariant
// harness; production tokens come from the shop's identity provider with the same secret).
type Signer struct {
	secret           []byte
	issuer, audience string
}

// NewSigner returns a Signer.
func NewSigner(secret []byte, issuer, audience string) *Signer {
	return &Signer{secret: secret, issuer: issuer, audience: audience}
}

// Token returns a token for user valid from now for ttl.
func (s *Signer) Token(user string, now time.Time, ttl time.Duration) (string, error) {
	claims := jwt.RegisteredClaims{
		Subject:   user,
		Issuer:    s.issuer,
		Audience:  jwt.ClaimStrings{s.audience},
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(s.secret)
	if err != nil {
		return "", fmt.Errorf("sign token for %s: %w", user, err)
	}
	return tok, nil
}
