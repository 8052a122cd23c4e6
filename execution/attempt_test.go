package execution_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/job"
)

// attempts returns the job's attempt and its execution's attempt (0 before
// the first) at each of job id's state events, as a replay shows them.
func (f *fixture) attempts(t *testing.T, id string) (states []job.State, jobs, execs []int) {
	t.Helper()
	now := f.get(t, id)
	for after := ""; ; {
		page, err := f.store.Events(t.Context(), "acme", id, false, after, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range page {
			if ev.Type != "state" {
				continue
			}
			then, err := store.JobAt(now, ev)
			if err != nil {
				t.Fatal(err)
			}
			exec := 0
			if then.Execution != nil {
				exec = then.Execution.Attempt
			}
			states, jobs, execs = append(states, then.State), append(jobs, then.Attempt), append(execs, exec)
		}
		if len(page) < job.EventsPage {
			return states, jobs, execs
		}
		after = page[len(page)-1].ID
	}
}

// checkAttempts fails the test unless job id's state events show the
// states want, the job and its execution on the attempts at (0 before the
// first run).
func (f *fixture) checkAttempts(t *testing.T, id string, want []job.State, at []int) {
	t.Helper()
	states, jobs, execs := f.attempts(t, id)
	if !slices.Equal(states, want) || !slices.Equal(jobs, at) || !slices.Equal(execs, at) {
		t.Fatalf("state events %v with job attempts %v and execution attempts %v: want %v on attempts %v",
			states, jobs, execs, want, at)
	}
}

// A job's attempt never goes back: an execution that spends no attempt (a
// wait, a pushback; a graceful hand-off in
// TestGracefulShutdownHandsBackWithoutSpendingAnAttempt) leaves the job,
// and the next execution, on the same attempt; what spent none is not
// counted against max_attempts either. A retry runs the attempt after the
// last, spent or not.
//
// Fails when the finish gives the attempt back (1 → 0 → 1), or when the
// next claim counts the unspent attempt as spent (the job would run on 2,
// or fail for want of attempts).
func TestAttemptNeverGoesBack(t *testing.T) {
	t.Parallel()
	t.Run("wait and signal", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		f.startWorker(t, execution.Config{}, map[string]execution.Handler{waitKind: approve(time.Hour)})
		j := f.submit(t, job.Submission{Kind: waitKind, MaxAttempts: 1})
		w := f.waitState(t, j.ID, 10*time.Second, job.StateWaiting)
		if w.Attempt != 1 {
			t.Fatalf("waiting job on attempt %d, want 1", w.Attempt)
		}
		f.signal(t, j.ID, "approval", `{"ok":true}`)
		f.waitState(t, j.ID, 10*time.Second, job.StateSucceeded)
		f.checkAttempts(t, j.ID, []job.State{job.StateQueued, job.StateRunning, job.StateWaiting, job.StateQueued,
			job.StateRunning, job.StateSucceeded}, []int{0, 1, 1, 1, 1, 1})
	})
	t.Run("pushback", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		var runs atomic.Int32
		f.startWorker(t, execution.Config{}, map[string]execution.Handler{"flaky": func(context.Context, *execution.Execution) (any, error) {
			if runs.Add(1) == 1 {
				return nil, execution.Pushback(errors.New("429 Too Many Requests"), time.Millisecond)
			}
			return nil, errors.New("boom")
		}})
		// Two attempts to spend: the pushback spends none, so the job
		// runs three times and fails on its second attempt.
		j := f.submit(t, job.Submission{Kind: "flaky", MaxAttempts: 2})
		f.waitState(t, j.ID, 10*time.Second, job.StateFailed)
		if n := runs.Load(); n != 3 {
			t.Fatalf("%d runs, want 3: a pushback and two attempts", n)
		}
		f.checkAttempts(t, j.ID, []job.State{job.StateQueued, job.StateRunning, job.StateRetrying, job.StateQueued,
			job.StateRunning, job.StateRetrying, job.StateQueued, job.StateRunning, job.StateFailed},
			[]int{0, 1, 1, 1, 1, 1, 1, 2, 2})
	})
	t.Run("retry after a wait", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		var runs atomic.Int32
		f.startWorker(t, execution.Config{}, map[string]execution.Handler{"once": func(context.Context, *execution.Execution) (any, error) {
			if runs.Add(1) == 1 {
				return nil, execution.Wait("approval", time.Hour)
			}
			return "ok", nil
		}})
		j := f.submit(t, job.Submission{Kind: "once", MaxAttempts: 1})
		f.waitState(t, j.ID, 10*time.Second, job.StateWaiting)
		f.cancelJob(t, j.ID)
		if _, err := f.store.Retry(t.Context(), "acme", j.ID, false); err != nil {
			t.Fatal(err)
		}
		// A retry runs the attempt after the last one, spent or not.
		done := f.waitState(t, j.ID, 10*time.Second, job.StateSucceeded)
		if done.MaxAttempts != 2 {
			t.Fatalf("max_attempts %d after a retry, want 2", done.MaxAttempts)
		}
		f.checkAttempts(t, j.ID, []job.State{job.StateQueued, job.StateRunning, job.StateWaiting, job.StateCancelled,
			job.StateQueued, job.StateRunning, job.StateSucceeded}, []int{0, 1, 1, 1, 1, 2, 2})
	})
}
