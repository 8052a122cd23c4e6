package store_test

import (
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/job"
)

// end moves a queued job j to state end the way the execution scripts
// do: out of its lane, the state and stats, and retired.
func (fx fixture) end(t testing.TB, j job.Job, end job.State) {
	t.Helper()
	ctx := t.Context()
	fx.rdb.ZRem(ctx, fx.keys.QueueLane(j.Queue, j.Kind+`["tenant:`+j.Tenant+`"]`), j.ID)
	fx.rdb.ZRem(ctx, fx.keys.QueueDeadlines(j.Queue), j.ID)
	fx.setState(t, j, job.StateQueued, end)
	fx.rdb.HSet(ctx, fx.keys.Job(j.Queue, j.ID), "finished_at", time.Now().UnixMilli(), "attempt", 3)
	fx.rdb.ZAdd(ctx, fx.keys.QueueRetired(j.Queue), redis.Z{Score: 1e13, Member: j.ID})
}

func TestRetry(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		ctx := t.Context()
		q := job.DefaultQueue
		for _, end := range []job.State{job.StateFailed, job.StateCancelled, job.StateExpired} {
			t.Run(string(end), func(t *testing.T) {
				j := fx.submit(t, "acme", job.Submission{Kind: "echo", MaxWait: dur(time.Hour)})
				fx.end(t, j, end)
				fx.rdb.HSet(ctx, fx.keys.Job(q, j.ID), "cancel_requested", "1")
				fx.rdb.Set(ctx, fx.keys.CancelFlag(j.ID), "1", time.Hour) // left by a cancel while it ran
				statsBefore := fx.stats(t, q)
				got, err := fx.store.Retry(ctx, "acme", j.ID, false)
				if err != nil {
					t.Fatal(err)
				}
				// fx.end spent 3 attempts of 3: the next is the 4th, of 3 more.
				if got.State != job.StateQueued || got.Attempt != 3 || got.MaxAttempts != 6 || got.CancelRequested ||
					got.FinishedAt != nil || got.ID != j.ID {
					t.Errorf("retried job: %+v", got)
				}
				if want := bump(statsBefore, "queued/acme", +1); !mapsEqual(fx.stats(t, q), want) {
					t.Errorf("stats %v, want %v", fx.stats(t, q), want)
				}
				if err := fx.rdb.ZScore(ctx, fx.keys.QueueRetired(q), j.ID).Err(); !errors.Is(err, redis.Nil) {
					t.Errorf("still retired: %v", err)
				}
				if err := fx.rdb.ZScore(ctx, fx.keys.QueueDeadlines(q), j.ID).Err(); err != nil {
					t.Errorf("max_wait not armed again: %v", err)
				}
				lane := fx.rdb.ZRange(ctx, fx.keys.QueueLane(q, `echo["tenant:acme"]`), 0, -1).Val()
				if !slices.Contains(lane, j.ID) {
					t.Errorf("not back in its lane: %v", lane)
				}
				if fx.rdb.ZScore(ctx, fx.keys.QueueReady(q), `echo["tenant:acme"]`).Err() != nil {
					t.Error("its lane is not ready")
				}
				if n := fx.rdb.Exists(ctx, fx.keys.CancelFlag(j.ID)).Val(); n != 0 && end == job.StateCancelled {
					t.Error("a stale cancel flag would stop the retried job")
				}
				evs, err := fx.store.Events(ctx, "acme", j.ID, false, "", 0)
				if err != nil || len(evs) != 2 || !fx.isNow(t, "acme", j.ID, evs[1]) {
					t.Fatalf("events %+v, %v: want the first queued kept and a new one", evs, err)
				}
				// The event before the retry shows the max_attempts of then.
				if before, err := got.At(evs[0]); err != nil || before.MaxAttempts != 3 || before.Attempt != 0 {
					t.Errorf("the submit's event replays as %+v, %v; want attempt 0 of 3", before, err)
				}
				// Again: it is queued now, so 409 and no change.
				again, err := fx.store.Retry(ctx, "acme", j.ID, false)
				if !errors.Is(err, job.ErrNotRetryable) || again.State != job.StateQueued {
					t.Errorf("second retry: %+v, %v", again, err)
				}
				if want := bump(statsBefore, "queued/acme", +1); !mapsEqual(fx.stats(t, q), want) {
					t.Errorf("stats after a refused retry %v, want %v", fx.stats(t, q), want)
				}
				fx.rdb.ZRem(ctx, fx.keys.QueueLane(q, `echo["tenant:acme"]`), j.ID) // out of the next subtests' way
			})
		}
		for _, state := range []job.State{job.StateSucceeded, job.StateRunning, job.StateRetrying} {
			t.Run(string(state), func(t *testing.T) {
				j := fx.submit(t, "acme", job.Submission{Kind: "echo"})
				fx.end(t, j, state)
				got, err := fx.store.Retry(ctx, "acme", j.ID, false)
				if !errors.Is(err, job.ErrNotRetryable) || got.State != state {
					t.Errorf("retry of a %s job: %+v, %v; want the job and ErrNotRetryable", state, got, err)
				}
			})
		}
		t.Run("tenants", func(t *testing.T) {
			j := fx.submit(t, "acme", job.Submission{Kind: "echo"})
			fx.end(t, j, job.StateCancelled)
			fx.rdb.Set(ctx, fx.keys.CancelFlag(j.ID), "1", time.Hour)
			for _, id := range []string{j.ID, uuid.Must(uuid.NewV7()).String(), "nope"} {
				if _, err := fx.store.Retry(ctx, "globex", id, false); !errors.Is(err, job.ErrNotFound) {
					t.Errorf("retry of %s by another tenant: %v", id, err)
				}
			}
			if fx.rdb.Exists(ctx, fx.keys.CancelFlag(j.ID)).Val() != 1 {
				t.Error("another tenant's retry cleared the flag")
			}
			if got, err := fx.store.Retry(ctx, "admin", j.ID, true); err != nil || got.State != job.StateQueued {
				t.Errorf("admin retry: %+v, %v", got, err)
			}
		})
	})
}

