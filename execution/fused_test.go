package execution_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// tripLog records a worker's round trips to Redis: what each carried, in
// order, named by step ("peek" for a claim's peek, "claim", the "claimed"
// count of jobs the claim script handed out, "slot" for an acquire of
// slots of the lease set named slots), and what else as its command name.
type tripLog struct {
	slots string
	mu    sync.Mutex
	trips [][]string
}

func (l *tripLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *tripLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		l.add([]redis.Cmder{cmd})
		return err
	}
}

func (l *tripLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		l.add(cmds)
		return err
	}
}

func (l *tripLog) add(cmds []redis.Cmder) {
	var trip []string
	for _, cmd := range cmds {
		args := cmd.Args()
		name := cmd.Name()
		if name == "evalsha" && len(args) > 3 {
			switch {
			case args[1] == execution.PeekScript.Hash() && args[8] != int64(0) && args[8] != 0:
				name = "peek" // a claim's: the reaper's asks for 0 lanes
			case args[1] == execution.ClaimScript.Hash():
				name = "claim"
				if v, ok := cmd.(*redis.Cmd).Val().([]any); ok && len(v) > 3 {
					name = "claimed"
				}
			case args[3] == l.slots:
				name = "slot"
			}
		}
		trip = append(trip, name)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.trips = append(l.trips, trip)
}

func (l *tripLog) all() [][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.trips)
}

// A claim that follows another takes one round trip when its jobs' keys
// grant every ask (neither a limit nor a budget, as a tenant's key
// usually has): the round trip takes the jobs' slots, then runs the claim
// script, then reads the next claim's peek (queue.fused). Here a worker
// with room for one job (so that every claim asks for as many as the one
// before: a peek read for fewer does not stand in for a larger claim's)
// runs 40 jobs of one tenant, submitted before it starts
// (and after another worker has run one, so that Redis has the scripts:
// a script's first run takes a round trip more): only its first claim
// peeks in a round trip of its own, and every handler finds its execution
// holding its slot of tenant:acme (the fleet-wide limit counts it).
//
// Fails when a fused claim does not take its jobs' slots, or takes them
// after its script, or when a claim does not use the peek read along
// with the one before.
func TestAClaimThatFollowsAnotherTakesOneRoundTrip(t *testing.T) {
	t.Parallel()
	const n = 40
	srv := testenv.Redis(t)
	f := newFixtureOn(t, srv.Client(t), testenv.NATS(t).Conn(t))
	slots := keys.New(f.prefix).LeaseSet("tenant:acme")
	quick := func(context.Context, *execution.Execution) (any, error) { return "ok", nil }
	_, stopFirst := f.startWorker(t, execution.Config{}, map[string]execution.Handler{"quick": quick})
	f.waitState(t, f.submit(t, job.Submission{Kind: "quick"}).ID, 10*time.Second, job.StateSucceeded)
	stopFirst()
	var ids []string
	for range n {
		ids = append(ids, f.submit(t, job.Submission{Kind: "quick"}).ID)
	}
	var slotless atomic.Int32
	log := &tripLog{slots: slots}
	wrdb := srv.Client(t)
	wrdb.AddHook(log)
	_, stop := f.startWorkerOn(t, wrdb, execution.WithAlongFor(execution.Config{Concurrency: 1}, time.Hour),
		map[string]execution.Handler{"quick": func(ctx context.Context, e *execution.Execution) (any, error) {
			if err := f.rdb.ZScore(ctx, slots, e.ID).Err(); err != nil {
				slotless.Add(1)
			}
			return "ok", nil
		}})
	for _, id := range ids {
		f.waitState(t, id, 10*time.Second, job.StateSucceeded)
	}
	stop()
	if k := slotless.Load(); k > 0 {
		t.Errorf("%d executions ran without their slot of tenant:acme", k)
	}

	trips := log.all()
	var lastClaimed int
	for i, trip := range trips {
		if slices.Contains(trip, "claimed") {
			lastClaimed = i
		}
	}
	var peeks, claims int
	for _, trip := range trips[:lastClaimed+1] {
		c := max(slices.Index(trip, "claim"), slices.Index(trip, "claimed"))
		p := slices.Index(trip, "peek")
		switch {
		case c < 0 && p >= 0:
			peeks++
		case c >= 0:
			claims++
			if s := slices.Index(trip, "slot"); s > c {
				t.Errorf("a claim's round trip %v takes its slots after its script", trip)
			}
			if p < c {
				t.Errorf("a claim's round trip %v does not read the next claim's peek after its script", trip)
			}
		}
	}
	t.Logf("%d claims, %d peeks of their own, in %d round trips", claims, peeks, len(trips))
	if peeks != 1 {
		t.Errorf("%d claims of %d peeked in round trips of their own, want 1, the first", peeks, claims)
	}
	if claims < n {
		t.Errorf("%d claims ran %d jobs one at a time", claims, n)
	}
}

