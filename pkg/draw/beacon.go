package draw

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/big"

	bls12381 "github.com/kilic/bls12-381"
)

// Drand schemes Drand checks. Their names, hash-to-curve tags and groups are drand's
// (github.com/drand/drand/v2/crypto); only unchained schemes are supported, as their
// signatures depend on the round alone and a BeaconRef carries no previous signature.
const (
	// SchemeQuicknet is drand quicknet's: signatures on G1, public key on G2, RFC 9380 tags.
	SchemeQuicknet = "bls-unchained-g1-rfc9380"
	// SchemeUnchained is drand's older unchained network: signatures on G2, public key on G1.
	SchemeUnchained = "pedersen-bls-unchained"
	// SchemeUnchainedSwapped is drand's deprecated G1 scheme that hashes with G2's tag.
	SchemeUnchainedSwapped = "bls-unchained-on-g1"
)

const (
	dstG1 = "BLS_SIG_BLS12381G1_XMD:SHA-256_SSWU_RO_NUL_"
	dstG2 = "BLS_SIG_BLS12381G2_XMD:SHA-256_SSWU_RO_NUL_"
)

// Drand checks beacons of one drand network, given its scheme and group public key.
//
// It verifies BLS signatures with github.com/kilic/bls12-381, the curve library drand's own
// kyber-bls12381 wraps, with drand's scheme parameters. drand's libraries themselves need a
// newer go line than this module's; drand's test vectors pin the equivalence (beacon_test.go).
type Drand struct {
	scheme  string
	sigOnG1 bool
	dst     []byte
	keyG1   *bls12381.PointG1 // public key when signatures are on G2
	keyG2   *bls12381.PointG2 // public key when signatures are on G1
}

// NewDrand returns a checker for the network of scheme with the hex group public key.
func NewDrand(scheme, publicKeyHex string) (*Drand, error) {
	d := &Drand{scheme: scheme}
	switch scheme {
	case SchemeQuicknet:
		d.sigOnG1, d.dst = true, []byte(dstG1)
	case SchemeUnchainedSwapped:
		d.sigOnG1, d.dst = true, []byte(dstG2)
	case SchemeUnchained:
		d.sigOnG1, d.dst = false, []byte(dstG2)
	default:
		return nil, fmt.Errorf("drand scheme %q: not supported (want %s, %s or %s)",
			scheme, SchemeQuicknet, SchemeUnchained, SchemeUnchainedSwapped)
	}
	pk, err := hex.DecodeString(publicKeyHex)
	if err != nil {
		return nil, fmt.Errorf("drand public key: %w", err)
	}
	// An identity key would accept the identity as everyone's signature of every round.
	if d.sigOnG1 {
		g := bls12381.NewG2()
		if d.keyG2, err = g.FromCompressed(pk); err == nil && g.IsZero(d.keyG2) {
			err = errors.New("identity point")
		}
	} else {
		g := bls12381.NewG1()
		if d.keyG1, err = g.FromCompressed(pk); err == nil && g.IsZero(d.keyG1) {
			err = errors.New("identity point")
		}
	}
	if err != nil {
		return nil, fmt.Errorf("drand %s public key: %w", scheme, err)
	}
	return d, nil
}

