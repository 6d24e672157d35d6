package stock

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// scriptCall is one script invocation of a pipelined batch.
type scriptCall struct {
	keys []string
	args []any
}

// runScripts sends the calls of s in one pipeline and returns one command per call, in
// order, each holding its own reply or error. On a Redis Cluster go-redis splits the
// pipeline per node (every call's keys share one hash tag, so one slot) and sets each
// command's reply on that command, so replies map back to their calls whatever node served
// them, and a failing node fails only its own calls.
//
// A call that found the script missing on its node (NOSCRIPT: the node restarted, or a
// replica was promoted without the script in its cache) is sent again with EVAL, which
// runs it and caches it there, and only that call: the others have already run, and an
// admission run twice answers "seen" instead of "admitted". Loading the script with SCRIPT
// LOAD instead would need every node of a cluster to answer, one that is down included.
func runScripts(ctx context.Context, rdb redis.UniversalClient, s *redis.Script, calls []scriptCall) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	pipe := rdb.Pipeline()
	for i, c := range calls {
		cmds[i] = s.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	execErr := pipelineErr(pipe.Exec(ctx))
	var again []int
	for i, c := range cmds {
		if execErr != nil && c.Err() == nil && c.Val() == nil {
			c.SetErr(execErr) // never sent
		}
		if isNoScript(c.Err()) {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return cmds
	}
	pipe = rdb.Pipeline()
	for _, i := range again {
		cmds[i] = s.Eval(ctx, pipe, calls[i].keys, calls[i].args...)
	}
	execErr = pipelineErr(pipe.Exec(ctx))
	for _, i := range again {
		if c := cmds[i]; execErr != nil && c.Err() == nil && c.Val() == nil {
			c.SetErr(execErr)
		}
	}
	return cmds
}

// pipelineErr is Exec's error unless it only reports a nil reply (a script returning
// nothing), which is one command's answer, not a failure.
func pipelineErr(_ []redis.Cmder, err error) error {
	if errors.Is(err, redis.Nil) {
		return nil
	}
	return err
}