// Every retry adds the job's original max_attempts to the attempts spent,
// not the max_attempts of the retry before; and a replay of its events
// shows each with the max_attempts it had.
func TestRetriesAddTheOriginalMaxAttempts(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		ctx := t.Context()
		j := fx.submit(t, "acme", job.Submission{Kind: "echo", MaxAttempts: 2})
		key := fx.keys.Job(j.Queue, j.ID)
		want := []int{2} // max_attempts at each state event
		for _, spent := range []int{3, 7} {
			fx.end(t, j, job.StateFailed)
			fx.rdb.HSet(ctx, key, "attempt", spent)
			got, err := fx.store.Retry(ctx, "acme", j.ID, false)
			if err != nil {
				t.Fatal(err)
			}
			if got.Attempt != spent || got.MaxAttempts != spent+2 {
				t.Errorf("retry after %d attempts spent: attempt %d of %d, want %d of %d", spent, got.Attempt, got.MaxAttempts, spent, spent+2)
			}
			want = append(want, spent+2)
			fx.rdb.ZRem(ctx, fx.keys.QueueLane(j.Queue, `echo["tenant:acme"]`), j.ID)
			j = got
		}
		evs, err := fx.store.Events(ctx, "acme", j.ID, false, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []int
		for _, e := range evs {
			at, err := j.At(e)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, at.MaxAttempts)
		}
		if !slices.Equal(got, want) {
			t.Errorf("replayed max_attempts %v, want %v", got, want)
		}
	})
}

