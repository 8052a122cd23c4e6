package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/fakellm"
	"github.com/leasehold/leasehold/internal/httpapi"
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/kinds"
	"github.com/leasehold/leasehold/lease"
)

// chatFixture is an API whose chat calls go to a fake upstream.
type chatFixture struct {
	*fixture
	llm *fakellm.Server
}

func newChatFixture(t *testing.T, cfg fakellm.Config) *chatFixture {
	t.Helper()
	llm := fakellm.New(cfg)
	ts := httptest.NewServer(llm)
	t.Cleanup(func() { llm.Close(); ts.Close() })
	f := newFixture(t, func(c *httpapi.Config) { c.LLM = httpapi.LLMConfig{BaseURL: ts.URL + "/v1"} })
	return &chatFixture{fixture: f, llm: llm}
}

// setLimit sets key's limit and budget as PUT /v1/limits would.
func (f *chatFixture) setLimit(key string, limit int64, b job.Budget) {
	f.t.Helper()
	if err := f.store.SetKeyLimit(f.t.Context(), key, job.KeyLimit{Limit: &limit, Budget: b}); err != nil {
		f.t.Fatal(err)
	}
}

// call posts a chat completion with body under ctx and reads the answer.
func (f *chatFixture) call(ctx context.Context, body string, header ...string) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+acmeKey)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

func chatBody(content string, stream bool, maxTokens int) string {
	return fmt.Sprintf(`{"model": "fake", "messages": [{"role": "user", "content": %q}], "stream": %t, "max_tokens": %d}`, content, stream, maxTokens)
}

// waiting is how many calls wait in key's line.
func (f *chatFixture) waiting(key string) int64 {
	return f.rdb.ZCard(f.t.Context(), keys.New(f.prefix).SemQueue(key)).Val()
}

func (f *chatFixture) inUse(key string) int64 {
	return f.rdb.ZCard(f.t.Context(), keys.New(f.prefix).LeaseSet(key)).Val()
}

// Ten calls on a model limited to 2: never more than 2 reach the upstream
// at once, and the others are served in the order they came.
func TestChatCallsWaitTheirTurnInArrivalOrder(t *testing.T) {
	t.Parallel()
	f := newChatFixture(t, fakellm.Config{Delay: 20 * time.Millisecond})
	f.setLimit("model:fake", 2, job.Budget{})
	const n = 10
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			resp, b, err := f.call(t.Context(), chatBody(fmt.Sprint("call-", i), i%2 == 0, 5))
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("call %d: %d %s", i, resp.StatusCode, b)
			}
			errs <- err
		})
		// The next call comes once this one is at the upstream or in line.
		testenv.Eventually(t, 5*time.Second, func() bool { return int64(len(f.llm.Requests()))+f.waiting("model:fake") > int64(i) },
			"call %d neither at the upstream nor in line", i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if peak := f.llm.PeakInFlight(); peak > 2 {
		t.Fatalf("%d calls at the upstream at once, limit 2", peak)
	}
	// Two calls granted the two slots at once race to the upstream, so the
	// upstream sees each call within one place of its turn: no call
	// overtakes more than limit-1 that came before it.
	reqs := f.llm.Requests()
	for i, r := range reqs {
		var call int
		fmt.Sscanf(r.Body.Messages[0].Content, "call-%d", &call)
		if call-i >= 2 || i-call >= 2 {
			t.Fatalf("request %d upstream was call-%d: the calls were not served in arrival order", i, call)
		}
	}
	if got := f.inUse("model:fake"); got != 0 {
		t.Fatalf("%d slots still held after every call ended", got)
	}
}

