package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// This file verifies a token without golang-jwt's parser: in a flash crowd every user is new,
// the verdict cache never hits, and the parser's reflective JSON decoding of the claims was
// most of a grab's allocations. It keeps every check the parser made with the options the
// gateway used (HS256 only, expiry required, issuer, audience, issued-at, 5 s leeway), and
// the differential and fuzz tests hold it to the parser's verdicts. Tokens in the shape an
// identity provider writes (plain ASCII strings, numeric dates) take the scanner below; any
// other shape (escapes, nested values, odd key case) is decoded by encoding/json into the
// parser's own claims type, exactly as the parser did, so unusual input is judged the same.

// leeway is the clock skew allowed on exp, iat and nbf.
const leeway = 5 * time.Second

var (
	errSignature = errors.New("signature is invalid")
	errMalformed = errors.New("token is malformed")
)

// claims are what the gateway reads from a token.
type claims struct {
	sub, iss string
	// audMissing: no audience (none, or one empty); audMatch: the expected one is among them.
	audMissing, audMatch   bool
	exp, nbf, iat          time.Time
	hasExp, hasNbf, hasIat bool
}

// macState is one reusable HMAC and scratch space (pooled per secret: a hash is not safe for
// concurrent use, and building one per token allocates).
type macState struct {
	mac     hash.Hash
	scratch []byte
	sum     [sha256.Size]byte
}

// hmacKey is one HMAC key with its pool of states.
type hmacKey struct {
	key  []byte
	pool sync.Pool
}

func newHMACKey(key []byte) *hmacKey {
	s := &hmacKey{key: key}
	s.pool.New = func() any { return &macState{mac: hmac.New(sha256.New, key)} }
	return s
}

// matches reports whether sig is the HMAC-SHA256 of input under the secret.
func (s *hmacKey) matches(input string, sig []byte) bool {
	st := s.pool.Get().(*macState)
	st.mac.Reset()
	st.scratch = append(st.scratch[:0], input...)
	st.mac.Write(st.scratch)
	ok := hmac.Equal(st.mac.Sum(st.sum[:0]), sig)
	if cap(st.scratch) > 4096 {
		st.scratch = nil // one oversized token must not pin its size in every pooled state
	}
	s.pool.Put(st)
	return ok
}

// token is a split, decoded token whose signature is still to be checked.
type token struct {
	input    string // header.payload, the signed text
	sig      []byte
	alg, kid string // from the header
	claims   claims
}

// decodeToken splits and decodes tok, checking everything but the signature and the claims'
// values. buf is scratch space for the decoded segments.
func decodeToken(tok string, buf []byte, issuer, audience string) (token, []byte, error) {
	h, rest, ok := strings.Cut(tok, ".")
	if !ok {
		return token{}, buf, errMalformed
	}
	p, s, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(s, ".") {
		return token{}, buf, errMalformed
	}
	enc := base64.RawURLEncoding
	need := enc.DecodedLen(len(h)) + enc.DecodedLen(len(p)) + enc.DecodedLen(len(s))
	if cap(buf) < need {
		buf = make([]byte, need)
	}
	buf = buf[:need]
	hn, err := enc.Decode(buf, []byte(h))
	if err != nil {
		return token{}, buf, errMalformed
	}
	header := buf[:hn]
	rem := buf[hn:]
	pn, err := enc.Decode(rem, []byte(p))
	if err != nil {
		return token{}, buf, errMalformed
	}
	payload := rem[:pn]
	rem = rem[pn:]
	alg, kid, ok := parseHeader(header)
	if !ok {
		return token{}, buf, errMalformed
	}
	t := token{input: tok[:len(h)+1+len(p)], alg: alg, kid: kid}
	if t.claims, err = decodeClaims(payload, issuer, audience); err != nil {
		return token{}, buf, err
	}
	sn, err := enc.Decode(rem, []byte(s))
	if err != nil {
		return token{}, buf, errMalformed
	}
	t.sig = rem[:sn]
	return t, buf, nil
}

