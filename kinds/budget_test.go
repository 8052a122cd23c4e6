package kinds

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/fakellm"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// The tests of this file put llm.chat in front of an upstream whose limits
// are hidden (fakellm.Limits): they are set on the fake only, never in
// Leasehold's configuration, which must learn them from the answers.

// chatJob is an llm.chat submission of model fake-1, as the API makes it.
func chatJob(i, maxTokens, attempts int) job.Submission {
	mt := ""
	if maxTokens > 0 {
		mt = fmt.Sprintf(`,"max_tokens":%d`, maxTokens)
	}
	return job.Submission{
		Kind:            "llm.chat",
		Input:           []byte(fmt.Sprintf(`{"model":"fake-1","messages":[{"role":"user","content":"job %d"}]%s}`, i, mt)),
		ConcurrencyKeys: []string{"model:fake-1"},
		MaxAttempts:     attempts,
	}
}

// runAll submits n jobs made by sub and waits until each has ended, within
// timeout; it returns how long that took and the jobs as they ended.
func runAll(t *testing.T, store *store.Store, n int, timeout time.Duration, sub func(i int) job.Submission) (time.Duration, []job.Job) {
	t.Helper()
	start := time.Now()
	ids := make([]string, n)
	for i := range ids {
		j, _, err := store.Submit(t.Context(), "acme", sub(i), "")
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = j.ID
	}
	done := make([]job.Job, n)
	for i, id := range ids {
		testenv.Eventually(t, timeout, func() bool {
			j, err := store.Get(t.Context(), "acme", id, false)
			if err != nil {
				t.Fatal(err)
			}
			done[i] = j
			return j.State.Terminal()
		}, "job %s never ended", id)
	}
	return time.Since(start), done
}

// startWithLimit is startLLM with kl set on model:fake-1 before the worker
// starts.
func startWithLimit(t *testing.T, upstream http.Handler, wcfg execution.Config, kl job.KeyLimit) *llmFixture {
	t.Helper()
	return startKinds(t, upstream, SleepConfig{}, LLMConfig{}, wcfg, func(store *store.Store) {
		if err := store.SetKeyLimit(t.Context(), "model:fake-1", kl); err != nil {
			t.Fatal(err)
		}
	})
}

func keyLimit(t *testing.T, store *store.Store, key string) job.Limit {
	t.Helper()
	ls, err := store.Limits(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		if l.Key == key {
			return l
		}
	}
	t.Fatalf("no limit on %s", key)
	return job.Limit{}
}