func TestRetryAllTwiceMovesOnce(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		ctx := t.Context()
		var failed []job.Job
		for i := range 30 {
			tenant := []string{"acme", "globex"}[i%2]
			s := job.Submission{Kind: []string{"echo", "sleep"}[i/2%2], Queue: []string{"alpha", "beta"}[i/4%2]}
			j := fx.submit(t, tenant, s)
			end := []job.State{job.StateFailed, job.StateFailed, job.StateSucceeded, job.StateCancelled, job.StateExpired}[i%5]
			fx.end(t, j, end)
			if end == job.StateFailed {
				failed = append(failed, j)
			}
		}
		fx.submit(t, "acme", job.Submission{Kind: "echo"}) // queued: never moved
		want := func(f job.RetryFilter) map[string]int {
			m := map[string]int{}
			for _, j := range failed {
				if (f.Tenant == "" || j.Tenant == f.Tenant) && (f.Kind == "" || j.Kind == f.Kind) && (f.Queue == "" || j.Queue == f.Queue) {
					m[j.Queue]++
				}
			}
			return m
		}
		for _, f := range []job.RetryFilter{
			{Tenant: "acme", Kind: "echo", Queue: "alpha"},
			{Tenant: "acme"},
			{Admin: true, Tenant: "globex", Kind: "sleep"},
			{Admin: true, State: job.StateFailed},
		} {
			w := want(f)
			for run := range 2 {
				page, err := fx.store.RetryAll(ctx, f)
				if err != nil {
					t.Fatal(err)
				}
				if run == 1 {
					w = map[string]int{}
				}
				if moved := page.Moved; !maps.Equal(moved, w) || page.Next != "" {
					t.Errorf("%+v run %d: moved %v, want %v", f, run+1, moved, w)
				}
			}
			// What was moved is failed no more.
			kept := failed[:0]
			for _, j := range failed {
				got, _ := fx.store.Get(ctx, "admin", j.ID, true)
				if got.State == job.StateFailed {
					kept = append(kept, j)
				}
			}
			failed = kept
		}
		if len(failed) != 0 {
			t.Errorf("%d failed jobs left after an admin's retry of all", len(failed))
		}
		page, err := fx.store.RetryAll(ctx, job.RetryFilter{Admin: true, State: job.StateCancelled})
		if moved := page.Moved; err != nil || moved["alpha"]+moved["beta"] != 6 {
			t.Errorf("retry of the cancelled: %v, %v", moved, err)
		}
		for _, f := range []job.RetryFilter{
			{Tenant: "acme", State: job.StateSucceeded},
			{Tenant: "acme", Queue: "{x}"},
			{Tenant: "acme", Kind: "NO"},
			{Admin: true, Tenant: "a b"},
		} {
			var v *job.ValidationError
			if _, err := fx.store.RetryAll(ctx, f); !errors.As(err, &v) {
				t.Errorf("RetryAll(%+v) = %v, want a ValidationError", f, err)
			}
		}
	})
}

// A bulk retry moves at most RetryPageMax jobs a call (or its Max), and
// its cursor continues until every job it selects moved, each once, even
// one that failed again meanwhile.
func TestRetryAllPagesWithItsCursor(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		ctx := t.Context()
		failed := map[string]job.Job{}
		for i := range job.RetryPageMax + 40 {
			s := job.Submission{Kind: "echo", Queue: []string{"alpha", "beta", "gamma"}[i%3]}
			j := fx.submit(t, "acme", s)
			fx.end(t, j, job.StateFailed)
			failed[j.ID] = j
		}
		page, err := fx.store.RetryAll(ctx, job.RetryFilter{Tenant: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		if n := page.Moved["alpha"] + page.Moved["beta"] + page.Moved["gamma"]; n != job.RetryPageMax || page.Next == "" {
			t.Fatalf("first call moved %d (%v), next %q; want %d and a cursor", n, page.Moved, page.Next, job.RetryPageMax)
		}
		// A job this bulk retry moved fails again: the rest of it leaves
		// it alone.
		var again job.Job
		for _, j := range failed {
			if got, _ := fx.store.Get(ctx, "acme", j.ID, false); got.State == job.StateQueued {
				again = j
				fx.end(t, j, job.StateFailed)
				break
			}
		}
		total, calls := job.RetryPageMax, 1
		for page.Next != "" {
			if page, err = fx.store.RetryAll(ctx, job.RetryFilter{Tenant: "acme", Max: 15, Cursor: page.Next}); err != nil {
				t.Fatal(err)
			}
			n := page.Moved["alpha"] + page.Moved["beta"] + page.Moved["gamma"]
			if n > 15 {
				t.Fatalf("call %d moved %d, more than its Max 15", calls+1, n)
			}
			total += n
			calls++
		}
		if total != len(failed) || calls < 4 {
			t.Errorf("moved %d jobs in %d calls, want %d in at least 4", total, calls, len(failed))
		}
		for id := range failed {
			got, _ := fx.store.Get(ctx, "acme", id, false)
			if want := job.StateQueued; id == again.ID {
				want = job.StateFailed
				if got.State != want {
					t.Errorf("job %s failed again after it moved is %s, want %s: moved twice", id, got.State, want)
				}
			} else if got.State != want {
				t.Errorf("job %s is %s after the bulk retry, want %s", id, got.State, want)
			}
		}
		// "x", then "1:q:0:alpha", "1:r:x:alpha", "1:r:0:{x}".
		for _, c := range []string{"x", "MTpxOjA6YWxwaGE", "MTpyOng6YWxwaGE", "MTpyOjA6e3h9"} {
			if _, err := fx.store.RetryAll(ctx, job.RetryFilter{Tenant: "acme", Cursor: c}); !errors.Is(err, job.ErrBadCursor) {
				t.Errorf("cursor %q: %v, want ErrBadCursor", c, err)
			}
		}
	})
}

