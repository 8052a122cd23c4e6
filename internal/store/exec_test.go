package store

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
)

// newExecStore returns a store under a prefix of the test's own, its
// client and its keys.
func newExecStore(t *testing.T) (*Store, redis.UniversalClient, keys.Space) {
	t.Helper()
	rdb := testenv.Redis(t).Client(t)
	prefix := testenv.Prefix(t)
	return New(rdb, Config{Prefix: prefix}), rdb, keys.New(prefix)
}

// A worker's beat writes its entry, which LiveWorkers reads back with its
// heartbeat on the Redis clock; an entry that cannot be read is left out,
// and RemoveWorker takes the entry out.
func TestWorkerRegistry(t *testing.T) {
	t.Parallel()
	s, rdb, ks := newExecStore(t)
	ctx := t.Context()
	started := time.UnixMilli(time.Now().UnixMilli())
	beat := WorkerBeat{ID: "w-1", TTL: 5 * time.Second, Host: "h", Queues: []string{"default"}, Running: 2,
		Tenants: map[string]int{"acme": 2}, StartedAt: started}
	if err := s.BeatWorker(ctx, beat); err != nil {
		t.Fatal(err)
	}
	if err := s.BeatWorker(ctx, WorkerBeat{ID: "w-2", TTL: 5 * time.Second, StartedAt: started}); err != nil {
		t.Fatal(err)
	}
	rdb.HSet(ctx, ks.Worker("w-2"), "running", "many") // not readable: left out
	live, err := s.LiveWorkers(ctx)
	if err != nil || len(live) != 1 {
		t.Fatalf("live workers: %+v, %v; want w-1 alone", live, err)
	}
	w := live[0]
	if w.ID != "w-1" || w.Host != "h" || len(w.Queues) != 1 || w.Kinds == nil || len(w.Kinds) != 0 || w.Running != 2 ||
		w.Tenants["acme"] != 2 || !w.StartedAt.Equal(started) || time.Since(w.HeartbeatAt).Abs() > time.Minute {
		t.Fatalf("entry %+v", w)
	}
	if ttl := rdb.PTTL(ctx, ks.Worker("w-1")).Val(); ttl <= 0 || ttl > 5*time.Second {
		t.Fatalf("the entry expires in %v, want within its TTL of 5s", ttl)
	}
	if err := s.RemoveWorker(ctx, "w-1"); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, ks.Worker("w-1")).Val(); n != 0 || rdb.ZScore(ctx, ks.Workers(), "w-1").Err() == nil {
		t.Fatal("the removed worker's entry is still there")
	}
}

// PausedQueues reads the set the API writes; JobsCancelRequested reads each
// job's cancel_requested, false for a job not asked for or gone.
func TestPausedQueuesAndCancelRequested(t *testing.T) {
	t.Parallel()
	s, rdb, ks := newExecStore(t)
	ctx := t.Context()
	if set, err := s.PausedQueues(ctx); err != nil || len(set) != 0 {
		t.Fatalf("no queue paused: %v, %v", set, err)
	}
	rdb.SAdd(ctx, ks.PausedQueues(), "a", "b")
	if set, err := s.PausedQueues(ctx); err != nil || !set["a"] || !set["b"] || len(set) != 2 {
		t.Fatalf("a and b paused: %v, %v", set, err)
	}

	rdb.HSet(ctx, ks.Job("q", "j1"), "cancel_requested", "1")
	rdb.HSet(ctx, ks.Job("q", "j2"), "cancel_requested", "0")
	rdb.HSet(ctx, ks.Job("q", "j4"), "cancel_requested", "1")
	got, err := s.JobsCancelRequested(ctx, []QueuedJob{{"q", "j1"}, {"q", "j2"}, {"q", "j3"}, {"", "j4"}})
	if err != nil || len(got) != 4 || !got[0] || got[1] || got[2] || got[3] {
		t.Fatalf("cancel requested: %v, %v; want [true false false false]", got, err)
	}
}

