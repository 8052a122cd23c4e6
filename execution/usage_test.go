package execution_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/ratelimit/usage"
)

// An execution whose worker loses Redis is found lost by another worker's
// claim, and the job's retry runs there: the tenant's usage counts two
// executions started, one lost and one succeeded, each once: whether the
// lost execution's worker counted its start (the claim's count of it adds
// nothing) or not (the claim's count makes up for it). The job, which no
// API counted, is counted submitted once.
func TestUsageCountsLostAndRetriedExecutions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		countsStart bool // whether worker a counts its own start
	}{
		{"start counted by its worker", true},
		{"start not counted by its worker", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testUsageLost(t, tc.countsStart)
		})
	}
}

func testUsageLost(t *testing.T, countsStart bool) {
	f := newFixture(t)
	counters, err := usage.New(f.rdb, usage.Config{Prefix: f.prefix})
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
	counts := func() map[string]int64 {
		now := time.Now()
		days, err := counters.Get(t.Context(), "acme", now.Add(-24*time.Hour), now)
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

	// Worker a runs on a client of its own, to be closed under it; its
	// usage, if any, goes through the shared client.
	aRDB := redis.NewClient(&redis.Options{Addr: testenv.Redis(t).Addr(), MaxRetries: -1})
	t.Cleanup(func() { aRDB.Close() })
	// Its lease, lost when its client closes, must run out soon.
	aCfg := execution.Config{LeaseTTL: 500 * time.Millisecond}
	if countsStart {
		aCfg.Usage = counters
	}
	a, err := execution.NewWorker(aRDB, f.config(aCfg))
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
	if countsStart {
		testenv.Eventually(t, 5*time.Second, func() bool { return counts()[usage.ExecutionsStarted] == 1 },
			"worker a's start was not counted")
	}
	aRDB.Close() // a can neither renew its lease nor record a finish now

	f.startWorker(t, execution.Config{Usage: counters}, map[string]execution.Handler{"first-blocks": firstBlocks})
	if end := f.waitState(t, j.ID, 10*time.Second, job.StateSucceeded, job.StateFailed); end.State != job.StateSucceeded || end.Attempt != 2 {
		t.Fatalf("job %s at attempt %d, want succeeded at 2", end.State, end.Attempt)
	}
	// The job was submitted past the API, which counts it: the claims
	// count it once all the same, as they do when the API's count failed.
	want := map[string]int64{
		usage.JobsSubmitted:                1,
		usage.ExecutionsStarted:            2,
		usage.ExecutionsEnded("lost"):      1,
		usage.ExecutionsEnded("succeeded"): 1,
	}
	got := map[string]int64{} // filled in place, so the failure shows the last read
	testenv.Eventually(t, 5*time.Second, func() bool {
		clear(got)
		maps.Copy(got, counts())
		return maps.Equal(got, want)
	}, "usage %v, want %v", got, want)
}