// A call that finds no room within its Leasehold-Max-Wait is refused 429
// with Retry-After, OpenAI-shaped; a bad header is a 400.
func TestChatCallPastItsMaxWaitIsRefused(t *testing.T) {
	t.Parallel()
	f := newChatFixture(t, fakellm.Config{})
	f.setLimit("model:fake", 1, job.Budget{})
	leases, err := lease.New(store.New(f.rdb, store.Config{Prefix: f.prefix}), lease.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leases.Acquire(t.Context(), "model:fake", "someone", 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	resp, b, err := f.call(t.Context(), chatBody("hi", false, 5), "Leasehold-Max-Wait", "300ms")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("got %d, Retry-After %q, want 429 with Retry-After: %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	var e struct {
		Error struct{ Message, Type, Code string }
	}
	if err := json.Unmarshal(b, &e); err != nil || e.Error.Message == "" || e.Error.Code == "" {
		t.Fatalf("not an OpenAI error: %s", b)
	}
	if len(f.llm.Requests()) != 0 || f.waiting("model:fake") != 0 {
		t.Fatalf("the refused call reached the upstream or stayed in line")
	}
	for _, v := range []string{"-1s", "6m", "301", "soon"} {
		if resp, b, _ := f.call(t.Context(), chatBody("hi", false, 5), "Leasehold-Max-Wait", v); resp.StatusCode != http.StatusBadRequest ||
			!strings.Contains(string(b), "Leasehold-Max-Wait") {
			t.Errorf("Leasehold-Max-Wait %q: %d %s, want 400 naming the header", v, resp.StatusCode, b)
		}
	}
}

// Bad bodies are refused 400 naming the field; without an upstream, 501.
func TestChatCallRefusesBadInput(t *testing.T) {
	t.Parallel()
	f := newChatFixture(t, fakellm.Config{})
	for body, param := range map[string]string{
		`{"messages": [{"role": "user", "content": "hi"}]}`:                       "model",
		`{"model": "fake", "messages": []}`:                                       "messages",
		`{"model": "fake", "messages": [{"content": "hi"}]}`:                      "messages[0].role",
		`{"model": "fake", "messages": [{"role": "user"}], "max_tokens": 0}`:      "max_tokens",
		`{"model": "fake", "messages": [{"role": "user"}], "max_tokens": "many"}`: "max_tokens",
		`{"model": "a}b", "messages": [{"role": "user"}]}`:                        "model",
	} {
		resp, b, err := f.call(t.Context(), body)
		if err != nil {
			t.Fatal(err)
		}
		var e struct{ Error struct{ Param string } }
		if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(b, &e) != nil || e.Error.Param != param {
			t.Errorf("%s: %d %s, want 400 with param %s", body, resp.StatusCode, b, param)
		}
	}
	if len(f.llm.Requests()) != 0 {
		t.Fatal("a refused call reached the upstream")
	}
	bare := newFixture(t)
	resp := bare.do(request{method: http.MethodPost, path: "/v1/chat/completions", key: acmeKey, body: chatBody("hi", false, 5)})
	if resp.StatusCode != http.StatusNotImplemented {
		t.Fatalf("with no upstream: %d %s, want 501", resp.StatusCode, resp.body)
	}
}

// Calls and llm.chat jobs on one model key together never pass its limit.
func TestChatCallsAndJobsShareTheModelLimit(t *testing.T) {
	t.Parallel()
	f := newChatFixture(t, fakellm.Config{Delay: 10 * time.Millisecond})
	f.setLimit("model:fake", 2, job.Budget{})
	upstream := httptest.NewServer(f.llm)
	t.Cleanup(upstream.Close)
	f.startWorker(map[string]execution.Handler{"llm.chat": kinds.LLMChat(kinds.LLMConfig{BaseURL: upstream.URL + "/v1"})})
	const n = 6
	var ids []string
	for i := range n {
		j := f.submit(acmeKey, fmt.Sprintf(`{"kind": "llm.chat", "input": {"model": "fake", "messages": [{"role": "user", "content": "job-%d"}], "max_tokens": 5}}`, i))
		ids = append(ids, j.ID)
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp, b, err := f.call(t.Context(), chatBody(fmt.Sprint("call-", i), true, 5))
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Errorf("call %d: %v %s", i, err, b)
			}
		})
	}
	wg.Wait()
	for _, id := range ids {
		f.awaitState(id, job.StateSucceeded)
	}
	if peak := f.llm.PeakInFlight(); peak > 2 {
		t.Fatalf("%d calls and jobs at the upstream at once, limit 2", peak)
	}
}

// A client that goes away mid-stream closes the upstream call, and its
// slot is free at once for the next.
func TestChatClientThatLeavesFreesItsSlot(t *testing.T) {
	t.Parallel()
	f := newChatFixture(t, fakellm.Config{HangAfter: 3})
	f.setLimit("model:fake", 1, job.Budget{})
	ctx, leave := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _, _ = f.call(ctx, chatBody("hang", true, 50))
	}()
	testenv.Eventually(t, 5*time.Second, func() bool { return f.llm.InFlight() == 1 }, "the call never reached the upstream")
	leave()
	<-done
	testenv.Eventually(t, 5*time.Second, func() bool { return f.llm.Disconnects() == 1 }, "the upstream call was not closed")
	testenv.Eventually(t, 5*time.Second, func() bool { return f.inUse("model:fake") == 0 }, "the slot was not freed")
	resp, b, err := f.call(t.Context(), chatBody("next", false, 2), "Leasehold-Max-Wait", "1s")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the next call: %v %s", err, b)
	}
}

// The tpm budget reserves a call's estimate and keeps its real usage, which
// the tenant's usage counts too; a stream the client did not ask usage of
// shows none.
func TestChatCallSettlesTPMWithItsRealUsage(t *testing.T) {
	t.Parallel()
	f := newChatFixture(t, fakellm.Config{})
	f.setLimit("model:fake", 5, job.Budget{TPM: 100_000})
	resp, b, err := f.call(t.Context(), chatBody("one two three", true, 4))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%v %s", err, b)
	}
	if strings.Contains(string(b), `"usage"`) {
		t.Errorf("the stream shows a usage chunk the client did not ask for:\n%s", b)
	}
	if !strings.Contains(string(b), "data: [DONE]") {
		t.Errorf("the stream did not end with [DONE]:\n%s", b)
	}
	const real = 3 + 4 // the fake's prompt is its words, its answer max_tokens
	limits, err := f.store.Limits(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range limits {
		if l.Key == "model:fake" && l.TokensLastMinute.Value != real {
			t.Fatalf("tokens_last_minute %d, want the real usage %d", l.TokensLastMinute.Value, real)
		}
	}
	today := time.Now().UTC().Format(time.DateOnly)
	u := f.get(acmeKey, "/v1/usage?from="+today+"&to="+today)
	if !strings.Contains(string(u.body), `"llm_prompt_tokens":3`) || !strings.Contains(string(u.body), `"llm_completion_tokens":4`) {
		t.Fatalf("usage does not count the call: %s", u.body)
	}
}