// Depth counts the ready jobs of each lane and the age of the job the next
// claim takes, from its newest event, on the Redis clock.
func TestDepth(t *testing.T) {
	t.Parallel()
	s, rdb, ks := newExecStore(t)
	ctx := t.Context()
	if d, err := s.Depth(ctx, "q"); err != nil || len(d.Lanes) != 0 || d.Oldest != 0 {
		t.Fatalf("an empty queue: %+v, %v", d, err)
	}
	lane := "noop|tenant:acme"
	rdb.HSet(ctx, ks.QueueFair("q"), "#"+lane, 3)
	rdb.ZAdd(ctx, ks.QueueReady("q"), redis.Z{Score: 1, Member: lane})
	rdb.ZAdd(ctx, ks.QueueLane("q", lane), redis.Z{Score: 1, Member: "j1"})
	queued := time.Now().Add(-time.Minute).UnixMilli()
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: ks.JobEvents("q", "j1"), ID: strconv.FormatInt(queued, 10) + "-0", Values: []any{"type", "queued"}})
	d, err := s.Depth(ctx, "q")
	if err != nil || d.Lanes[lane] != 3 || d.Oldest < 50*time.Second || d.Oldest > 2*time.Minute {
		t.Fatalf("a lane of 3, its first job queued a minute ago: %+v, %v", d, err)
	}
}

// The running execution's writes are fenced: a heartbeat renews the
// lease (and tells a cancel requested) only for the execution that owns
// the job, and so do a checkpoint and an emitted event; a stale token, or
// the same token under another execution id, changes nothing.
func TestRunningExecutionWrites(t *testing.T) {
	t.Parallel()
	s, rdb, ks := newExecStore(t)
	ctx := t.Context()
	run := func(job, exec string, token fencing.Token, cancel string) RunningExecution {
		rdb.HSet(ctx, ks.Job("q", job), "state", "running", "token", token.String(), "exec_id", exec, "cancel_requested", cancel)
		rdb.ZAdd(ctx, ks.QueueLeases("q"), redis.Z{Score: float64(time.Now().Add(time.Minute).UnixMilli()), Member: job})
		return RunningExecution{JobID: job, ID: exec, Token: token}
	}
	held, cancelled := run("j1", "e1", 7, "0"), run("j2", "e2", 8, "1")
	stale := held
	stale.Token = 6
	other := held
	other.ID = "e0"
	got, err := s.HeartbeatExecutions(ctx, HeartbeatParams{Queue: "q", TTL: time.Hour,
		Executions: []RunningExecution{held, cancelled, stale, other}})
	want := []ExecutionStatus{ExecutionHeld, ExecutionCancelRequested, ExecutionLost, ExecutionLost}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("heartbeat: %v, %v; want %v", got, err, want)
	}
	if left := time.Until(time.UnixMilli(int64(rdb.ZScore(ctx, ks.QueueLeases("q"), "j1").Val()))); left < 50*time.Minute {
		t.Fatalf("the held lease expires in %v, want the hour it was renewed for", left)
	}
	// A slot of a key gone: the execution has lost its lease.
	keyed := held
	keyed.Keys = []string{"tenant:acme"}
	if got, err := s.HeartbeatExecutions(ctx, HeartbeatParams{Queue: "q", TTL: time.Hour, Executions: []RunningExecution{keyed}}); err != nil ||
		got[0] != ExecutionLost {
		t.Fatalf("heartbeat without the key's slot: %v, %v; want lost", got, err)
	}

	for _, c := range []struct {
		e  RunningExecution
		ok bool
	}{{held, true}, {stale, false}, {other, false}} {
		if ok, err := s.SaveCheckpoint(ctx, "q", c.e, []byte(`{"n":1}`)); err != nil || ok != c.ok {
			t.Errorf("checkpoint of %+v: %v, %v; want %v", c.e, ok, err, c.ok)
		}
		if ok, err := s.EmitEvent(ctx, "q", c.e, "log", []byte(`"hi"`)); err != nil || ok != c.ok {
			t.Errorf("emit of %+v: %v, %v; want %v", c.e, ok, err, c.ok)
		}
	}
	if n := rdb.XLen(ctx, ks.JobEvents("q", "j1")).Val(); n != 1 {
		t.Errorf("%d events, want the owner's one", n)
	}
}
