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
// once; under a flash crowd one write and one read carry dozens of grabs, which is what
// lets Redis and the gateway spend their CPU on the scripts rather than on syscalls. The
// grabs of one session×prize in a batch go in one script call (group), so a crowd on a hot
// prize costs one EVALSHA per round trip instead of one per grab; each call runs atomically,
// and a pipeline retried by go-redis re-runs scripts that are idempotent on the request id.
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
	calls, members := group(batch)
	// One command per session×prize, whichever node of a cluster served it (runScripts).
	cmds := runScripts(ctx, c.rdb, c.script, calls)
	for i, cmd := range cmds {
		res, err := cmd.Slice()
		if err == nil && len(res) != 3*len(members[i]) {
			err = fmt.Errorf("admission script answered %d values for %d grabs", len(res), len(members[i]))
		}
		for j, p := range members[i] {
			if err != nil {
				p.err = err
			} else {
				p.res = res[3*j : 3*j+3 : 3*j+3]
			}
			close(p.done)
		}
	}
}

// group makes one script call per session×prize of batch: the calls with the same keys
// (one prize's four keys, so one cluster slot) become one call whose arguments are theirs
// in arrival order, which the script judges one after another exactly as separate calls in
// that order. members[i] are the pendings of calls[i], in argument order.
func group(batch []*pending) (calls []scriptCall, members [][]*pending) {
	at := make(map[string]int, 4)
	for _, p := range batch {
		i, ok := at[p.keys[0]]
		if !ok {
			i = len(calls)
			at[p.keys[0]] = i
			calls = append(calls, scriptCall{keys: p.keys, args: make([]any, 0, 3*len(batch))})
			members = append(members, nil)
		}
		calls[i].args = append(calls[i].args, p.args...)
		members[i] = append(members[i], p)
	}
	return calls, members
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
