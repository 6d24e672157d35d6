package draw

import (
	"crypto/sha256"
	"encoding/hex"
	mrand "math/rand/v2"
	"strings"
	"testing"
)

// fixedReader is a deterministic stream for keys and seeds in tests.
func fixedReader(seed byte) *mrand.ChaCha8 { return mrand.NewChaCha8([32]byte{seed}) }

// Vectors a Drand must accept: real network rounds from drand's own tests
// (github.com/drand/drand/v2 crypto/schemes_test.go), quicknet's round 1000 as served by its
// network, and signatures made by drand/v2 v2.1.8's crypto package (SchemeFromName,
// AuthScheme.Sign over DigestBeacon) with a key picked from a fixed stream.
var drandVectors = []struct {
	name, scheme, key, sig string
	round                  uint64
}{
	{"quicknet round 1000", SchemeQuicknet,
		"83cf0f2896adee7eb8b5f01fcad3912212c437e0073e911fb90022d3e760183c8c4b450b6a0a6c3ac6a5776a2d1064510d1fec758c921cc22b0e17e63aaf4bcb5ed66304de9cf809bd274ca73bab4af5a6e9c76a4bc09e76eae8991ef5ece45a",
		"b44679b9a59af2ec876b1a6b1ad52ea9b1615fc3982b19576350f93447cb1125e342b73a8dd2bacbe47e4b6b63ed5e39", 1000},
	{"drand library rfc9380 round 1", SchemeQuicknet,
		"90960ac4e3bdb94446f161642445bbb1c44529b3bb7f96ba65a4fe0d20d07359aa64615c02006049949547f8853202ad07dd77dd5c385ffb4e3f5acf3034142ca27dfe8d94c129a78df29e0325e25799e9f06975f2ac940c6389a3a4e38686ca",
		"824ef9a7051938bb9dec4bfbb75fb7db304e40a193ad1ea43f8452e4f951645bf2cd61025fed5dfd9ad22b58aff557c3", 1},
	{"drand library rfc9380 round 1000", SchemeQuicknet,
		"90960ac4e3bdb94446f161642445bbb1c44529b3bb7f96ba65a4fe0d20d07359aa64615c02006049949547f8853202ad07dd77dd5c385ffb4e3f5acf3034142ca27dfe8d94c129a78df29e0325e25799e9f06975f2ac940c6389a3a4e38686ca",
		"b410c7a3ec2e1e3bdb1530a8bf7cf9f9a9db12ae3af512adaefa0b9b71f44f56a182c20fa85036ee85117b140203c930", 1000},
	{"drand test unchained round 7601003", SchemeUnchained,
		"8200fc249deb0148eb918d6e213980c5d01acd7fc251900d9260136da3b54836ce125172399ddc69c4e3e11429b62c11",
		"af7eac5897b72401c0f248a26b612c5ef68e0ff830b4d78927988c89b5db3e997bfcdb7c24cb19f549830cd02cb854a1143fd53a1d4e0713ded471260869439060d170a77187eb6371742840e43eccfa225657c4cc2d9619f7c3d680470c9743", 7601003},
	{"drand library unchained round 1000", SchemeUnchained,
		"b4aa9f5b7ebaddfde4d7ffca22a2ef0ac4643d0b1b78d511c688cc073aa2589e8fea4b38b055049331c7f890d1afea72",
		"a6ea29f792df9ec465a827e68bcecc6e472e8d70a110c0024c78aee66e2c778a20fe047da614d1e2835483dec5e9eef217d574d377ea98c99c8ff65028ee4438390725d5b7ca70655612c050f3e09ab569e3029d257339135ceb5d255455561f", 1000},
	{"drand test swapped round 3", SchemeUnchainedSwapped,
		"876f6fa8073736e22f6ff4badaab35c637503718f7a452d178ce69c45d2d8129a54ad2f988ab10c9666f87ab603c59bf013409a5b500555da31720f8eec294d9809b8796f40d5372c71a44ca61226f1eb978310392f98074a608747f77e66c5a",
		"ac7c3ca14bc88bd014260f22dc016b4fe586f9313c3a549c83d195811a99a5d2d4999d4df6daec73ff51fafadd6d5bb5", 3},
}

