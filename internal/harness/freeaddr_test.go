package harness

import (
	"net"
	"strconv"
	"testing"
)

// An address FreeAddr hands out is below the ephemeral range, so no outgoing connection can
// take its port before the server binds it, and it can be bound.
func TestFreeAddrIsBelowTheEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	if low <= freePortFloor+1000 {
		t.Skipf("the ephemeral range starts at %d: FreeAddr takes the kernel's choice", low)
	}
	for range 20 {
		addr, err := FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		_, p, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		port, err := strconv.Atoi(p)
		if err != nil {
			t.Fatal(err)
		}
		if port < freePortFloor || port >= low {
			t.Fatalf("port %d outside [%d, %d)", port, freePortFloor, low)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("the free address %s cannot be bound: %v", addr, err)
		}
		ln.Close()
	}
}