// TestAdaptiveLimitLearnsTheUpstreamsCapacity: a limit of 20 before an
// upstream that serves 5 at once, three worker processes, 40 one-second
// jobs with one attempt each. The effective limit starts low and finds the
// capacity: every job succeeds, 429s stay within 20 % of the calls, and the
// jobs take at most 1.5× the ideal and a job's time (each 429 is a round
// lost: 1.53× was measured with 5 refused, under -race with a second test
// run beside it). (A limit that did not learn would see
// about 75 % refused. A phase is 40 to 60 calls, so each of the law's few
// probes is 2 %: measured 3 to 11 % on an idle machine, 15.5 % once under
// the full suite's load. The long-run rate is make bench/utilisation's, in
// docs/benchmarks.md.) Then the capacity doubles, and the effective limit
// grows back to it, from the first phase's 5 while the phase runs: a round
// of slack for that ramp (1.51× was measured under -race and load; a limit
// that did not grow would take twice the ideal). Then a worker is killed
// mid-run, and its jobs run again on another (after their lease's TTL,
// which that phase's bound allows for).
//
// The ideal is the jobs' rounds at the capacity times one job's time
// measured alone in the same run (claim, call and finish, under this
// machine's load): a ratio to a baseline, not a guess of the machine.
func TestAdaptiveLimitLearnsTheUpstreamsCapacity(t *testing.T) {
	t.Parallel()
	const limit = 20
	upstream := fakellm.New(fakellm.Config{Tokens: 10, Delay: 100 * time.Millisecond, Limits: fakellm.Limits{Concurrency: 5}})
	srv := httptest.NewServer(upstream)
	t.Cleanup(srv.Close)
	t.Cleanup(upstream.Close)

	fl := newFleet(t)
	store := fl.store
	n := int64(limit)
	if err := store.SetKeyLimit(t.Context(), "model:fake-1", job.KeyLimit{Limit: &n, Budget: job.Budget{Adaptive: true}}); err != nil {
		t.Fatal(err)
	}
	var workers []*testenv.Process
	for range 3 {
		p, _ := fl.start(t, srv.URL)
		workers = append(workers, p)
	}

	single, _ := runAll(t, store, 1, 30*time.Second, func(int) job.Submission { return chatJob(0, 0, 1) })
	phase := func(name string, jobs, capacity, attempts int, slack time.Duration, during func()) {
		t.Helper()
		before := upstream.Stats()
		upstream.SetLimits(fakellm.Limits{Concurrency: capacity})
		var wg sync.WaitGroup
		if during != nil {
			wg.Go(during)
		}
		took, done := runAll(t, store, jobs, 60*time.Second, func(i int) job.Submission { return chatJob(i, 0, attempts) })
		wg.Wait()
		for _, j := range done {
			if j.State != job.StateSucceeded {
				t.Errorf("%s: job %s ended %s (%+v), want succeeded", name, j.ID, j.State, j.Error)
			}
		}
		st := upstream.Stats()
		calls, refused := st.Calls-before.Calls, st.Refused-before.Refused
		ideal := time.Duration(jobs/capacity) * single
		l := keyLimit(t, store, "model:fake-1")
		t.Logf("%s: %d jobs in %v (ideal %v, %.2fx); %d calls, %d refused (%.1f %%); effective limit %d",
			name, jobs, took.Round(10*time.Millisecond), ideal, took.Seconds()/ideal.Seconds(), calls, refused,
			100*float64(refused)/float64(calls), l.EffectiveLimit.Value)
		if float64(refused) > 0.2*float64(calls) {
			t.Errorf("%s: %d of %d calls refused, want at most 20 %%", name, refused, calls)
		}
		if took > ideal*3/2+slack {
			t.Errorf("%s: %v, want at most 1.5x the ideal %v (+%v)", name, took, ideal, slack)
		}
		if l.EffectiveLimit.Value > limit || l.EffectiveLimit.Value < 1 {
			t.Errorf("%s: effective limit %d, want 1 to %d", name, l.EffectiveLimit.Value, limit)
		}
	}
	t.Logf("one job alone: %v", single)
	phase("capacity 5", 40, 5, 1, single, nil)
	phase("capacity 10", 60, 10, 1, single, nil)
	// A killed worker's jobs are lost and run again once their leases
	// expire (the helper's TTL, 1 s): they spend an attempt.
	phase("capacity 10, a worker killed", 60, 10, 2, time.Second, func() {
		testenv.Eventually(t, 30*time.Second, func() bool { return upstream.Stats().Serving >= 5 }, "the upstream never served 5 at once")
		workers[0].Kill(t)
	})
}

// TestTPMSettlesToActualUsage: jobs ask max_tokens 300 of a model that says
// 20. The tpm fits about 19 estimates a minute, and 60 jobs run within 30 s
// all the same, with no 429, since each execution's actual usage replaces
// its estimate as it ends; the key's tokens of the last minute are the
// upstream's own count. (Without the settlement, 19 jobs a minute would
// run: three minutes.)
func TestTPMSettlesToActualUsage(t *testing.T) {
	t.Parallel()
	upstream := fakellm.New(fakellm.Config{AnswerTokens: 20, Delay: 2 * time.Millisecond})
	const tpm = 6000 // an estimate is ~310 tokens: prompt and max_tokens 300
	upstream.SetLimits(fakellm.Limits{TPM: tpm})
	f := startWithLimit(t, upstream, execution.Config{Concurrency: 8}, job.KeyLimit{Budget: job.Budget{TPM: tpm}})
	took, done := runAll(t, f.store, 60, 30*time.Second, func(i int) job.Submission { return chatJob(i, 300, 1) })
	for _, j := range done {
		if j.State != job.StateSucceeded {
			t.Fatalf("job %s ended %s (%+v), want succeeded", j.ID, j.State, j.Error)
		}
	}
	st := upstream.Stats()
	if st.Refused != 0 {
		t.Errorf("the upstream refused %d of %d calls, want none", st.Refused, st.Calls)
	}
	l := keyLimit(t, f.store, "model:fake-1")
	t.Logf("60 jobs in %v; the key's tokens of the last minute %d, the upstream's %d", took, l.TokensLastMinute.Value, st.TokensLastMinute)
	if l.TokensLastMinute.Value != int64(st.TokensLastMinute) {
		t.Errorf("tokens of the last minute %d, the upstream counted %d", l.TokensLastMinute.Value, st.TokensLastMinute)
	}
}

