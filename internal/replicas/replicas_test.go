package replicas_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/replicas"
	"github.com/leasehold/leasehold/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m, nil) }

// Under Ack a write waits for its replica: it succeeds while the replica
// follows, and fails with ErrNotConfirmed, a single command and every
// command of a pipeline, while the replica is paused. A write not under
// Ack does not wait.
//
// Fails when the hook sends no WAIT (the paused replica's writes succeed).
func TestAckedWritesWaitForTheirReplica(t *testing.T) {
	t.Parallel()
	primary := testenv.StartRedis(t)
	replica := testenv.StartReplica(t, primary)
	rdb := redis.NewClient(&redis.Options{Addr: primary.Addr()})
	t.Cleanup(func() { rdb.Close() })
	const timeout = 300 * time.Millisecond
	if err := replicas.Require(rdb, 1, timeout); err != nil {
		t.Fatal(err)
	}
	ctx := replicas.Ack(t.Context())
	if err := rdb.Set(ctx, "k", "1", 0).Err(); err != nil {
		t.Fatalf("acked write with its replica up: %v", err)
	}
	if got, err := replica.Client(t).Get(t.Context(), "k").Result(); err != nil || got != "1" {
		t.Fatalf("the replica has %q (%v) once the write was acknowledged, want 1", got, err)
	}

	if err := replica.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = replica.Resume() })
	start := time.Now()
	if err := rdb.Set(ctx, "k", "2", 0).Err(); !errors.Is(err, replicas.ErrNotConfirmed) {
		t.Fatalf("acked write with its replica paused: %v, want ErrNotConfirmed", err)
	}
	if took := time.Since(start); took < timeout {
		t.Fatalf("the refusal came after %v, before the %v timeout", took, timeout)
	}
	cmds, _ := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "a", "1", 0)
		p.Incr(ctx, "b")
		return nil
	})
	for _, c := range cmds {
		if !errors.Is(c.Err(), replicas.ErrNotConfirmed) {
			t.Fatalf("%v in an acked pipeline with the replica paused: %v, want ErrNotConfirmed", c.Args(), c.Err())
		}
	}
	if err := rdb.Set(t.Context(), "k", "3", 0).Err(); err != nil {
		t.Fatalf("a write not under Ack: %v, want no wait", err)
	}
}

// On a Cluster the WAIT goes to the node that took the write: the test
// cluster's masters have no replicas, so an acked write is refused, one
// command or a pipeline across nodes, and a write not under Ack is not.
func TestAckedWritesOnAClusterWaitOnTheirNode(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClusterClient(testenv.Cluster(t).Options())
	t.Cleanup(func() { rdb.Close() })
	if err := replicas.Require(rdb, 1, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	prefix := testenv.Prefix(t)
	ctx := replicas.Ack(t.Context())
	if err := rdb.Set(ctx, prefix+"k", "1", 0).Err(); !errors.Is(err, replicas.ErrNotConfirmed) {
		t.Fatalf("acked write on a master without replicas: %v, want ErrNotConfirmed", err)
	}
	cmds, _ := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range []string{"a", "b", "c", "d", "e", "f"} { // several slots, several nodes
			p.Set(ctx, prefix+k, "1", 0)
		}
		return nil
	})
	for _, c := range cmds {
		if !errors.Is(c.Err(), replicas.ErrNotConfirmed) {
			t.Fatalf("%v: %v, want ErrNotConfirmed", c.Args(), c.Err())
		}
	}
	if err := rdb.Set(t.Context(), prefix+"k", "1", 0).Err(); err != nil {
		t.Fatalf("a write not under Ack: %v", err)
	}
}

// Under Defer a write does not wait, but owes its WAIT: Confirm on the
// connection it was made on fails while the replica is paused and succeeds
// once it has caught up. Without Require nothing is owed.
//
// Fails when Defer's writes wait (the paused replica fails the write), or
// when Confirm sends no WAIT (it succeeds with the replica paused).
func TestDeferredWritesAreConfirmedLater(t *testing.T) {
	t.Parallel()
	primary := testenv.StartRedis(t)
	replica := testenv.StartReplica(t, primary)
	rdb := redis.NewClient(&redis.Options{Addr: primary.Addr()})
	t.Cleanup(func() { rdb.Close() })
	plain := redis.NewClient(&redis.Options{Addr: primary.Addr()})
	t.Cleanup(func() { plain.Close() })
	const timeout = 300 * time.Millisecond
	if err := replicas.Require(rdb, 1, timeout); err != nil {
		t.Fatal(err)
	}

	var none replicas.Owed
	conn := plain.Conn()
	defer conn.Close()
	if err := conn.Set(replicas.Defer(t.Context(), &none), "k", "0", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if none.Due() {
		t.Fatal("a client without Require owes a WAIT")
	}

	if err := replica.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = replica.Resume() })
	var owed replicas.Owed
	conn = rdb.Conn()
	defer conn.Close()
	if err := conn.Set(replicas.Defer(t.Context(), &owed), "k", "1", 0).Err(); err != nil {
		t.Fatalf("deferred write with its replica paused: %v, want no wait", err)
	}
	if !owed.Due() {
		t.Fatal("a deferred write under Require owes no WAIT")
	}
	if err := owed.Confirm(t.Context(), conn); !errors.Is(err, replicas.ErrNotConfirmed) {
		t.Fatalf("Confirm with the replica paused: %v, want ErrNotConfirmed", err)
	}
	if err := replica.Resume(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return owed.Confirm(t.Context(), conn) == nil },
		"Confirm never succeeded with the replica resumed")
	if got, err := replica.Client(t).Get(t.Context(), "k").Result(); err != nil || got != "1" {
		t.Fatalf("the replica has %q (%v) once the write was confirmed, want 1", got, err)
	}
}
