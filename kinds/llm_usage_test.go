package kinds

import (
	"maps"
	"net/http"
	"testing"
	"time"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/fakellm"
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/ratelimit/usage"
)

// The tokens of a completion are counted in its tenant's usage, once, as
// the upstream reported them; an attempt that failed before the upstream
// reported usage counts none.
func TestLLMChatCountsTokens(t *testing.T) {
	t.Parallel()
	counters, err := usage.New(store.New(testenv.Redis(t).Client(t), store.Config{Prefix: testenv.Prefix(t)}), usage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	fake := fakellm.New(fakellm.Config{Tokens: 30})
	fake.FailNext(1, fakellm.Failure{Status: http.StatusInternalServerError})
	f := startLLM(t, fake, LLMConfig{Usage: counters}, execution.Config{})
	j := f.submit(t, hello, job.Submission{MaxAttempts: 2})
	if done := f.wait(t, j.ID, job.StateSucceeded, job.StateFailed); done.State != job.StateSucceeded || done.Attempt != 2 {
		t.Fatalf("state %s attempt %d error %+v", done.State, done.Attempt, done.Error)
	}
	now := time.Now()
	days, err := counters.Get(t.Context(), "acme", now.Add(-time.Hour), now)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, d := range days {
		for k, v := range d.Counts {
			got[k] += v
		}
	}
	want := map[string]int64{usage.LLMPromptTokens: 4, usage.LLMCompletionTokens: 30}
	if !maps.Equal(got, want) {
		t.Errorf("usage %v, want %v", got, want)
	}
}

// A completion cut short (here by its timeout) counts what it streamed:
// one completion token per delta, since the upstream never got to report
// its usage.
func TestLLMChatCountsTokensOfACutStream(t *testing.T) {
	t.Parallel()
	counters, err := usage.New(store.New(testenv.Redis(t).Client(t), store.Config{Prefix: testenv.Prefix(t)}), usage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	fake := fakellm.New(fakellm.Config{Tokens: 1000, Delay: 20 * time.Millisecond})
	f := startLLM(t, fake, LLMConfig{Usage: counters}, execution.Config{})
	j := f.submit(t, hello, job.Submission{MaxAttempts: 1, Timeout: job.Duration(time.Second)})
	if done := f.wait(t, j.ID, job.StateSucceeded, job.StateFailed); done.State != job.StateFailed || done.Error.Code != "timeout" {
		t.Fatalf("state %s error %+v", done.State, done.Error)
	}
	streamed := len(f.outputs(t, j.ID))
	now := time.Now()
	var got int64
	testenv.Eventually(t, 5*time.Second, func() bool {
		days, err := counters.Get(t.Context(), "acme", now.Add(-time.Hour), now)
		if err != nil {
			t.Fatal(err)
		}
		got = 0
		for _, d := range days {
			got += d.Counts[usage.LLMCompletionTokens]
		}
		return got > 0
	}, "no completion tokens counted for a stream cut short")
	if streamed == 0 || got < int64(streamed) || got >= 1000 {
		t.Errorf("counted %d completion tokens for %d output events of a cut stream", got, streamed)
	}
}
