package kinds

import (
	"maps"
	"net/http"
	"testing"
	"time"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/fakellm"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/ratelimit/usage"
)

// The tokens of a completion are counted in its tenant's usage, once, as
// the upstream reported them; an attempt that failed before the upstream
// reported usage counts none.
func TestLLMChatCountsTokens(t *testing.T) {
	t.Parallel()
	counters, err := usage.New(testenv.Redis(t).Client(t), usage.Config{Prefix: testenv.Prefix(t)})
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
