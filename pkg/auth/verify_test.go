package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// The verifier in verify.go replaced golang-jwt's parser; these tests hold the two to the
// same verdicts. The parser, configured as the gateway configured it, is the reference.

var (
	diffPrevious = []byte("previous-secret-0123456789abcdef")
	diffOther    = []byte("some-other-secret-0123456789abcd")
)

const (
	diffIssuer   = "seckill"
	diffAudience = "seckill-gateway"
)

// reference verifies tok as the gateway did before verify.go: golang-jwt's parser with the
// current secret, then the previous one on a signature mismatch only.
func reference(tok string, at time.Time) (sub string, exp time.Time, err error) {
	p := jwt.NewParser(
		jwt.WithValidMethods([]string{"HS256"}),
		jwt.WithExpirationRequired(),
		jwt.WithIssuer(diffIssuer),
		jwt.WithAudience(diffAudience),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(5*time.Second),
		jwt.WithTimeFunc(func() time.Time { return at }),
	)
	parse := func(key []byte) (*jwt.RegisteredClaims, error) {
		c := &jwt.RegisteredClaims{}
		_, err := p.ParseWithClaims(tok, c, func(*jwt.Token) (any, error) { return key, nil })
		return c, err
	}
	c, err := parse(secret)
	if err != nil && errors.Is(err, jwt.ErrTokenSignatureInvalid) {
		c, err = parse(diffPrevious)
	}
	if err != nil {
		return "", time.Time{}, err
	}
	return c.Subject, c.ExpiresAt.Time, nil
}

func diffVerifier(t testing.TB, at time.Time) *Verifier {
	v, err := NewVerifier(secret, diffIssuer, diffAudience, func() time.Time { return at })
	if err != nil {
		t.Fatal(err)
	}
	if err := v.SetSecrets(secret, diffPrevious); err != nil {
		t.Fatal(err)
	}
	return v
}