// parseHeader reads a decoded header's "alg" and "kid"; ok is false unless it is a JSON
// object naming one of the accepted algorithms (which one a token may use is the key's to
// say: see Verifier.verify).
func parseHeader(h []byte) (alg, kid string, ok bool) {
	switch string(h) {
	case `{"alg":"HS256","typ":"JWT"}`, `{"typ":"JWT","alg":"HS256"}`, `{"alg":"HS256"}`:
		return method, "", true
	}
	var m map[string]any
	if json.Unmarshal(h, &m) != nil {
		return "", "", false
	}
	alg, _ = m["alg"].(string)
	kid, _ = m["kid"].(string)
	switch alg {
	case method, "RS256", "ES256", "EdDSA":
		return alg, kid, true
	}
	return "", "", false
}

// validate checks the claims' values at now.
func (c *claims) validate(now time.Time, issuer string) error {
	if !c.hasExp {
		return errors.New("exp claim is required")
	}
	if !now.Before(c.exp.Add(leeway)) {
		return errors.New("token is expired")
	}
	if c.hasNbf && now.Before(c.nbf.Add(-leeway)) {
		return errors.New("token is not valid yet")
	}
	if c.hasIat && now.Before(c.iat.Add(-leeway)) {
		return errors.New("token used before issued")
	}
	if c.audMissing {
		return errors.New("aud claim is required")
	}
	if !c.audMatch {
		return errors.New("token has invalid audience")
	}
	if issuer != "" {
		if c.iss == "" {
			return errors.New("iss claim is required")
		}
		if c.iss != issuer {
			return errors.New("token has invalid issuer")
		}
	}
	return nil
}

// lifetimeWithin checks that the token is valid for at most max (0: no cap), counted from
// the later of iat and nbf, or from now when it has neither (so a token without them is
// refused until its expiry is within max).
func (c *claims) lifetimeWithin(now time.Time, max time.Duration) error {
	if max <= 0 {
		return nil
	}
	start := now
	if c.hasIat || c.hasNbf {
		start = c.iat
		if c.hasNbf && (!c.hasIat || c.nbf.After(c.iat)) {
			start = c.nbf
		}
	}
	if life := c.exp.Sub(start); life > max+leeway {
		return fmt.Errorf("token lifetime %s exceeds the maximum %s", life, max)
	}
	return nil
}

// dateOf is a NumericDate's time from its seconds, as golang-jwt computes it.
func dateOf(f float64) time.Time {
	round, frac := math.Modf(f)
	return time.Unix(int64(round), int64(frac*1e9)).Truncate(time.Second)
}

// decodeClaims reads the claims from a decoded payload: the scanner for the usual shape,
// else encoding/json into golang-jwt's claims type.
func decodeClaims(p []byte, issuer, audience string) (claims, error) {
	if c, ok := scanClaims(p, issuer, audience); ok {
		return c, nil
	}
	var rc jwt.Claims = &jwt.RegisteredClaims{}
	if err := json.Unmarshal(p, &rc); err != nil {
		return claims{}, errMalformed
	}
	r, ok := rc.(*jwt.RegisteredClaims)
	if !ok || r == nil {
		return claims{}, errMalformed
	}
	c := claims{sub: r.Subject, iss: r.Issuer, audMissing: len(r.Audience) == 0 || len(r.Audience) == 1 && r.Audience[0] == "",
		audMatch: slices.Contains(r.Audience, audience)}
	if r.ExpiresAt != nil {
		c.exp, c.hasExp = r.ExpiresAt.Time, true
	}
	if r.NotBefore != nil {
		c.nbf, c.hasNbf = r.NotBefore.Time, true
	}
	if r.IssuedAt != nil {
		c.iat, c.hasIat = r.IssuedAt.Time, true
	}
	return c, nil
}

// scanner reads the usual shape of a claims object. ok false means "not the usual shape",
// never "invalid": the caller then decodes it with encoding/json.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// str reads a string of printable ASCII without escapes, returning its text in place.
func (s *scanner) str() ([]byte, bool) {
	if s.peek() != '"' {
		return nil, false
	}
	start := s.i + 1
	for j := start; j < len(s.b); j++ {
		c := s.b[j]
		if c == '"' {
			s.i = j + 1
			return s.b[start:j], true
		}
		if c < 0x20 || c > 0x7e || c == '\\' {
			return nil, false
		}
	}
	return nil, false
}

