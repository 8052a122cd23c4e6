package scripts

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/testenv"
)

// incr counts its runs in KEYS[1].
var incr = &Script{redis.NewScript("return redis.call('INCR', KEYS[1])")}

// A script run alone after Redis lost its script cache (SCRIPT FLUSH, as
// a restart or a failover leaves it) is sent whole and runs once.
func TestRunAfterScriptFlush(t *testing.T) {
	t.Parallel()
	rdb := testenv.StartRedis(t).Client(t)
	ctx := t.Context()
	for want := int64(1); want <= 3; want++ {
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		var n int64
		var err error
		if want%2 == 1 {
			n, err = incr.Run(ctx, rdb, []string{"runs"}).Int64()
		} else {
			n, err = incr.RunArgs(ctx, rdb, Args{Keys: []string{"runs"}}).Int64()
		}
		if err != nil || n != want {
			t.Fatalf("run %d after SCRIPT FLUSH: %d, %v", want, n, err)
		}
	}
}

// A script queued in a pipeline after Redis lost its script cache does
// nothing there (Lost); Reply runs it once in a round trip of its own, and
// a second Reply does not run it again. The pipeline's other commands ran.
func TestQueuedAfterScriptFlush(t *testing.T) {
	t.Parallel()
	rdb := testenv.StartRedis(t).Client(t)
	ctx := t.Context()
	if err := incr.Run(ctx, rdb, []string{"runs"}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	var q *Queued
	var beside *redis.IntCmd
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		q = incr.In(ctx, p, rdb, Args{Keys: []string{"runs"}})
		beside = p.Incr(ctx, "beside")
		return nil
	})
	if !q.Lost() {
		t.Fatalf("the queued run after SCRIPT FLUSH: %v, want NOSCRIPT", q.cmd.Err())
	}
	if beside.Val() != 1 {
		t.Errorf("the pipeline's other command: %v", beside.Err())
	}
	for range 2 {
		if n, err := q.Reply(ctx).Int64(); err != nil || n != 2 {
			t.Fatalf("Reply: %d, %v; want the second run", n, err)
		}
		if q.Lost() {
			t.Error("Lost after Reply ran the script again")
		}
	}
	if n := rdb.Get(ctx, "runs").Val(); n != "2" {
		t.Errorf("the script ran %s times, want 2", n)
	}

	// With the script cached, the queued run is the pipeline's.
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		q = incr.In(ctx, p, rdb, Args{Keys: []string{"runs"}})
		return nil
	})
	if n, err := q.Reply(ctx).Int64(); q.Lost() || err != nil || n != 3 {
		t.Fatalf("cached: Reply %d, %v; want 3", n, err)
	}
}
