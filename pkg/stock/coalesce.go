package stock

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// coalescer sends concurrent Reserve calls to Redis as pipelines: a few dispatchers each
// take the first waiting call and whatever else is already queued (up to max) and send
// them in one round trip. Nothing waits for a batch to fill, so a lone call goes out at
// once; under a flash crowd one write and one read carry dozens of scripts, which is what
// lets Redis and the gateway spend their CPU on the scripts rather than on syscalls. Each
// script still runs atomically on its own; a pipeline retried by go-redis re-runs scripts
// that are idempotent on the request id.
type coalescer struct {
	rdb     redis.UniversalClient
	script  *redis.Script
	queue   chan *pending
	max     int
	workers int
}

type pending struct {
	ctx  context.Context
	keys []string
	args []any
	res  []any
	err  error
	done chan struct{}
}

func (c *coalescer) run() {
	for range c.workers {
		go c.dispatch()
	}
}

func (c *coalescer) dispatch() {
	batch := make([]*pending, 0, c.max)
	for first := range c.queue {
		batch = append(batch[:0], first)
	fill:
		for len(batch) < c.max {
			select {
			case p, ok := <-c.queue:
				if !ok {
					break fill
				}
				batch = append(batch, p)
			default:
				break fill
			}
		}
		c.send(batch)
	}
}

func (c *coalescer) send(batch []*pending) {
	// The calls' own contexts may end while queued; the pipeline runs under the first's
	// deadline-free parent so one impatient caller cannot fail the others.
	ctx := context.WithoutCancel(batch[0].ctx)
	calls := make([]scriptCall, len(batch))
	for i, p := range batch {
		calls[i] = scriptCall{keys: p.keys, args: p.args}
	}
	// One command per call, whichever node of a cluster served it (runScripts).
	cmds := runScripts(ctx, c.rdb, c.script, calls)
	for i, p := range batch {
		p.res, p.err = cmds[i].Slice()
		close(p.done)
	}
}

// call queues one script call and waits for its reply or ctx.
func (c *coalescer) call(ctx context.Context, keys []string, args ...any) ([]any, error) {
	p := &pending{ctx: ctx, keys: keys, args: args, done: make(chan struct{})}
	select {
	case c.queue <- p:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case <-p.done:
		return p.res, p.err
	case <-ctx.Done():
		// The script may still run: the reservation is then the durable intent, and the
		// reconciler finds it (as after a lost reply).
		return nil, ctx.Err()
	}
}

// Option configures a Gate.
type Option func(*Gate)

// WithCoalescing makes Reserve pipeline concurrent calls: up to max scripts per round
// trip, over workers connections at once.
func WithCoalescing(max, workers int) Option {
	return func(g *Gate) {
		g.coalesce = &coalescer{rdb: g.rdb, script: g.reserve, queue: make(chan *pending, 16*max), max: max, workers: workers}
	}
}

func (g *Gate) reserveCall(ctx context.Context, gr seckill.Grab) ([]any, error) {
	keys, args := reserveArgs(gr)
	if g.coalesce != nil {
		res, err := g.coalesce.call(ctx, keys, args...)
		if err != nil {
			return nil, fmt.Errorf("reserve %s: %w", gr.RequestID, err)
		}
		return res, nil
	}
	res, err := g.reserve.Run(ctx, g.rdb, keys, args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("reserve %s: %w", gr.RequestID, err)
	}
	return res, nil
}

// Close stops the coalescing dispatchers. Call it only after every Reserve returned (the
// gateway closes the gate after its HTTP servers stopped).
func (g *Gate) Close() {
	if g.coalesce != nil {
		close(g.coalesce.queue)
	}
}
