package kinds

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/fakellm"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// hangingUpstream serves fakellm's answers, except to a request that asks
// more than bigAsk max_tokens: that one gets a 200 stream of deltas text
// deltas and then nothing, until its client goes away (fakellm's
// HangAfter). calls gets every request's max_tokens as it arrives.
func hangingUpstream(t *testing.T, bigAsk, deltas int, calls chan<- int) *httptest.Server {
	t.Helper()
	fake, hang := fakellm.New(fakellm.Config{}), fakellm.New(fakellm.Config{HangAfter: deltas})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req fakellm.ChatRequest
		_ = json.Unmarshal(body, &req)
		asked := 0
		if req.MaxTokens != nil {
			asked = *req.MaxTokens
		}
		calls <- asked
		r.Body = io.NopCloser(bytes.NewReader(body))
		if asked <= bigAsk {
			fake.ServeHTTP(w, r)
		} else {
			hang.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(fake.Close)
	t.Cleanup(hang.Close)
	return srv
}

// TestCutShortStreamGivesBackItsEstimate: one tenant's llm.chat job asks
// the largest max_tokens its key's tpm accepts (its estimate is the whole
// tpm), streams three deltas and stalls until its 1 s timeout. Another
// tenant's 10-token job on the same key, submitted as the first one
// starts, reaches the upstream within 2 s: the stream cut short settles
// at its prompt's estimate plus the tokens it streamed, not at its
// estimate, which would hold the key's whole tpm for a minute. The key's
// tokens of the last minute are never negative, and are exactly what the
// two calls spent. A worker process serves them.
func TestCutShortStreamGivesBackItsEstimate(t *testing.T) {
	t.Parallel()
	const tpm, deltas = 10_000, 3
	calls := make(chan int, 10)
	srv := hangingUpstream(t, 100, deltas, calls)
	fl := newFleet(t)
	if err := fl.store.SetKeyLimit(t.Context(), "model:fake-1", job.KeyLimit{Budget: job.Budget{TPM: tpm}}); err != nil {
		t.Fatal(err)
	}
	fl.start(t, srv.URL)

	// `"hog"`: 5 bytes, 2 tokens, and 4 for its message.
	const hogPrompt = 2 + 4
	hog := job.Submission{Kind: "llm.chat", MaxAttempts: 1, Timeout: job.Duration(time.Second),
		Input: fmt.Appendf(nil, `{"model":"fake-1","messages":[{"role":"user","content":"hog"}],"max_tokens":%d}`, tpm-hogPrompt)}
	// The estimate is the whole tpm: one more token is refused.
	over := hog
	over.Input = fmt.Appendf(nil, `{"model":"fake-1","messages":[{"role":"user","content":"hog"}],"max_tokens":%d}`, tpm-hogPrompt+1)
	if _, _, err := fl.store.Submit(t.Context(), "hog", over, ""); err == nil {
		t.Fatal("an estimate above the key's tpm was accepted")
	}
	hj, _, err := fl.store.Submit(t.Context(), "hog", hog, "")
	if err != nil {
		t.Fatal(err)
	}
	if hj.Cost == nil || hj.Cost.Tokens != tpm {
		t.Fatalf("the hog's estimate %+v, want the whole tpm %d", hj.Cost, tpm)
	}
	select {
	case <-calls:
	case <-time.After(20 * time.Second):
		t.Fatal("the hog never reached the upstream")
	}

	// `"job 0"`: 7 bytes, 2 tokens, 4 for its message, and max_tokens 4.
	submitted := time.Now()
	oj, _, err := fl.store.Submit(t.Context(), "other", chatJob(0, 4, 1), "")
	if err != nil {
		t.Fatal(err)
	}
	if oj.Cost == nil || oj.Cost.Tokens != 10 {
		t.Fatalf("the other job's estimate %+v, want 10", oj.Cost)
	}
	tokens := func() int64 {
		l := keyLimit(t, fl.store, "model:fake-1")
		if l.TokensLastMinute.Value < 0 {
			t.Fatalf("tokens of the last minute %d", l.TokensLastMinute.Value)
		}
		return l.TokensLastMinute.Value
	}
	var waited time.Duration
	testenv.Eventually(t, 90*time.Second, func() bool {
		tokens()
		select {
		case <-calls:
			waited = time.Since(submitted)
			return true
		default:
			return false
		}
	}, "the other tenant's job never reached the upstream")
	t.Logf("the other tenant's job reached the upstream %v after its submit", waited)
	if waited > 2*time.Second {
		t.Errorf("the other tenant's 10-token job waited %v behind a stalled stream, want at most 2s", waited)
	}

	var hd, od job.Job
	testenv.Eventually(t, 20*time.Second, func() bool {
		hd, _ = fl.store.Get(t.Context(), "hog", hj.ID, false)
		od, _ = fl.store.Get(t.Context(), "other", oj.ID, false)
		return hd.State.Terminal() && od.State.Terminal()
	}, "the jobs never ended")
	if hd.State != job.StateFailed || errCode(hd) != job.CodeTimeout || od.State != job.StateSucceeded {
		t.Fatalf("the hog ended %s (%+v), the other %s (%+v); want a timeout and a success", hd.State, hd.Error, od.State, od.Error)
	}
	var res ChatResult
	if err := json.Unmarshal(od.Result, &res); err != nil || res.Usage == nil {
		t.Fatalf("the other job's result %s: %v", od.Result, err)
	}
	if want := int64(hogPrompt + deltas + res.Usage.total()); tokens() != want {
		t.Errorf("tokens of the last minute %d, want the hog's prompt and deltas and the other's usage: %d", tokens(), want)
	}
}