// num reads a JSON number's text.
func (s *scanner) num() ([]byte, bool) {
	start, j := s.i, s.i
	b := s.b
	digits := func() bool {
		k := j
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
		return j > k
	}
	if j < len(b) && b[j] == '-' {
		j++
	}
	switch {
	case j < len(b) && b[j] == '0':
		j++
	case j < len(b) && b[j] >= '1' && b[j] <= '9':
		digits()
	default:
		return nil, false
	}
	if j < len(b) && b[j] == '.' {
		j++
		if !digits() {
			return nil, false
		}
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		j++
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		if !digits() {
			return nil, false
		}
	}
	s.i = j
	return b[start:j], true
}

func (s *scanner) lit(word string) bool {
	if len(s.b)-s.i >= len(word) && string(s.b[s.i:s.i+len(word)]) == word {
		s.i += len(word)
		return true
	}
	return false
}

// date reads a NumericDate: a number, or null (no date).
func (s *scanner) date() (t time.Time, set, ok bool) {
	if s.lit("null") {
		return time.Time{}, false, true
	}
	n, ok := s.num()
	if !ok {
		return time.Time{}, false, false
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		return time.Time{}, false, false
	}
	return dateOf(f), true, true
}

// scalar skips a value of a claim the gateway does not read.
func (s *scanner) scalar() bool {
	switch c := s.peek(); {
	case c == '"':
		_, ok := s.str()
		return ok
	case c == '-' || c >= '0' && c <= '9':
		_, ok := s.num()
		return ok
	}
	return s.lit("true") || s.lit("false") || s.lit("null")
}

// known are the claims golang-jwt's type has; encoding/json matches them ignoring case.
var known = [...]string{"sub", "iss", "aud", "exp", "nbf", "iat", "jti"}

// scanClaims reads the usual shape; issuer and audience are the expected values, so a
// matching claim is kept without copying it.
func scanClaims(p []byte, issuer, audience string) (c claims, ok bool) {
	s := scanner{b: p}
	s.ws()
	if s.peek() != '{' {
		return c, false
	}
	s.i++
	s.ws()
	if s.peek() == '}' {
		s.i++
		s.ws()
		return c, s.i == len(s.b)
	}
	for {
		s.ws()
		key, ok := s.str()
		if !ok {
			return c, false
		}
		s.ws()
		if s.peek() != ':' {
			return c, false
		}
		s.i++
		s.ws()
		switch string(key) {
		case "sub", "iss", "jti":
			var v []byte
			if s.lit("null") {
				break // null leaves a string as it was
			}
			if v, ok = s.str(); !ok {
				return c, false
			}
			switch string(key) {
			case "sub":
				c.sub = string(v)
			case "iss":
				if string(v) == issuer {
					c.iss = issuer
				} else {
					c.iss = string(v)
				}
			}
		case "exp":
			if c.exp, c.hasExp, ok = s.date(); !ok {
				return c, false
			}
		case "nbf":
			if c.nbf, c.hasNbf, ok = s.date(); !ok {
				return c, false
			}
		case "iat":
			if c.iat, c.hasIat, ok = s.date(); !ok {
				return c, false
			}
		case "aud":
			if s.lit("null") {
				break // null leaves the audience as it was
			}
			if c.audMissing, c.audMatch, ok = s.audience(audience); !ok {
				return c, false
			}
		default:
			for _, k := range known {
				if strings.EqualFold(string(key), k) {
					return c, false
				}
			}
			if !s.scalar() {
				return c, false
			}
		}
		s.ws()
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			s.ws()
			return c, s.i == len(s.b)
		default:
			return c, false
		}
	}
}

// audience reads "aud", a string or an array of strings: whether it is missing (none, or
// one empty) and whether want is among them.
func (s *scanner) audience(want string) (missing, match, ok bool) {
	if s.peek() == '"' {
		v, ok := s.str()
		return len(v) == 0, string(v) == want, ok
	}
	if s.peek() != '[' {
		return false, false, false
	}
	s.i++
	s.ws()
	if s.peek() == ']' {
		s.i++
		return true, false, true
	}
	n, first := 0, false
	for {
		s.ws()
		v, ok := s.str()
		if !ok {
			return false, false, false
		}
		if n == 0 {
			first = len(v) == 0
		}
		n++
		match = match || string(v) == want
		s.ws()
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return n == 1 && first, match, true
		default:
			return false, false, false
		}
	}
}
