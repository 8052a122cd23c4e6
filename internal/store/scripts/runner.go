package scripts

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Script is a Lua script that runs by its hash (EVALSHA), and is sent
// whole (EVAL) only when Redis does not have it cached: after a restart,
// a failover or a SCRIPT FLUSH. Every script of Leasehold runs through it,
// alone (Run) or in a pipeline (In), so that path is written once.
type Script struct{ s *redis.Script }

// Args is one run's KEYS and ARGV, as the encoder beside its script lays
// them out: the one place that knows where each key and argument goes.
type Args struct {
	Keys []string
	Argv []any
}

// Run runs the script on c with keys and args: EVALSHA, then EVAL once if
// Redis had lost it.
func (s *Script) Run(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd {
	return s.s.Run(ctx, c, keys, args...)
}

// RunArgs is Run with a's keys and arguments.
func (s *Script) RunArgs(ctx context.Context, c redis.Scripter, a Args) *redis.Cmd {
	return s.s.Run(ctx, c, a.Keys, a.Argv...)
}

// Hash is the script's SHA1, the name EVALSHA sends.
func (s *Script) Hash() string { return s.s.Hash() }

// Load caches the script in c's Redis (SCRIPT LOAD) and returns its hash.
func (s *Script) Load(ctx context.Context, c redis.Scripter) *redis.StringCmd {
	return s.s.Load(ctx, c)
}

// Queued is a run of a script queued on a pipeline (In). Inside a
// pipeline the EVALSHA's NOSCRIPT comes back only once the pipeline has
// run, too late to send EVAL in it: Reply then runs the script again in a
// round trip of its own.
type Queued struct {
	s   *Script
	c   redis.Scripter
	a   Args
	cmd *redis.Cmd
}

// In queues the script's EVALSHA with a on p; c is the client p belongs
// to, which runs the script again if Redis had lost it.
func (s *Script) In(ctx context.Context, p redis.Pipeliner, c redis.Scripter, a Args) *Queued {
	return &Queued{s: s, c: c, a: a, cmd: s.s.EvalSha(ctx, p, a.Keys, a.Argv...)}
}

// Lost reports whether Redis did not have the script when the pipeline
// ran: the run did nothing, and the pipeline's other commands ran without
// it. It is false once Reply has run the script again.
func (q *Queued) Lost() bool { return NoScript(q.cmd.Err()) }

// Reply returns the run's reply once its pipeline has run: the EVALSHA's,
// or, when Redis had lost the script, that of a run of its own.
func (q *Queued) Reply(ctx context.Context) *redis.Cmd {
	if q.Lost() {
		q.cmd = q.s.RunArgs(ctx, q.c, q.a)
	}
	return q.cmd
}

// NoScript reports whether err is Redis's NOSCRIPT: it did not have a
// script cached and ran nothing.
func NoScript(err error) bool { return redis.HasErrorPrefix(err, "NOSCRIPT") }

// Eval queues the script's EVAL with a on p: the whole source, which Redis
// runs whether it has it cached or not. It is for a read queued in a
// pipeline whose callers treat any failed command as the pipeline's
// failure, where a NOSCRIPT could not be told from Redis being down.
func (s *Script) Eval(ctx context.Context, p redis.Pipeliner, a Args) *redis.Cmd {
	return s.s.Eval(ctx, p, a.Keys, a.Argv...)
}