// One bulk retry per caller at a time: while a caller's lock is held (by
// a call on any API process), its next call moves nothing; another
// tenant's is not held back, and a call gives its lock back when done.
func TestRetryAllOneAtATimePerTenant(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		ctx := t.Context()
		for _, tenant := range []string{"acme", "globex"} {
			fx.end(t, fx.submit(t, tenant, job.Submission{Kind: "echo"}), job.StateFailed)
		}
		fx.rdb.Set(ctx, fx.keys.RetryLock("acme"), "another call", time.Minute)
		if page, err := fx.store.RetryAll(ctx, job.RetryFilter{Tenant: "acme"}); !errors.Is(err, job.ErrRetryRunning) || len(page.Moved) != 0 {
			t.Fatalf("with acme's lock held: %v, %v; want ErrRetryRunning and nothing moved", page.Moved, err)
		}
		if page, err := fx.store.RetryAll(ctx, job.RetryFilter{Tenant: "globex"}); err != nil || page.Moved["default"] != 1 {
			t.Fatalf("globex with acme's lock held: %v, %v", page.Moved, err)
		}
		if n, _ := fx.rdb.Exists(ctx, fx.keys.RetryLock("globex")).Result(); n != 0 {
			t.Error("globex's lock outlived its call")
		}
		fx.rdb.Del(ctx, fx.keys.RetryLock("acme"))
		if page, err := fx.store.RetryAll(ctx, job.RetryFilter{Tenant: "acme"}); err != nil || page.Moved["default"] != 1 {
			t.Fatalf("acme once its lock is gone: %v, %v", page.Moved, err)
		}
	})
}

