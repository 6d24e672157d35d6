package event_test

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/event"
)

// A readiness probe must say so when no broker answers any more. kafka-go's Transport
// keeps serving metadata requests from its cache once it has known the cluster, so a Ping
// through it stayed green with Kafka gone. The broker is reached here through a forwarder
// the test can cut, the way a dead broker or a partition looks from the service.
func TestPingFailsOnceNoBrokerAnswers(t *testing.T) {
	brokers, _ := stacktest.Kafka(t)
	fwd := newForwarder(t, brokers[0])
	admin, err := event.NewAdmin([]string{fwd.addr()}, event.AdminSecurity(stacktest.KafkaSecurity(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := stacktest.Context(t, 60*time.Second)
	for i := 0; i < 2; i++ { // twice: the second may come from a cache
		if err := ping(ctx, admin); err != nil {
			t.Fatalf("ping %d through a working forwarder: %v", i+1, err)
		}
	}
	fwd.cut()
	if err := ping(ctx, admin); err == nil {
		t.Fatal("ping answered ok with the only bootstrap address refusing connections")
	}
}

func ping(ctx context.Context, a *event.Admin) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return a.Ping(ctx)
}

// forwarder relays TCP connections to one address until cut, which closes the listener and
// every relayed connection.
type forwarder struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	isCut bool
}

func newForwarder(t *testing.T, to string) *forwarder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &forwarder{ln: ln}
	t.Cleanup(f.cut)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed by cut
			}
			up, err := net.DialTimeout("tcp", to, 5*time.Second)
			if err != nil {
				c.Close()
				continue
			}
			if !f.track(c, up) {
				return
			}
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	return f
}

func (f *forwarder) addr() string { return f.ln.Addr().String() }

// track records a relayed pair; false (both closed) once the forwarder is cut.
func (f *forwarder) track(cs ...net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.isCut {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	f.conns = append(f.conns, cs...)
	return true
}

func (f *forwarder) cut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.isCut = true
	f.ln.Close()
	for _, c := range f.conns {
		c.Close()
	}
	f.conns = nil
}
