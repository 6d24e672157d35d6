package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"
)

// KeySet is an identity provider's public keys, by key id, for tokens signed with RS256,
// ES256 or EdDSA. It is the production path: a gateway that verifies with it holds nothing
// that can mint a token, where an HS256 secret on an internet-facing host can mint any
// user's. The document is a JWKS (RFC 7517) read by go-jose; signatures are checked by
// golang-jwt with the key the token's "kid" names, under the one algorithm that key is for,
// never under the algorithm the token claims alone (an RSA key taken for an HMAC secret is
// the classic forgery).
type KeySet struct {
	byID map[string]publicKey
}

type publicKey struct {
	method jwt.SigningMethod
	key    crypto.PublicKey
}

// minRSABits is the smallest RSA modulus accepted.
const minRSABits = 2048

// ParseKeySet reads a JWKS document. Every key needs a key id, unique in the set, and must
// be a public key for signatures: RSA of at least 2048 bits (RS256), P-256 (ES256) or
// Ed25519 (EdDSA), with "alg", when given, naming that algorithm. A private key is refused:
// the gateway must not hold what signs.
func ParseKeySet(doc []byte) (*KeySet, error) {
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(doc, &set); err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	if len(set.Keys) == 0 {
		return nil, errors.New("jwks: no keys")
	}
	ks := &KeySet{byID: make(map[string]publicKey, len(set.Keys))}
	for i, k := range set.Keys {
		switch {
		case k.KeyID == "":
			return nil, fmt.Errorf("jwks: key %d has no kid", i)
		case !k.IsPublic():
			return nil, fmt.Errorf("jwks: key %q is a private key; give the gateway the public keys only", k.KeyID)
		case k.Use != "" && k.Use != "sig":
			return nil, fmt.Errorf("jwks: key %q is for %q, not signatures", k.KeyID, k.Use)
		}
		if _, dup := ks.byID[k.KeyID]; dup {
			return nil, fmt.Errorf("jwks: kid %q is given twice", k.KeyID)
		}
		m, err := methodOf(k)
		if err != nil {
			return nil, fmt.Errorf("jwks: key %q: %w", k.KeyID, err)
		}
		ks.byID[k.KeyID] = publicKey{method: m, key: k.Key}
	}
	return ks, nil
}

// methodOf is the one signing algorithm a key verifies.
func methodOf(k jose.JSONWebKey) (jwt.SigningMethod, error) {
	var m jwt.SigningMethod
	switch key := k.Key.(type) {
	case *rsa.PublicKey:
		if key.N.BitLen() < minRSABits {
			return nil, fmt.Errorf("RSA key of %d bits; at least %d", key.N.BitLen(), minRSABits)
		}
		m = jwt.SigningMethodRS256
	case *ecdsa.PublicKey:
		if key.Curve != elliptic.P256() {
			return nil, fmt.Errorf("EC key on %s; ES256 needs P-256", key.Curve.Params().Name)
		}
		m = jwt.SigningMethodES256
	case ed25519.PublicKey:
		m = jwt.SigningMethodEdDSA
	default:
		return nil, fmt.Errorf("unsupported key type %T (RSA, EC P-256 or Ed25519)", k.Key)
	}
	if k.Algorithm != "" && k.Algorithm != m.Alg() {
		return nil, fmt.Errorf("alg %q does not fit its %s key", k.Algorithm, m.Alg())
	}
	return m, nil
}

// Len is the number of keys in the set.
func (ks *KeySet) Len() int { return len(ks.byID) }

// check verifies sig over input with the key kid names, under the algorithm that key is
// for; alg is what the token's header claims, which must agree.
func (ks *KeySet) check(alg, kid, input string, sig []byte) error {
	k, ok := ks.byID[kid]
	switch {
	case kid == "":
		return errors.New("token names no key (kid)")
	case !ok:
		return fmt.Errorf("no key %q in the key set", kid)
	case alg != k.method.Alg():
		return fmt.Errorf("key %q is for %s, the token says %s", kid, k.method.Alg(), alg)
	}
	if err := k.method.Verify(input, sig, k.key); err != nil {
		return errSignature
	}
	return nil
}