func TestDrandVectors(t *testing.T) {
	for _, v := range drandVectors {
		t.Run(v.name, func(t *testing.T) {
			d, err := NewDrand(v.scheme, v.key)
			if err != nil {
				t.Fatal(err)
			}
			ref := BeaconRef{Scheme: v.scheme, PublicKey: v.key, Round: v.round, Signature: v.sig}
			value, err := d.Check(ref)
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			sig, _ := hex.DecodeString(v.sig)
			if want := sha256.Sum256(sig); hex.EncodeToString(value) != hex.EncodeToString(want[:]) {
				t.Errorf("value %x, want SHA-256 of the signature %x", value, want)
			}
			// The same signature for the next round must be refused.
			ref.Round++
			if _, err := d.Check(ref); err == nil {
				t.Error("signature accepted for another round")
			}
		})
	}
}

func TestQuicknetRound1000Value(t *testing.T) {
	// The randomness quicknet publishes for round 1000.
	const want = "fe290beca10872ef2fb164d2aa4442de4566183ec51c56ff3cd603d930e54fdd"
	v := drandVectors[0]
	d, err := NewDrand(v.scheme, v.key)
	if err != nil {
		t.Fatal(err)
	}
	value, err := d.Check(BeaconRef{Scheme: v.scheme, PublicKey: v.key, Round: v.round, Signature: v.sig})
	if err != nil || hex.EncodeToString(value) != want {
		t.Errorf("Check = %x, %v; want %s", value, err, want)
	}
}

func TestLocalBeacon(t *testing.T) {
	lb, err := NewLocalBeacon(fixedReader(1))
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewLocalBeacon(fixedReader(2))
	if err != nil {
		t.Fatal(err)
	}
	ref := lb.Ref(42)
	if ref.Signature != "" || ref.Value != "" || ref.Round != 42 || ref.Scheme != SchemeQuicknet {
		t.Fatalf("Ref = %+v, want an unsigned quicknet ref of round 42", ref)
	}
	d, err := NewDrand(ref.Scheme, ref.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	signed, err := lb.Sign(42)
	if err != nil {
		t.Fatal(err)
	}
	value, err := d.Check(signed)
	if err != nil {
		t.Fatalf("own signature refused: %v", err)
	}
	if hex.EncodeToString(value) != signed.Value {
		t.Errorf("checked value %x, signed ref says %s", value, signed.Value)
	}

	sig43, err := lb.Sign(43)
	if err != nil {
		t.Fatal(err)
	}
	wrongRound := signed
	wrongRound.Signature = sig43.Signature
	if _, err := d.Check(wrongRound); err == nil {
		t.Error("round 43's signature accepted for round 42")
	}

	byOther, err := other.Sign(42)
	if err != nil {
		t.Fatal(err)
	}
	forged := signed
	forged.Signature = byOther.Signature
	if _, err := d.Check(forged); err == nil {
		t.Error("another key's signature accepted")
	}
	if _, err := d.Check(byOther); err == nil || !strings.Contains(err.Error(), "public key") {
		t.Errorf("a ref naming another key: %v, want a public key mismatch", err)
	}
	wrongScheme := signed
	wrongScheme.Scheme = SchemeUnchained
	if _, err := d.Check(wrongScheme); err == nil {
		t.Error("a ref of another scheme accepted")
	}
	garbled := signed
	garbled.Signature = signed.Signature[:len(signed.Signature)-2]
	if _, err := d.Check(garbled); err == nil {
		t.Error("a truncated signature accepted")
	}
}

func TestNewDrandRefuses(t *testing.T) {
	quicknetKey := drandVectors[0].key
	cases := []struct{ name, scheme, key string }{
		{"chained scheme", "pedersen-bls-chained", quicknetKey},
		{"unknown scheme", "nope", quicknetKey},
		{"not hex", SchemeQuicknet, "zz"},
		{"G2 key for a G1-key scheme", SchemeUnchained, quicknetKey},
		{"truncated", SchemeQuicknet, quicknetKey[:190]},
		{"identity", SchemeQuicknet, "c0" + strings.Repeat("00", 95)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewDrand(tc.scheme, tc.key); err == nil {
				t.Error("accepted")
			}
		})
	}
}