// TestRPMHoldsTheRestQueued: over any rolling minute at most rpm calls
// start; the rest wait queued, not failed, and run once the minute rolls on.
func TestRPMHoldsTheRestQueued(t *testing.T) {
	t.Parallel()
	upstream := fakellm.New(fakellm.Config{Tokens: 2})
	const rpm = 10
	f := startWithLimit(t, upstream, execution.Config{Concurrency: 8}, job.KeyLimit{Budget: job.Budget{RPM: rpm}})
	ids := make([]string, 15)
	for i := range ids {
		j, _, err := f.store.Submit(t.Context(), "acme", chatJob(i, 0, 1), "")
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = j.ID
	}
	testenv.Eventually(t, 20*time.Second, func() bool { return len(upstream.Requests()) == rpm }, "fewer than %d calls", rpm)
	// Give the workers time to do wrong: many claims and heartbeats pass.
	deadline := time.Now().Add(time.Second)
	testenv.Eventually(t, 5*time.Second, func() bool { return time.Now().After(deadline) }, "")
	if n := len(upstream.Requests()); n != rpm {
		t.Fatalf("%d calls in the first minute, want rpm %d", n, rpm)
	}
	queued := 0
	for _, id := range ids {
		j := f.wait(t, id, job.StateSucceeded, job.StateQueued)
		if j.State == job.StateQueued {
			queued++
		}
	}
	if queued != len(ids)-rpm {
		t.Fatalf("%d jobs queued, want %d", queued, len(ids)-rpm)
	}
	// The minute rolls on (the window's starts are moved a minute back).
	rdb := testenv.Redis(t).Client(t)
	w := keys.New(f.prefix).LeaseWindow("model:fake-1")
	entries, err := rdb.ZRangeWithScores(t.Context(), w, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		rdb.ZAdd(t.Context(), w, redis.Z{Score: e.Score - 61_000, Member: e.Member})
	}
	for _, id := range ids {
		if j := f.wait(t, id, job.StateSucceeded, job.StateFailed); j.State != job.StateSucceeded {
			t.Fatalf("job %s ended %s", id, j.State)
		}
	}
}

// TestThrottleHoldsEveryWorker: a pushback's Retry-After holds the claims
// of every job that names its adaptive key, on every worker, until it
// passes: no call reaches the upstream before.
func TestThrottleHoldsEveryWorker(t *testing.T) {
	t.Parallel()
	upstream := fakellm.New(fakellm.Config{Tokens: 2})
	upstream.FailNext(1, fakellm.Failure{Status: http.StatusTooManyRequests, RetryAfter: "2", Message: "slow down"})
	n := int64(10)
	f := startWithLimit(t, upstream, execution.Config{Concurrency: 4}, job.KeyLimit{Limit: &n, Budget: job.Budget{Adaptive: true}})
	// A second worker, in a process of its own.
	fleet{prefix: f.prefix, store: f.store}.start(t, f.srv.URL)
	first, _, err := f.store.Submit(t.Context(), "acme", chatJob(0, 0, 1), "")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, func() bool { return len(upstream.Requests()) == 1 }, "the first call never came")
	refusedAt := upstream.Requests()[0].At
	// Jobs claimed between the 429 and its settlement are not held: the
	// throttle starts when the pushback is recorded.
	f.wait(t, first.ID, job.StateRetrying)
	var ids []string
	for i := range 6 {
		j, _, err := f.store.Submit(t.Context(), "acme", chatJob(i+1, 0, 1), "")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	for _, id := range append(ids, first.ID) {
		if j := f.wait(t, id, job.StateSucceeded, job.StateFailed); j.State != job.StateSucceeded || j.Attempt != 1 {
			t.Fatalf("job %s ended %s on attempt %d", id, j.State, j.Attempt)
		}
	}
	for _, r := range upstream.Requests()[1:] {
		if gap := r.At.Sub(refusedAt); gap < 2*time.Second {
			t.Fatalf("a call came %v after a 429 with Retry-After 2s: the throttle did not hold", gap)
		}
	}
}

