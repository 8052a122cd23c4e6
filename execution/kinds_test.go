package execution_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/testsignal"
	"github.com/leasehold/leasehold/job"
)

// Two workers of one queue serving different kinds take only their own
// kinds' jobs: every job runs once, on the worker of its kind, with no
// attempt spent elsewhere and no unknown_kind.
//
// Fails when a claim takes jobs of kinds its worker does not serve.
func TestWorkersClaimOnlyTheKindsTheyServe(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var mu sync.Mutex
	ranOn := map[string]string{} // job id -> the kind of the worker that ran it
	handler := func(served string) execution.Handler {
		return func(_ context.Context, e *execution.Execution) (any, error) {
			mu.Lock()
			defer mu.Unlock()
			ranOn[e.JobID] = served
			return nil, nil
		}
	}
	alpha, _ := f.startWorker(t, execution.Config{ID: "alpha-worker", Concurrency: 4}, map[string]execution.Handler{"alpha": handler("alpha")})
	beta, _ := f.startWorker(t, execution.Config{ID: "beta-worker", Concurrency: 4}, map[string]execution.Handler{"beta": handler("beta")})
	workerOf := map[string]string{"alpha": alpha.ID(), "beta": beta.ID()}

	const n = 200
	jobs := make([]job.Job, n)
	for i := range jobs {
		kind := "alpha"
		if i%2 == 1 {
			kind = "beta"
		}
		// Two tenants' lanes of each kind, one with a key of its own.
		keys := []string(nil)
		if i%4 < 2 {
			keys = []string{"model:m"}
		}
		jobs[i] = f.submit(t, job.Submission{Kind: kind, MaxAttempts: 3, ConcurrencyKeys: keys})
	}
	for _, j := range jobs {
		done := f.waitState(t, j.ID, 30*time.Second, job.StateSucceeded, job.StateFailed)
		if done.State != job.StateSucceeded || done.Attempt != 1 || done.Error != nil {
			t.Fatalf("job %s of kind %s: %s, attempt %d, error %+v; want succeeded at its first attempt",
				j.ID, j.Kind, done.State, done.Attempt, done.Error)
		}
		if done.Execution == nil || done.Execution.Worker != workerOf[j.Kind] {
			t.Fatalf("job %s of kind %s ran on %+v, want %s", j.ID, j.Kind, done.Execution, workerOf[j.Kind])
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, j := range jobs {
		if ranOn[j.ID] != j.Kind {
			t.Fatalf("job %s of kind %s ran on the worker of %q", j.ID, j.Kind, ranOn[j.ID])
		}
	}
}

// A job of a kind that no worker serves stays queued, its attempt unspent,
// while the worker of the queue claims the other kinds' jobs past it; a
// worker that serves the kind runs it as it starts.
//
// Fails when a worker claims (and fails, or spends an attempt of) a job of
// a kind it lacks, or when the job's lane hides the jobs behind it.
func TestJobOfAKindNoWorkerServesWaitsForOne(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	lonely := f.submit(t, job.Submission{Kind: "gamma", MaxAttempts: 1})
	other := f.submit(t, job.Submission{Kind: "alpha"})
	idle := testsignal.New()
	f.startWorker(t, execution.WithIdleSignal(execution.Config{}, idle), map[string]execution.Handler{"alpha": echo})
	f.waitState(t, other.ID, 10*time.Second, job.StateSucceeded)
	// The worker found nothing more to claim: it looked past the gamma job.
	idle.Wait(t, 10*time.Second)
	if j := f.get(t, lonely.ID); j.State != job.StateQueued || j.Attempt != 0 || j.Execution != nil {
		t.Fatalf("the gamma job is %s at attempt %d (execution %+v); want queued, never started", j.State, j.Attempt, j.Execution)
	}
	f.startWorker(t, execution.Config{}, map[string]execution.Handler{"gamma": echo})
	if j := f.waitState(t, lonely.ID, 10*time.Second, job.StateSucceeded, job.StateFailed); j.State != job.StateSucceeded || j.Attempt != 1 {
		t.Fatalf("the gamma job %s at attempt %d, want succeeded at its first", j.State, j.Attempt)
	}
}