// compare fails t when the verifier and the reference disagree on tok.
func compare(t testing.TB, v *Verifier, tok string, at time.Time) (accepted bool) {
	t.Helper()
	wantSub, wantExp, wantErr := reference(tok, at)
	c, err := v.verify(tok, v.keys.Load())
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("token %q: verifier error %v, golang-jwt error %v", tok, err, wantErr)
	}
	if err == nil && (c.sub != wantSub || !c.exp.Equal(wantExp)) {
		t.Fatalf("token %q: verifier sub %q exp %v, golang-jwt sub %q exp %v", tok, c.sub, c.exp, wantSub, wantExp)
	}
	return err == nil
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// craft signs header.payload (raw JSON texts) with key.
func craft(header, payload string, key []byte) string {
	in := b64(header) + "." + b64(payload)
	m := hmac.New(sha256.New, key)
	m.Write([]byte(in))
	return in + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

const hs256 = `{"alg":"HS256","typ":"JWT"}`

// payloads is a table of claim sets around one instant (diffNow).
var diffNow = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func diffPayloads() []string {
	n := diffNow.Unix()
	ok := func(extra string) string {
		return fmt.Sprintf(`{"sub":"alice","iss":"seckill","aud":"seckill-gateway","iat":%d,"exp":%d%s}`, n, n+3600, extra)
	}
	return []string{
		ok(""),
		ok(`,"nbf":` + fmt.Sprint(n)),
		ok(`,"nbf":` + fmt.Sprint(n+4)),
		ok(`,"nbf":` + fmt.Sprint(n+5)),
		ok(`,"nbf":` + fmt.Sprint(n+6)),
		ok(`,"nbf":` + fmt.Sprint(n+3600)),
		ok(`,"nbf":null`),
		ok(`,"jti":"x1","extra":[1,{"a":"b"}],"n":-1.5e3,"t":true,"f":false,"z":null`),
		ok(`,"jti":7`),
		ok(`,"sub":"bob"`),   // duplicated: the last wins
		ok(`,"sub":null`),    // null leaves it
		ok(`,"SUB":"carol"`), // encoding/json ignores case
		ok(`,"Exp":1`),       // ... in every known claim
		ok(`,"ſub":"dave"`),  // ... with Unicode folding
		ok(`,"aud":null`),    // null leaves the audience
		ok(`,"aud":[]`),      // empty audience
		ok(`,"aud":["other","seckill-gateway"]`),
		ok(`,"aud":["other"]`),
		ok(`,"aud":[""]`),
		ok(`,"aud":["seckill-gateway",1]`),
		ok(`,"aud":{"a":1}`),
		ok(`,"aud":"other"`),
		ok(`,"iss":"other"`),
		ok(`,"iss":""`),
		ok(`,"iss":null`),
		ok(`,"iss":"seck\u0069ll"`),
		ok(`,"sub":"al\u0069ce"`),
		ok(`,"sub":"a\"b"`),
		ok(`,"sub":"é"`),
		ok(`,"sub":"\ud800"`),
		ok(`,"sub":"` + strings.Repeat("x", 65) + `"`),
		ok(`,"sub":""`),
		ok(`,"sub":7`),
		ok(`,"exp":null`),
		ok(`,"exp":"` + fmt.Sprint(n+60) + `"`),
		ok(`,"exp":"soon"`),
		ok(`,"exp":` + fmt.Sprint(n+60) + `.75`),
		ok(`,"exp":` + fmt.Sprint(n-5)),
		ok(`,"exp":` + fmt.Sprint(n-4)),
		ok(`,"exp":` + fmt.Sprint(n-6)),
		ok(`,"exp":1e400`),
		ok(`,"exp":1e300`),
		ok(`,"exp":-1e300`),
		ok(`,"exp":99999999999999999999`),
		ok(`,"exp":1e-400`),
		ok(`,"exp":01`),
		ok(`,"exp":true`),
		ok(`,"iat":` + fmt.Sprint(n+5)),
		ok(`,"iat":` + fmt.Sprint(n+6)),
		ok(`,"iat":` + fmt.Sprint(n+60)),
		ok(`,"iat":null`),
		ok(`,"iat":"x"`),
		ok(`,"nbf":"x"`),
		fmt.Sprintf(`{"sub":"alice","iss":"seckill","aud":"seckill-gateway","exp":%d}`, n+60),
		fmt.Sprintf(`{"sub":"alice","iss":"seckill","aud":"seckill-gateway","iat":%d}`, n),
		fmt.Sprintf(`{"sub":"alice","aud":"seckill-gateway","exp":%d}`, n+60),
		fmt.Sprintf(`{"sub":"alice","iss":"seckill","exp":%d}`, n+60),
		fmt.Sprintf(` { "sub" : "alice" , "iss":"seckill","aud" :[ "seckill-gateway" ] ,"exp": %d } `, n+60),
		fmt.Sprintf(`{"sub":"alice","iss":"seckill","aud":"seckill-gateway","exp":%d}garbage`, n+60),
		fmt.Sprintf(`{"sub":"alice","iss":"seckill","aud":"seckill-gateway","exp":%d}{}`, n+60),
		fmt.Sprintf(`{"sub":"alice","iss":"seckill","aud":"seckill-gateway","exp":%d,}`, n+60),
		fmt.Sprintf(`{"sub":"alice","iss":"seckill","aud":"seckill-gateway","exp":%d`, n+60),
		`{}`, `null`, `[]`, `"x"`, `7`, ``, `{"sub":}`, `{"sub":"alice" "iss":"x"}`,
	}
}

func diffHeaders() []string {
	return []string{
		hs256, `{"alg":"HS256"}`, `{"typ":"JWT","alg":"HS256"}`, ` {"alg" : "HS256"} `,
		`{"alg":"HS256","alg":"none"}`, `{"alg":"none","alg":"HS256"}`, `{"alg":"none"}`,
		`{"alg":"HS384"}`, `{"alg":"RS256"}`, `{"alg":"hs256"}`, `{"ALG":"HS256"}`, `{"alg":"HS256\u0000"}`,
		`{"alg":"HS\u0032\u0035\u0036"}`, `{"alg":1}`, `{}`, `null`, `[]`, `{"alg":"HS256"}x`, ``,
		`{"alg":"HS256","typ":"JWT","kid":{"nested":[1,2]}}`,
	}
}

// diffTokens is the table: every header with the good payload, every payload with the
// good header, each signed with the current, previous and an unknown secret, and
// malformed framings of a good token.
func diffTokens() []string {
	payloads, headers := diffPayloads(), diffHeaders()
	var toks []string
	for _, key := range [][]byte{secret, diffPrevious, diffOther} {
		for _, h := range headers {
			toks = append(toks, craft(h, payloads[0], key))
		}
		for _, p := range payloads {
			toks = append(toks, craft(hs256, p, key))
		}
	}
	g := craft(hs256, payloads[0], secret)
	h, rest, _ := strings.Cut(g, ".")
	p, s, _ := strings.Cut(rest, ".")
	toks = append(toks,
		"", ".", "..", "...", g+".", g+"x", g+"=", h+"."+p, h+"."+p+".", h+"="+"."+p+"."+s,
		h+"."+p+"=."+s, h+"."+p+"."+s+"==", "!"+g, h+".."+s, "."+p+"."+s,
		h+"."+p+"\n."+s, h+"\r\n."+p+"."+s, h+"."+p+"."+s[:len(s)-1], h+"."+p+"."+s[:len(s)-2],
		h+"."+p+"."+strings.ToUpper(s), h[:len(h)-1]+"."+p+"."+s,
		strings.Replace(g, "-", "+", 1), strings.Replace(g, "_", "/", 1),
		b64(`{"alg":"none"}`)+"."+p+".", b64(`{"alg":"none"}`)+"."+p+"."+s,
	)
	return toks
}

func TestVerifierAgreesWithGolangJWT(t *testing.T) {
	for _, at := range []time.Time{diffNow, diffNow.Add(time.Hour + 4*time.Second), diffNow.Add(-10 * time.Second)} {
		v := diffVerifier(t, at)
		accepted := 0
		for _, tok := range diffTokens() {
			if compare(t, v, tok, at) {
				accepted++
			}
		}
		// The table must exercise both verdicts, or agreeing proves little.
		if at.Equal(diffNow) && accepted < 20 {
			t.Fatalf("only %d tokens accepted at %v", accepted, at)
		}
		t.Logf("at %v: %d tokens accepted of %d", at, accepted, len(diffTokens()))
	}
}

// The previous secret is counted only when it verified a token the current one did not.
func TestPreviousSecretCountedOnlyWhenItVerified(t *testing.T) {
	v := diffVerifier(t, diffNow)
	good := diffPayloads()[0]
	if _, err := v.User(craft(hs256, good, secret)); err != nil || v.PreviousVerified() != 0 {
		t.Fatalf("current secret: %v, previous counted %d", err, v.PreviousVerified())
	}
	if _, err := v.User(craft(hs256, good, diffPrevious)); err != nil || v.PreviousVerified() != 1 {
		t.Fatalf("previous secret: %v, previous counted %d", err, v.PreviousVerified())
	}
	expired := strings.Replace(good, `"exp":`, `"exp":1,"x":`, 1)
	if _, err := v.User(craft(hs256, expired, diffPrevious)); err == nil || v.PreviousVerified() != 1 {
		t.Fatalf("expired token with the previous secret: %v, previous counted %d", err, v.PreviousVerified())
	}
}

// FuzzVerify compares the verifier with golang-jwt's parser on fuzzed headers, payloads and
// framings:
//
//	go test -run '^$' -fuzz FuzzVerify -fuzztime 60s ./pkg/auth/
func FuzzVerify(f *testing.F) {
	for _, h := range diffHeaders() {
		f.Add(h, diffPayloads()[0], uint8(0), "")
	}
	for i, p := range diffPayloads() {
		f.Add(hs256, p, uint8(i%3), "")
	}
	f.Add(hs256, diffPayloads()[0], uint8(3), "x")
	f.Add("", "", uint8(4), diffTokens()[0])
	v := diffVerifier(f, diffNow)
	f.Fuzz(func(t *testing.T, header, payload string, mode uint8, raw string) {
		var tok string
		switch mode % 5 {
		case 0:
			tok = craft(header, payload, secret)
		case 1:
			tok = craft(header, payload, diffPrevious)
		case 2:
			tok = craft(header, payload, diffOther)
		case 3:
			tok = craft(header, payload, secret) + raw // trailing text
		case 4:
			tok = raw // any text at all
		}
		compare(t, v, tok, diffNow)
	})
}
