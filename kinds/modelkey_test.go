package kinds

import (
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/fakellm"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// TestChatWithoutItsModelKeyFailsForGood: a job whose input names a model
// whose key it does not hold (written around the API, or by an older one)
// is failed at once, without a call upstream and without a retry.
func TestChatWithoutItsModelKeyFailsForGood(t *testing.T) {
	t.Parallel()
	upstream := fakellm.New(fakellm.Config{Tokens: 3})
	f := startLLM(t, upstream, LLMConfig{}, execution.Config{})
	j := f.submit(t, `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`,
		job.Submission{Delay: job.Duration(2 * time.Second), MaxAttempts: 3})
	rdb := testenv.Redis(t).Client(t)
	if err := rdb.HSet(t.Context(), keys.New(f.prefix).Job(j.Queue, j.ID), "input",
		`{"messages":[{"content":"hi","role":"user"}],"model":"unlimited-model"}`).Err(); err != nil {
		t.Fatal(err)
	}
	j = f.wait(t, j.ID, job.StateFailed, job.StateSucceeded)
	if j.State != job.StateFailed || j.Attempt != 1 || j.Error == nil ||
		!strings.Contains(j.Error.Message, "model:unlimited-model") {
		t.Fatalf("job %s after %d attempts, error %+v; want failed at once for lack of model:unlimited-model", j.State, j.Attempt, j.Error)
	}
}