// TestThrottledClaimsComeBackAsTheThrottleEnds: a job refused by a
// throttle is claimed as the throttle ends, not at the worker's next poll
// (30 s here): the claim tells the worker when the budget has room.
func TestThrottledClaimsComeBackAsTheThrottleEnds(t *testing.T) {
	t.Parallel()
	upstream := fakellm.New(fakellm.Config{Tokens: 2})
	upstream.FailNext(1, fakellm.Failure{Status: http.StatusTooManyRequests, RetryAfter: "1", Message: "slow down"})
	n := int64(10)
	f := startWithLimit(t, upstream, execution.Config{Concurrency: 4, Poll: 30 * time.Second}, job.KeyLimit{Limit: &n, Budget: job.Budget{Adaptive: true}})
	nc := testenv.NATS(t).Conn(t)
	wake := func() {
		if err := execution.Wake(nc, f.prefix, job.DefaultQueue); err != nil {
			t.Fatal(err)
		}
	}
	first, _, err := f.store.Submit(t.Context(), "acme", chatJob(0, 0, 1), "")
	if err != nil {
		t.Fatal(err)
	}
	// Woken until it takes the job: the first wake-up may come before the
	// worker listens.
	testenv.Eventually(t, 10*time.Second, func() bool { wake(); return len(upstream.Requests()) > 0 }, "the first job was never called")
	f.wait(t, first.ID, job.StateRetrying)
	refusedAt := upstream.Requests()[0].At
	// Woken, the idle worker claims it, and the throttle refuses it.
	second, _, err := f.store.Submit(t.Context(), "acme", chatJob(1, 0, 1), "")
	if err != nil {
		t.Fatal(err)
	}
	wake()
	if j := f.wait(t, second.ID, job.StateSucceeded, job.StateFailed); j.State != job.StateSucceeded {
		t.Fatalf("job %s ended %s", j.ID, j.State)
	}
	var call fakellm.Request
	for _, r := range upstream.Requests() {
		if r.Body.Messages[0].Content == "job 1" {
			call = r
		}
	}
	if gap := call.At.Sub(refusedAt); gap < time.Second || gap > 4*time.Second {
		t.Fatalf("the held job was called %v after a 429 with Retry-After 1s, want 1 s to 4 s (a poll is 15 s to 45 s)", gap)
	}
}

// TestPushbackCutsOnlyItsModelsKey: a job for model fake-1 that also names
// the adaptive key of another model gets a 429 from fake-1's upstream.
// fake-1's key is cut and throttled; the other model's effective limit and
// throttle do not move, so one tenant's cheap model cannot throttle a
// shared one for everyone.
func TestPushbackCutsOnlyItsModelsKey(t *testing.T) {
	t.Parallel()
	upstream := fakellm.New(fakellm.Config{Tokens: 2})
	upstream.FailNext(1, fakellm.Failure{Status: http.StatusTooManyRequests, RetryAfter: "30", Message: "slow down"})
	n := int64(16)
	adaptive := job.KeyLimit{Limit: &n, Budget: job.Budget{Adaptive: true}}
	f := startKinds(t, upstream, SleepConfig{}, LLMConfig{}, execution.Config{}, func(store *store.Store) {
		for _, k := range []string{"model:fake-1", "model:shared"} {
			if err := store.SetKeyLimit(t.Context(), k, adaptive); err != nil {
				t.Fatal(err)
			}
		}
	})
	sub := chatJob(0, 0, 1)
	sub.ConcurrencyKeys = append(sub.ConcurrencyKeys, "model:shared")
	before := keyLimit(t, f.store, "model:shared")
	j, _, err := f.store.Submit(t.Context(), "acme", sub, "")
	if err != nil {
		t.Fatal(err)
	}
	f.wait(t, j.ID, job.StateRetrying)
	// The keys are settled just after the job's state is written: wait for
	// the model's key to be cut, then look at the other.
	var cut job.Limit
	testenv.Eventually(t, 10*time.Second, func() bool {
		cut = keyLimit(t, f.store, "model:fake-1")
		return !cut.ThrottledUntil.IsZero()
	}, "model:fake-1 was never throttled after its 429")
	shared := keyLimit(t, f.store, "model:shared")
	if cut.ThrottledUntil.IsZero() || cut.EffectiveLimit.Value >= before.EffectiveLimit.Value {
		t.Errorf("model:fake-1 after its 429: throttled until %v, effective limit %+v (before %+v); want it cut and throttled",
			cut.ThrottledUntil, cut.EffectiveLimit, before.EffectiveLimit)
	}
	if !shared.ThrottledUntil.IsZero() || shared.EffectiveLimit != before.EffectiveLimit {
		t.Errorf("model:shared after another model's 429: throttled until %v, effective limit %+v (before %+v); want untouched",
			shared.ThrottledUntil, shared.EffectiveLimit, before.EffectiveLimit)
	}
}