// Check verifies b's signature of b.Round under the network's key and returns the round's
// value, SHA-256 of the signature (drand's randomness). It refuses a ref of another scheme or
// key: a record naming one network must not pass on another's signature.
func (d *Drand) Check(b BeaconRef) ([]byte, error) {
	if b.Scheme != d.scheme {
		return nil, fmt.Errorf("beacon scheme %q, the checker's %q", b.Scheme, d.scheme)
	}
	if !d.samePublicKey(b.PublicKey) {
		return nil, fmt.Errorf("beacon public key %s is not the checker's", b.PublicKey)
	}
	sig, err := hex.DecodeString(b.Signature)
	if err != nil {
		return nil, fmt.Errorf("round %d signature: %w", b.Round, err)
	}
	msg := roundDigest(b.Round)
	// Fresh groups and engines per call: kilic's types hold scratch space and are not safe
	// for concurrent use, and Check may be called from many goroutines.
	var ok bool
	if d.sigOnG1 {
		g1 := bls12381.NewG1()
		s, err := g1.FromCompressed(sig)
		if err != nil {
			return nil, fmt.Errorf("round %d signature: %w", b.Round, err)
		}
		hm, err := g1.HashToCurve(msg, d.dst)
		if err != nil {
			return nil, fmt.Errorf("round %d: hash to G1: %w", b.Round, err)
		}
		// e(H(m), pk) == e(sig, g2)
		pk := new(bls12381.PointG2).Set(d.keyG2)
		ok = bls12381.NewEngine().AddPair(hm, pk).AddPairInv(s, bls12381.NewG2().One()).Check()
	} else {
		g2 := bls12381.NewG2()
		s, err := g2.FromCompressed(sig)
		if err != nil {
			return nil, fmt.Errorf("round %d signature: %w", b.Round, err)
		}
		hm, err := g2.HashToCurve(msg, d.dst)
		if err != nil {
			return nil, fmt.Errorf("round %d: hash to G2: %w", b.Round, err)
		}
		// e(pk, H(m)) == e(g1, sig)
		pk := new(bls12381.PointG1).Set(d.keyG1)
		ok = bls12381.NewEngine().AddPair(pk, hm).AddPairInv(bls12381.NewG1().One(), s).Check()
	}
	if !ok {
		return nil, fmt.Errorf("round %d: signature does not verify under the network's key", b.Round)
	}
	v := sha256.Sum256(sig)
	return v[:], nil
}

// samePublicKey compares by point, so a key written in upper case still matches.
func (d *Drand) samePublicKey(h string) bool {
	pk, err := hex.DecodeString(h)
	if err != nil {
		return false
	}
	if d.sigOnG1 {
		g := bls12381.NewG2()
		p, err := g.FromCompressed(pk)
		return err == nil && g.Equal(p, d.keyG2)
	}
	g := bls12381.NewG1()
	p, err := g.FromCompressed(pk)
	return err == nil && g.Equal(p, d.keyG1)
}

// roundDigest is what an unchained drand network signs: SHA-256 of the round, 8 bytes big-endian.
func roundDigest(round uint64) []byte {
	var r [8]byte
	binary.BigEndian.PutUint64(r[:], round)
	sum := sha256.Sum256(r[:])
	return sum[:]
}

// LocalBeacon is a stand-in for a drand network, which no machine of ours can reach: a single
// quicknet-scheme key that signs rounds on demand, for tests and demos. Its signatures check
// with Drand exactly as a real network's do, but whoever holds it knows every round in
// advance, so a draw using it is only as fair as its holder.
type LocalBeacon struct {
	secret *big.Int
	public []byte // compressed G2 point
}

// NewLocalBeacon generates a key pair from r (crypto/rand.Reader, or a fixed stream in tests).
func NewLocalBeacon(r io.Reader) (*LocalBeacon, error) {
	g2 := bls12381.NewG2()
	order := g2.Q()
	var sk *big.Int
	for sk == nil || sk.Sign() == 0 {
		var err error
		if sk, err = rand.Int(r, order); err != nil {
			return nil, fmt.Errorf("local beacon key: %w", err)
		}
	}
	pk := g2.MulScalarBig(g2.New(), g2.One(), sk)
	return &LocalBeacon{secret: sk, public: g2.ToCompressed(pk)}, nil
}

// Ref is the beacon a draw commits to: round of this beacon, not yet signed.
func (l *LocalBeacon) Ref(round uint64) BeaconRef {
	return BeaconRef{Scheme: SchemeQuicknet, PublicKey: hex.EncodeToString(l.public), Round: round}
}

// Sign reveals round: its Ref with the signature and the value filled in.
func (l *LocalBeacon) Sign(round uint64) (BeaconRef, error) {
	g1 := bls12381.NewG1()
	hm, err := g1.HashToCurve(roundDigest(round), []byte(dstG1))
	if err != nil {
		return BeaconRef{}, fmt.Errorf("local beacon round %d: hash to G1: %w", round, err)
	}
	sig := g1.ToCompressed(g1.MulScalarBig(g1.New(), hm, l.secret))
	b := l.Ref(round)
	b.Signature = hex.EncodeToString(sig)
	v := sha256.Sum256(sig)
	b.Value = hex.EncodeToString(v[:])
	return b, nil
}