func TestDelete(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		ctx := t.Context()
		for _, state := range []job.State{job.StateQueued, job.StateRunning, job.StateRetrying} {
			j := fx.submit(t, "acme", job.Submission{Kind: "echo"})
			if state != job.StateQueued {
				fx.end(t, j, state)
			}
			got, err := fx.store.Delete(ctx, "acme", j.ID, false)
			if !errors.Is(err, job.ErrNotEnded) || got.State != state {
				t.Errorf("delete of a %s job: %+v, %v", state, got, err)
			}
		}
		j := fx.submit(t, "acme", job.Submission{Kind: "echo"})
		fx.end(t, j, job.StateSucceeded)
		fx.rdb.Set(ctx, fx.keys.CancelFlag(j.ID), "1", time.Hour)
		if _, err := fx.store.Delete(ctx, "globex", j.ID, false); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("delete by another tenant: %v", err)
		}
		if _, err := fx.store.Delete(ctx, "acme", j.ID, false); err != nil {
			t.Fatal(err)
		}
		if _, err := fx.store.Get(ctx, "acme", j.ID, false); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("get after delete: %v", err)
		}
		if _, err := fx.store.Delete(ctx, "acme", j.ID, false); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("second delete: %v", err)
		}
		// Nothing of it is left but its deletion mark (for idempotent
		// replays, with the idempotency TTL); the queue's own keys stay.
		mark := fx.keys.JobDeleted(j.Queue, j.ID)
		if ttl := fx.rdb.PTTL(ctx, mark).Val(); ttl <= 0 || ttl > job.DefaultIdempotencyTTL {
			t.Errorf("deletion mark's TTL %v, want up to %v", ttl, job.DefaultIdempotencyTTL)
		}
		for _, k := range fx.written(t) {
			if strings.Contains(k, j.ID) && k != mark {
				t.Errorf("%s left behind", k)
			}
		}
		for _, k := range []string{fx.keys.QueueRetired(j.Queue), fx.keys.QueueTenantJobs(j.Queue, "acme")} {
			if fx.rdb.ZScore(ctx, k, j.ID).Err() == nil {
				t.Errorf("still in %s", k)
			}
		}
		// Admin deletes any tenant's ended job.
		k := fx.submit(t, "globex", job.Submission{Kind: "echo"})
		fx.end(t, k, job.StateFailed)
		if _, err := fx.store.Delete(ctx, "admin", k.ID, true); err != nil {
			t.Errorf("admin delete: %v", err)
		}
	})
}

func TestPauseShowsInStats(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		ctx := t.Context()
		fx.submit(t, "acme", job.Submission{Kind: "echo", Queue: "alpha"})
		got, err := fx.store.Pause(ctx, "beta", true) // no job yet: named by the pause
		if err != nil || got != (job.QueueStats{Name: "beta", Paused: true}) {
			t.Fatalf("Pause = %+v, %v", got, err)
		}
		stats, err := fx.store.Stats(ctx)
		want := []job.QueueStats{{Name: "alpha", Queued: 1}, {Name: "beta", Paused: true}}
		if err != nil || !slices.Equal(stats, want) {
			t.Errorf("Stats = %+v, %v; want %+v", stats, err, want)
		}
		if got, err := fx.store.Pause(ctx, "beta", false); err != nil || got.Paused {
			t.Errorf("resume: %+v, %v", got, err)
		}
		var v *job.ValidationError
		if _, err := fx.store.Pause(ctx, "{x}", true); !errors.As(err, &v) {
			t.Errorf("pause of a bad name: %v", err)
		}
	})
}

func TestFinishedCountsPerMinute(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		ctx := t.Context()
		if _, err := fx.store.Finished(ctx, "nothing"); !errors.Is(err, job.ErrNoQueue) {
			t.Errorf("Finished of an unknown queue: %v", err)
		}
		for range 3 {
			j := fx.submit(t, "acme", job.Submission{Kind: "echo"})
			if _, err := fx.store.Cancel(ctx, "acme", j.ID, false); err != nil {
				t.Fatal(err)
			}
		}
		// A slot an hour old is not this hour's: the ring's reader skips it.
		stale := time.Now().Add(-time.Hour).Unix()/60 - 1
		fx.rdb.HSet(ctx, fx.keys.QueueStats(job.DefaultQueue), "m"+itoa(stale%60), stale, "m"+itoa(stale%60)+":failed", 9)
		minutes, err := fx.store.Finished(ctx, job.DefaultQueue)
		if err != nil || len(minutes) != job.FinishedMinutes {
			t.Fatalf("Finished = %d minutes, %v", len(minutes), err)
		}
		var cancelled, failed int64
		for i, m := range minutes {
			cancelled += m.Cancelled
			failed += m.Failed
			if i > 0 && !m.At.Equal(minutes[i-1].At.Add(time.Minute)) {
				t.Errorf("minute %d at %v after %v", i, m.At, minutes[i-1].At)
			}
		}
		if cancelled != 3 || failed != 0 {
			t.Errorf("cancelled %d, failed %d in the last hour; want 3 and 0", cancelled, failed)
		}
		if last := minutes[len(minutes)-1]; time.Since(last.At) > 2*time.Minute || last.At.Second() != 0 {
			t.Errorf("the last minute starts at %v, not this minute", last.At)
		}
	})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
