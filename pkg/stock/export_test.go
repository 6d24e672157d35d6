package stock

import (
	"context"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// ReserveBatch sends grabs to Redis as one coalesced batch, as if they had all been queued
// when a dispatcher looked (the gate must be built WithCoalescing): the tests can then
// compare a batch's verdicts with those of the same grabs reserved one by one, which a
// crowd racing the dispatchers cannot pin down.
func ReserveBatch(ctx context.Context, g *Gate, grabs []seckill.Grab) ([]Verdict, []error) {
	batch := make([]*pending, len(grabs))
	for i, gr := range grabs {
		keys, args := reserveArgs(gr)
		batch[i] = &pending{ctx: ctx, keys: keys, args: args, done: make(chan struct{})}
	}
	g.coalesce.send(batch)
	vs, errs := make([]Verdict, len(grabs)), make([]error, len(grabs))
	for i, p := range batch {
		<-p.done
		if errs[i] = p.err; p.err == nil {
			vs[i], errs[i] = verdictOf(grabs[i].RequestID, p.res)
		}
	}
	return vs, errs
}
