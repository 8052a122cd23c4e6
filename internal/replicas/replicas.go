// Package replicas makes the writes a caller acknowledges wait until
// enough replicas have them (Redis WAIT), so a failover to a replica that
// had not received them cannot lose them.
//
// A caller marks a context with Ack; Require installs a go-redis hook that,
// for every command run under a marked context, sends WAIT n timeout on
// the same connection, in the same round trip: a single command becomes a
// pipeline of the command and its WAIT, a pipeline gets a WAIT appended. On
// a Cluster the hook sits on each node's client, so the WAIT goes to the
// shard that took the writes. WAIT waits for everything the connection
// wrote, so a pipeline's reads cost nothing more than a reply. A
// transaction (MULTI/EXEC) is not waited for: WAIT cannot follow EXEC in
// go-redis's transaction reply; the callers that acknowledge writes use
// scripts and plain pipelines.
//
// When fewer than n replicas confirm in time, every command of the batch
// that had succeeded fails with an error wrapping ErrNotConfirmed (the
// write itself may have been applied on the primary: an idempotent retry
// is safe).
//
// A caller that can go on before its writes are confirmed marks its
// context with Defer instead, writes on a connection of its own
// (redis.Client.Conn), and sends the WAIT they owe later with
// Owed.Confirm on that connection: a worker's claim, whose handlers wait
// for the WAIT while the next claim goes out.
package replicas

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotConfirmed is wrapped by the error of a command run under Ack when
// fewer replicas than required confirmed it within the timeout.
var ErrNotConfirmed = errors.New("replicas: the write was not confirmed by enough replicas in time")

type ackKey struct{}

type deferKey struct{}

// Ack returns ctx marked: the commands run under it wait for replicas
// (when Require installed the hook on the client; otherwise it changes
// nothing).
func Ack(ctx context.Context) context.Context { return context.WithValue(ctx, ackKey{}, true) }

func acked(ctx context.Context) bool { v, _ := ctx.Value(ackKey{}).(bool); return v }

// Owed is a WAIT that writes made under Defer still owe, which Confirm
// sends. The zero value owes nothing.
type Owed struct{ h *hook }

// Defer returns ctx marked: the commands run under it send no WAIT, but
// record in o that one is owed (when Require installed the hook; otherwise
// o stays empty). A caller that acknowledges the writes only later (a
// claim whose handlers start once its WAIT returns) sends it then with
// Confirm, on the same connection, and meanwhile uses other connections.
func Defer(ctx context.Context, o *Owed) context.Context {
	return context.WithValue(ctx, deferKey{}, o)
}

func deferred(ctx context.Context) *Owed { o, _ := ctx.Value(deferKey{}).(*Owed); return o }

// Waiting reports whether the commands run on rdb under Ack wait for
// replicas (Require installed its hook on it), by sending one TIME under
// Defer.
func Waiting(ctx context.Context, rdb redis.UniversalClient) (bool, error) {
	var o Owed
	if err := rdb.Time(Defer(ctx, &o)).Err(); err != nil {
		return false, err
	}
	return o.Due(), nil
}

// Due says whether writes made under Defer owe a WAIT.
func (o *Owed) Due() bool { return o.h != nil }

// Confirm waits until enough replicas have everything conn wrote (the
// connection the writes under Defer were made on; WAIT counts one
// connection's writes, and a later write covers the earlier ones of every
// connection): nil when they do or nothing was owed, an error wrapping
// ErrNotConfirmed otherwise.
func (o *Owed) Confirm(ctx context.Context, conn *redis.Conn) error {
	if o.h == nil {
		return nil
	}
	return o.h.confirmed(conn.Wait(ctx, o.h.n, o.h.timeout).Result())
}

// Require makes the commands run on rdb under an Ack context wait for n
// replicas, at most timeout. n < 1 installs nothing. rdb is a *redis.Client
// (one Redis, or Sentinel's failover client) or a *redis.ClusterClient;
// Require must be called before the client is used.
func Require(rdb redis.UniversalClient, n int, timeout time.Duration) error {
	if n < 1 {
		return nil
	}
	switch c := rdb.(type) {
	case *redis.Client:
		c.AddHook(&hook{c: c, n: n, timeout: timeout})
	case *redis.ClusterClient:
		c.OnNewNode(func(node *redis.Client) { node.AddHook(&hook{c: node, n: n, timeout: timeout}) })
	default:
		return fmt.Errorf("replicas: cannot wait for replicas with a %T", rdb)
	}
	return nil
}

// hook is installed on one client: the one Redis, or one Cluster node.
type hook struct {
	c       *redis.Client
	n       int
	timeout time.Duration
}

func (h *hook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if o := deferred(ctx); o != nil && !setup(cmd) {
			o.h = h
			return next(ctx, cmd)
		}
		// XREAD BLOCK would hold the WAIT's reply back for as long as it blocks.
		if !acked(ctx) || cmd.Name() == "xread" || setup(cmd) {
			return next(ctx, cmd)
		}
		// The command and its WAIT on one connection: a pipeline, which
		// ProcessPipelineHook below completes.
		_, _ = h.c.Pipelined(ctx, func(p redis.Pipeliner) error { return p.Process(ctx, cmd) })
		return cmd.Err()
	}
}

func (h *hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if o := deferred(ctx); o != nil && len(cmds) > 0 && !setup(cmds[0]) {
			o.h = h
			return next(ctx, cmds)
		}
		if !acked(ctx) || len(cmds) == 0 || cmds[0].Name() == "multi" || setup(cmds[0]) {
			return next(ctx, cmds)
		}
		wait := redis.NewIntCmd(ctx, "wait", h.n, h.timeout.Milliseconds())
		_ = next(ctx, append(cmds[:len(cmds):len(cmds)], wait))
		failed := h.confirmed(wait.Result())
		var first error
		for _, cmd := range cmds {
			if cmd.Err() == nil && failed != nil {
				cmd.SetErr(failed)
			}
			if first == nil {
				first = cmd.Err()
			}
		}
		return first
	}
}

// confirmed reads a WAIT's reply: nil when at least n replicas confirmed,
// an error wrapping ErrNotConfirmed otherwise.
func (h *hook) confirmed(got int64, err error) error {
	switch {
	case err != nil:
		return fmt.Errorf("%w: WAIT: %w", ErrNotConfirmed, err)
	case got < int64(h.n):
		return fmt.Errorf("%w: %d of %d replicas within %v", ErrNotConfirmed, got, h.n, h.timeout)
	}
	return nil
}

// setup reports whether cmd sets a new connection up (go-redis runs those
// through the hooks too, under the caller's context): they write nothing,
// and a WAIT among them would open another connection to wait on, which
// would set itself up in turn.
func setup(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "auth", "select", "client", "readonly", "readwrite", "ping":
		return true
	}
	return false
}
