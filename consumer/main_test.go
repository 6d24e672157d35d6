package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/stacktest"
)

func TestConsumerStartsAndStops(t *testing.T) {
	stacktest.Redis(t)
	addr := stacktest.FreeAddr(t)
	getenv := stacktest.Getenv(map[string]string{"SECKILL_CONSUMER_ADDR": addr})
	ctx, cancel := context.WithCancel(context.Background())
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, getenv, &out) }()
	stacktest.WaitHTTP(t, "http://"+addr+"/healthz", 20*time.Second)
	stacktest.WaitHTTP(t, "http://"+addr+"/readyz", 20*time.Second)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run returned %v; log:\n%s", err, out.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("consumer did not stop within 20s")
	}
}
