package execution_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/ratelimit/usage"
)

// An execution whose worker loses Redis is found lost by another worker's
// claim, and the job's retry runs there: the tenant's usage counts the job
// submitted once, two executions started, one lost and one succeeded. Each
// is counted by the script that makes it happen, so the counts are there
// as soon as the state is: a worker that dies between its claim and any
// count of its own cannot leave one out.
func TestUsageCountsLostAndRetriedExecutions(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	counters, err := usage.New(store.New(f.rdb, store.Config{Prefix: f.prefix}), usage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// Blocks on its first attempt, until the lease is lost; succeeds after.
	firstBlocks := func(ctx context.Context, e *execution.Execution) (any, error) {
		if e.Attempt() == 1 {
			<-ctx.Done()
			return nil, context.Cause(ctx)
		}
		return "ok", nil
	}

	// Worker a runs on a client of its own, to be closed under it. Its
	// lease, lost when its client closes, must run out soon.
	aRDB := redis.NewClient(&redis.Options{Addr: testenv.Redis(t).Addr(), MaxRetries: -1})
	t.Cleanup(func() { aRDB.Close() })
	a, err := execution.NewWorker(aRDB, f.config(execution.Config{LeaseTTL: 500 * time.Millisecond, Usage: counters}))
	if err != nil {
		t.Fatal(err)
	}
	a.Handle("first-blocks", firstBlocks)
	ctx, stopA := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() { stopA(); <-done })

	j := f.submit(t, job.Submission{Kind: "first-blocks", MaxAttempts: 2})
	f.waitState(t, j.ID, 5*time.Second, job.StateRunning)
	if got := usageOf(t, f, counters); got[usage.JobsSubmitted] != 1 || got[usage.ExecutionsStarted] != 1 {
		t.Errorf("usage of a running job: %v, want 1 submitted and 1 started", got)
	}
	aRDB.Close() // a can neither renew its lease nor record a finish now

	f.startWorker(t, execution.Config{Usage: counters}, map[string]execution.Handler{"first-blocks": firstBlocks})
	if end := f.waitState(t, j.ID, 10*time.Second, job.StateSucceeded, job.StateFailed); end.State != job.StateSucceeded || end.Attempt != 2 {
		t.Fatalf("job %s at attempt %d, want succeeded at 2", end.State, end.Attempt)
	}
	want := map[string]int64{
		usage.JobsSubmitted:                1,
		usage.ExecutionsStarted:            2,
		usage.ExecutionsEnded("lost"):      1,
		usage.ExecutionsEnded("succeeded"): 1,
	}
	if got := usageOf(t, f, counters); !maps.Equal(got, want) {
		t.Errorf("usage %v, want %v", got, want)
	}
}

// A worker without Config.Usage counts no execution; the job is counted
// submitted all the same, by the store that created it.
func TestUsageOfAWorkerThatCountsNone(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	counters, err := usage.New(store.New(f.rdb, store.Config{Prefix: f.prefix}), usage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	f.startWorker(t, execution.Config{}, map[string]execution.Handler{"echo": echo})
	j := f.submit(t, job.Submission{Kind: "echo", Input: raw(`"hi"`)})
	f.waitState(t, j.ID, 5*time.Second, job.StateSucceeded)
	if got, want := usageOf(t, f, counters), map[string]int64{usage.JobsSubmitted: 1}; !maps.Equal(got, want) {
		t.Errorf("usage %v, want %v", got, want)
	}
}

// usageOf sums acme's usage of yesterday and today, as GET /v1/usage reads
// it: its counters, and what the queues counted.
func usageOf(t *testing.T, f *fixture, counters *usage.Counters) map[string]int64 {
	t.Helper()
	now := time.Now()
	days, err := counters.Get(t.Context(), "acme", now.Add(-24*time.Hour), now)
	if err == nil {
		err = f.store.AddUsage(t.Context(), "acme", usage.Lifecycle(), days)
	}
	if err != nil {
		t.Fatal(err)
	}
	sum := map[string]int64{}
	for _, d := range days {
		for k, v := range d.Counts {
			sum[k] += v
		}
	}
	return sum
}
