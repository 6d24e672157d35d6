package stacktest

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// RoundTrips is a go-redis hook that counts what a client sends: each command, and each
// pipeline as a whole, is one round trip. Add it with AddHook; N reads the count.
type RoundTrips struct{ n atomic.Int64 }

// N is the round trips counted so far.
func (h *RoundTrips) N() int64 { return h.n.Load() }

func (h *RoundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *RoundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}

func (h *RoundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(1); return next(ctx, cmds) }
}