// A fused claim takes its slots in the round trip of its script, before
// it (queue.fused). When that fails and the script claims anyway, the
// jobs must not run without their slots: the worker hands them back
// unrun. Here tenant:acme's lease set is a string, on which the slot's
// script fails (WRONGTYPE) while the claim script, which does not touch
// it, claims job X: X goes back to its lane at once, its attempt unspent,
// and once the set is whole again X runs, holding its slot, on its first
// attempt.
//
// Fails when a claim whose slots failed starts its jobs anyway, or leaves
// them to the reaper (X would wait for its lease's TTL, a minute, and
// spend an attempt).
func TestAFusedClaimWhoseSlotsFailRunsNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	slots := breakLeaseSet(t, f, "tenant:acme")
	x := f.submit(t, job.Submission{Kind: "quick"})
	var runs, slotless atomic.Int32
	f.startWorker(t, execution.Config{LeaseTTL: time.Minute}, map[string]execution.Handler{
		"quick": func(ctx context.Context, e *execution.Execution) (any, error) {
			runs.Add(1)
			if err := f.rdb.ZScore(ctx, slots, e.ID).Err(); err != nil {
				slotless.Add(1)
			}
			return "ok", nil
		}})
	var back job.Job
	testenv.Eventually(t, 10*time.Second, func() bool {
		back = f.get(t, x.ID)
		return back.Execution != nil && back.State != job.StateRunning
	}, "X was not claimed, or not handed back")
	if k := runs.Load(); k > 0 {
		t.Fatalf("X ran %d times while its slots could not be taken", k)
	}
	if back.State != job.StateQueued || back.Attempt != 1 {
		t.Fatalf("X is %s on attempt %d after its claim's slots failed, want queued on 1, unspent: handed back unrun", back.State, back.Attempt)
	}
	if err := f.rdb.Del(t.Context(), slots).Err(); err != nil {
		t.Fatal(err)
	}
	done := f.waitState(t, x.ID, 10*time.Second, job.StateSucceeded)
	if k := runs.Load(); k != 1 || slotless.Load() != 0 || done.Attempt != 1 {
		t.Fatalf("X ran %d times (%d without its slot), succeeding on attempt %d; want once, with it, on attempt 1",
			k, slotless.Load(), done.Attempt)
	}
}

// A key whose slots cannot be taken (here a lease set of the wrong type;
// on a Redis Cluster, its shard down) holds back its own jobs only: the
// other tenants' run meanwhile, and its own once it is whole again.
func TestAKeyWhoseSlotsFailHoldsBackOnlyItsJobs(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	slots := breakLeaseSet(t, f, "tenant:acme")
	x := f.submit(t, job.Submission{Kind: "quick"})
	var acmeRuns atomic.Int32
	f.startWorker(t, execution.Config{Concurrency: 4, LeaseTTL: time.Minute}, map[string]execution.Handler{
		"quick": func(ctx context.Context, e *execution.Execution) (any, error) {
			if e.JobID == x.ID {
				acmeRuns.Add(1)
			}
			return "ok", nil
		}})
	// X's lane is at the head before the others' jobs come: the claims
	// after the first ask for its slots early.
	testenv.Eventually(t, 10*time.Second, func() bool {
		return f.get(t, x.ID).Execution != nil
	}, "X was never claimed")
	var others []string
	for range 20 {
		j, _, err := f.store.Submit(t.Context(), "other", job.Submission{Kind: "quick"}, "")
		if err != nil {
			t.Fatal(err)
		}
		others = append(others, j.ID)
	}
	for _, id := range others {
		testenv.Eventually(t, 10*time.Second, func() bool {
			j, err := f.store.Get(t.Context(), "other", id, false)
			return err == nil && j.State == job.StateSucceeded
		}, "another tenant's job did not run while acme's slots could not be taken")
	}
	if k := acmeRuns.Load(); k > 0 {
		t.Fatalf("X ran %d times while its slots could not be taken", k)
	}
	if err := f.rdb.Del(t.Context(), slots).Err(); err != nil {
		t.Fatal(err)
	}
	f.waitState(t, x.ID, 10*time.Second, job.StateSucceeded)
	if k := acmeRuns.Load(); k != 1 {
		t.Fatalf("X ran %d times, want once", k)
	}
}

// breakLeaseSet makes key's lease set a string, which every ask for a
// slot of it fails on (WRONGTYPE), and returns its Redis key.
func breakLeaseSet(t *testing.T, f *fixture, key string) string {
	t.Helper()
	slots := keys.New(f.prefix).LeaseSet(key)
	if err := f.rdb.Set(t.Context(), slots, "not a lease set", 0).Err(); err != nil {
		t.Fatal(err)
	}
	return slots
}
