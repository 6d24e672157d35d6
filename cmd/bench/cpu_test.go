package main

import (
	"net"
	"os"
	"slices"
	"testing"
	"time"
)

// The CPU accounting finds a server by the socket it listens on: this process's own
// listener must name this process, and a port nobody listens on must name nobody.
func TestListenersFindsTheListeningProcess(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	pids, err := listeners([]string{addr})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pids, []int{os.Getpid()}) {
		t.Fatalf("listeners(%s) = %v, want [%d]", addr, pids, os.Getpid())
	}
	ln.Close()
	if pids, err = listeners([]string{addr}); err != nil || len(pids) != 0 {
		t.Fatalf("after close: listeners(%s) = %v, %v; want none", addr, pids, err)
	}
}

func TestCPUPerGrab(t *testing.T) {
	ps := []cpuProc{{"gateway", nil}, {"redis", nil}}
	got := cpuPerGrab(ps, []time.Duration{time.Second, 0}, []time.Duration{3 * time.Second, time.Second}, 20_000)
	want := map[string]float64{"cpu_us_per_grab_gateway": 100, "cpu_us_per_grab_redis": 50, "cpu_us_per_grab_total": 150}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %v, want only %v", got, want)
	}
}
