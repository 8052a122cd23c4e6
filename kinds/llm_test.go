package kinds

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/cancel"
	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/fakellm"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// llmFixture is a real worker serving the built-in kinds on the shared test
// Redis and NATS, with its own key prefix, calling an upstream on an
// httptest server.
type llmFixture struct {
	prefix string
	store  *store.Store
	flags  *cancel.Flags
	srv    *httptest.Server
}

// startLLM serves upstream, starts a worker whose llm.chat calls it
// (configured by llm, BaseURL and Client filled in unless noUpstream), and
// stops all of it when the test ends: first whatever upstream.Close is
// given (a fake's hanging streams), then the worker, then the server.
func startLLM(t *testing.T, upstream http.Handler, llm LLMConfig, wcfg execution.Config) *llmFixture {
	t.Helper()
	return startKinds(t, upstream, SleepConfig{}, llm, wcfg, nil)
}

// startKinds is startLLM with sleep's configuration too, and setup (nil
// for none) run on the store before the worker starts: limits set there
// hold from its first claim.
func startKinds(t *testing.T, upstream http.Handler, sleep SleepConfig, llm LLMConfig, wcfg execution.Config, setup func(*store.Store)) *llmFixture {
	t.Helper()
	return startKindsOn(t, testenv.Redis(t).Client(t), upstream, sleep, llm, wcfg, setup)
}

// startKindsOn is startKinds on rdb.
func startKindsOn(t *testing.T, rdb redis.UniversalClient, upstream http.Handler, sleep SleepConfig, llm LLMConfig, wcfg execution.Config, setup func(*store.Store)) *llmFixture {
	t.Helper()
	nc := testenv.NATS(t).Conn(t)
	prefix := testenv.Prefix(t)
	subject := cancelSubject(prefix)
	f := &llmFixture{prefix: prefix, srv: httptest.NewServer(upstream)}
	t.Cleanup(f.srv.Close)
	var err error
	f.store = store.New(rdb, store.Config{Prefix: prefix})
	if f.flags, err = cancel.New(f.store, nc, cancel.Config{Subject: subject}); err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(f.store)
	}
	if llm.BaseURL == "" && llm.Client == nil {
		llm.BaseURL = f.srv.URL + "/v1"
		llm.Client = f.srv.Client()
	}
	wcfg.Prefix, wcfg.CancelSubject, wcfg.NATS = prefix, subject, nc
	if wcfg.Heartbeat == 0 {
		// No test here loses a lease on purpose. Under -race on two
		// loaded cores a claim or a heartbeat can take hundreds of
		// milliseconds, and a 500 ms TTL then lost leases of jobs with
		// one attempt; 5 s covers such stalls. Heartbeats stay frequent
		// for the tests that see a cancel through them.
		wcfg.Heartbeat, wcfg.LeaseTTL = 50*time.Millisecond, 5*time.Second
	}
	wcfg.Poll = cmp.Or(wcfg.Poll, 50*time.Millisecond)
	wcfg.ShutdownGrace = 5 * time.Second
	wcfg.Backoff = func(int) time.Duration { return 10 * time.Millisecond }
	w, err := execution.NewWorker(rdb, wcfg)
	if err != nil {
		t.Fatal(err)
	}
	Register(w, sleep, llm)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("worker Run: %v", err)
		}
	})
	if c, ok := upstream.(interface{ Close() }); ok {
		t.Cleanup(c.Close)
	}
	return f
}

// submit submits an llm.chat job with input, keyed by its model as the API
// does it.
func (f *llmFixture) submit(t *testing.T, input string, s job.Submission) job.Job {
	t.Helper()
	s.Kind, s.Input = "llm.chat", json.RawMessage(input)
	var in struct{ Model string }
	if json.Unmarshal(s.Input, &in) == nil && strings.TrimSpace(in.Model) != "" {
		s.ConcurrencyKeys = append(s.ConcurrencyKeys, "model:"+in.Model)
	}
	j, _, err := f.store.Submit(t.Context(), "acme", s, "")
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func (f *llmFixture) wait(t *testing.T, id string, states ...job.State) job.Job {
	t.Helper()
	var j job.Job
	testenv.Eventually(t, 10*time.Second, func() bool {
		var err error
		if j, err = f.store.Get(t.Context(), "acme", id, false); err != nil {
			t.Fatal(err)
		}
		return slices.Contains(states, j.State)
	}, "job %s never reached %v", id, states)
	return j
}

// outputs returns the texts of the job's output events, in order.
func (f *llmFixture) outputs(t *testing.T, id string) []string {
	t.Helper()
	events, err := f.store.Events(t.Context(), "acme", id, false, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, ev := range events {
		if ev.Type != execution.EventOutput {
			continue
		}
		var d map[string]any
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			t.Fatal(err)
		}
		text, ok := d["text"].(string)
		if !ok || len(d) != 1 {
			t.Fatalf("output event data %s, want {\"text\": \"...\"}", ev.Data)
		}
		texts = append(texts, text)
	}
	return texts
}

// cancelJob does what the API does: the job's state first, then the flag
// and the NATS message.
func (f *llmFixture) cancelJob(t *testing.T, id string) {
	t.Helper()
	j, err := f.store.Cancel(t.Context(), "acme", id, false)
	if err != nil {
		t.Fatal(err)
	}
	if j.State == job.StateRunning {
		if err := f.flags.Request(t.Context(), id, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
}

func result(t *testing.T, j job.Job) ChatResult {
	t.Helper()
	var r ChatResult
	if err := json.Unmarshal(j.Result, &r); err != nil {
		t.Fatalf("result %s: %v", j.Result, err)
	}
	return r
}

func errCode(j job.Job) job.Code {
	if j.Error == nil {
		return ""
	}
	return j.Error.Code
}

func errMessage(j job.Job) string {
	if j.Error == nil {
		return ""
	}
	return j.Error.Message
}

const hello = `{"model":"fake-1","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"say hello"}]}`

func TestLLMChatStreamsDeltasAsOutputEvents(t *testing.T) {
	t.Parallel()
	fake := fakellm.New(fakellm.Config{Tokens: 30, Delay: 2 * time.Millisecond, APIKey: "sk-test"})
	f := startLLM(t, fake, LLMConfig{APIKey: "sk-test"}, execution.Config{})
	j := f.submit(t, hello, job.Submission{})
	done := f.wait(t, j.ID, job.StateSucceeded, job.StateFailed)
	if done.State != job.StateSucceeded || done.Attempt != 1 {
		t.Fatalf("state %s attempt %d error %+v", done.State, done.Attempt, done.Error)
	}
	res := result(t, done)
	if res.Text != fakellm.Text(30) {
		t.Fatalf("result text %q, want %q", res.Text, fakellm.Text(30))
	}
	if res.Usage == nil || *res.Usage != (Usage{PromptTokens: 4, CompletionTokens: 30, TotalTokens: 34}) {
		t.Fatalf("usage %+v", res.Usage)
	}
	outs := f.outputs(t, j.ID)
	if strings.Join(outs, "") != res.Text || len(outs) < 2 {
		t.Fatalf("output events %q do not stream the result %q", outs, res.Text)
	}
	t.Logf("30 deltas, 2ms apart, arrived as %d output events", len(outs))

	reqs := fake.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d upstream requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer sk-test" ||
		r.Header.Get("Fencing-Token") != done.Execution.FencingToken.String() {
		t.Fatalf("request %s with headers %v, want Bearer sk-test and Fencing-Token %v", r.Path, r.Header, done.Execution.FencingToken)
	}
	if !r.Body.Stream || r.Body.StreamOptions == nil || !r.Body.StreamOptions.IncludeUsage ||
		r.Body.Model != "fake-1" || len(r.Body.Messages) != 2 || r.Body.Messages[1] != (fakellm.Message{Role: "user", Content: "say hello"}) ||
		r.Body.MaxTokens != nil || r.Body.Temperature != nil {
		t.Fatalf("request body %+v", r.Body)
	}
}

func TestLLMChatPassesMaxTokensAndTemperature(t *testing.T) {
	t.Parallel()
	fake := fakellm.New(fakellm.Config{})
	f := startLLM(t, fake, LLMConfig{}, execution.Config{})
	j := f.submit(t, `{"model":"fake-1","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"temperature":0}`, job.Submission{})
	done := f.wait(t, j.ID, job.StateSucceeded, job.StateFailed)
	if res := result(t, done); res.Text != fakellm.Text(5) || strings.Join(f.outputs(t, j.ID), "") != res.Text {
		t.Fatalf("state %s result %s", done.State, done.Result)
	}
	body := fake.Requests()[0].Body
	if body.MaxTokens == nil || *body.MaxTokens != 5 || body.Temperature == nil || *body.Temperature != 0 {
		t.Fatalf("upstream saw max_tokens %v temperature %v", body.MaxTokens, body.Temperature)
	}
	if h := fake.Requests()[0].Header; h.Get("Authorization") != "" {
		t.Fatalf("Authorization %q sent without a key", h.Get("Authorization"))
	}
}

func TestLLMChatBatchesFastDeltasInOrder(t *testing.T) {
	t.Parallel()
	fake := fakellm.New(fakellm.Config{Tokens: 500})
	f := startLLM(t, fake, LLMConfig{}, execution.Config{})
	j := f.submit(t, hello, job.Submission{})
	done := f.wait(t, j.ID, job.StateSucceeded, job.StateFailed)
	outs := f.outputs(t, j.ID)
	if res := result(t, done); res.Text != fakellm.Text(500) || strings.Join(outs, "") != res.Text {
		t.Fatalf("state %s: output events %q, result %s", done.State, outs, done.Result)
	}
	for _, o := range outs {
		if n := strings.Count(o, "token-"); n > flushDeltas {
			t.Fatalf("an output event holds %d deltas, more than %d", n, flushDeltas)
		}
	}
	t.Logf("500 deltas sent back to back arrived as %d output events", len(outs))
}

// A cancel mid-stream must close the upstream request at once. The fake
// stalls after five tokens, so only the closed connection can end the call.
func TestLLMChatCancelClosesUpstreamAtOnce(t *testing.T) {
	t.Parallel()
	fake := fakellm.New(fakellm.Config{Tokens: 1000, Delay: time.Millisecond, HangAfter: 5})
	// Slow heartbeats: the cancel comes over NATS.
	f := startLLM(t, fake, LLMConfig{}, execution.Config{Heartbeat: time.Minute, LeaseTTL: 3 * time.Minute})
	j := f.submit(t, hello, job.Submission{MaxAttempts: 3})
	testenv.Eventually(t, 10*time.Second, func() bool { return strings.Join(f.outputs(t, j.ID), "") == fakellm.Text(5) },
		"the first five deltas never arrived")
	if fake.InFlight() != 1 || fake.Disconnects() != 0 {
		t.Fatalf("before cancel: in flight %d, disconnects %d", fake.InFlight(), fake.Disconnects())
	}
	f.cancelJob(t, j.ID)
	cancelled := time.Now()
	testenv.Eventually(t, 5*time.Second, func() bool { return fake.Disconnects() == 1 },
		"the upstream never saw the client leave after the cancel")
	t.Logf("cancel request → upstream saw the disconnect: %v", time.Since(cancelled))
	testenv.Eventually(t, 5*time.Second, func() bool { return fake.InFlight() == 0 }, "the upstream request is still in flight")
	done := f.wait(t, j.ID, job.StateCancelled, job.StateFailed, job.StateSucceeded)
	if done.State != job.StateCancelled || done.Attempt != 1 || errCode(done) != job.CodeCancelled {
		t.Fatalf("state %s attempt %d error %+v, want cancelled on attempt 1", done.State, done.Attempt, done.Error)
	}
	if n := len(fake.Requests()); n != 1 {
		t.Fatalf("%d upstream requests, want 1", n)
	}
}

func TestLLMChatTimeoutClosesUpstream(t *testing.T) {
	t.Parallel()
	fake := fakellm.New(fakellm.Config{Tokens: 1000, HangAfter: 3})
	f := startLLM(t, fake, LLMConfig{}, execution.Config{})
	j := f.submit(t, hello, job.Submission{MaxAttempts: 2, Timeout: job.Duration(300 * time.Millisecond)})
	done := f.wait(t, j.ID, job.StateFailed, job.StateSucceeded)
	if done.State != job.StateFailed || done.Attempt != 2 || errCode(done) != job.CodeTimeout {
		t.Fatalf("state %s attempt %d error %+v, want failed with timeout after 2 attempts", done.State, done.Attempt, done.Error)
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return fake.Disconnects() == 2 && fake.InFlight() == 0 },
		"the upstream did not see both timed-out requests leave")
	if got := strings.Join(f.outputs(t, j.ID), ""); got != fakellm.Text(3)+fakellm.Text(3) {
		t.Fatalf("outputs %q: each attempt streams its own deltas", got)
	}
}

func TestLLMChatWaitsOutShortRetryAfterInTheSameAttempt(t *testing.T) {
	t.Parallel()
	fake := fakellm.New(fakellm.Config{Tokens: 3})
	fake.FailNext(1, fakellm.Failure{Status: http.StatusBadGateway, RetryAfter: "1", Message: "upstream restarting"})
	f := startLLM(t, fake, LLMConfig{}, execution.Config{})
	j := f.submit(t, hello, job.Submission{MaxAttempts: 1})
	done := f.wait(t, j.ID, job.StateSucceeded, job.StateFailed)
	if done.State != job.StateSucceeded || done.Attempt != 1 || result(t, done).Text != fakellm.Text(3) {
		t.Fatalf("state %s attempt %d error %+v result %s", done.State, done.Attempt, done.Error, done.Result)
	}
	reqs := fake.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d upstream requests, want 2", len(reqs))
	}
	if gap := reqs[1].At.Sub(reqs[0].At); gap < time.Second {
		t.Fatalf("retried %v after the 502, before its Retry-After of 1s", gap)
	}
	if a, b := reqs[0].Header.Get("Fencing-Token"), reqs[1].Header.Get("Fencing-Token"); a != b {
		t.Fatalf("fencing tokens %s then %s: the retry left the attempt", a, b)
	}
}

// A 429 is pushback: the job leaves its slot and comes back after the
// Retry-After on the same attempt, under a new execution.
func TestLLMChat429IsPushbackThatSpendsNoAttempt(t *testing.T) {
	t.Parallel()
	fake := fakellm.New(fakellm.Config{Tokens: 3})
	fake.FailNext(2, fakellm.Failure{Status: http.StatusTooManyRequests, RetryAfter: "1", Message: "Rate limit reached"})
	f := startLLM(t, fake, LLMConfig{}, execution.Config{})
	j := f.submit(t, hello, job.Submission{MaxAttempts: 1})
	done := f.wait(t, j.ID, job.StateSucceeded, job.StateFailed)
	if done.State != job.StateSucceeded || done.Attempt != 1 || done.Execution.Attempt != 1 {
		t.Fatalf("state %s attempt %d error %+v: two 429s must spend no attempt of one", done.State, done.Attempt, done.Error)
	}
	reqs := fake.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d upstream requests, want 3", len(reqs))
	}
	for i := 1; i < 3; i++ {
		if gap := reqs[i].At.Sub(reqs[i-1].At); gap < time.Second {
			t.Fatalf("call %d came %v after a 429 with Retry-After 1s", i+1, gap)
		}
		if a, b := reqs[i-1].Header.Get("Fencing-Token"), reqs[i].Header.Get("Fencing-Token"); a >= b {
			t.Fatalf("fencing tokens %s then %s: each call after a pushback is a new execution", a, b)
		}
	}
	events, err := f.store.Events(t.Context(), "acme", j.ID, false, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var states []string
	for _, e := range events {
		var d struct {
			State string `json:"state"`
		}
		if e.Type == "state" && json.Unmarshal(e.Data, &d) == nil {
			states = append(states, d.State)
		}
	}
	if got := strings.Join(states, ","); got != "queued,running,retrying,queued,running,retrying,queued,running,succeeded" {
		t.Fatalf("state events %s: a pushback shows as retrying", got)
	}
}

func TestLLMChatLongRetryAfterFailsTheAttempt(t *testing.T) {
	t.Parallel()
	fake := fakellm.New(fakellm.Config{Tokens: 3})
	fake.FailNext(1, fakellm.Failure{Status: http.StatusBadGateway, RetryAfter: "120", Message: "upstream restarting"})
	f := startLLM(t, fake, LLMConfig{}, execution.Config{})
	j := f.submit(t, hello, job.Submission{MaxAttempts: 2})
	done := f.wait(t, j.ID, job.StateSucceeded, job.StateFailed)
	if done.State != job.StateSucceeded || done.Attempt != 2 || len(fake.Requests()) != 2 {
		t.Fatalf("state %s attempt %d, %d requests: a long Retry-After must end the attempt, to be retried",
			done.State, done.Attempt, len(fake.Requests()))
	}
}

func TestLLMChatRetryAfterBeyondTheDeadlineFailsAtOnce(t *testing.T) {
	t.Parallel()
	fake := fakellm.New(fakellm.Config{Tokens: 3})
	fake.FailNext(1, fakellm.Failure{Status: http.StatusBadGateway, RetryAfter: "20", Message: "upstream restarting"})
	f := startLLM(t, fake, LLMConfig{}, execution.Config{})
	j := f.submit(t, hello, job.Submission{MaxAttempts: 1, Timeout: job.Duration(3 * time.Second)})
	done := f.wait(t, j.ID, job.StateSucceeded, job.StateFailed)
	if done.State != job.StateFailed || errCode(done) != job.CodeHandlerError ||
		!strings.Contains(errMessage(done), "502") || !strings.Contains(errMessage(done), "upstream restarting") {
		t.Fatalf("state %s error %+v: waiting past the deadline would end in a timeout", done.State, done.Error)
	}
}

func TestLLMChatCancelWhileWaitingToRetry(t *testing.T) {
	t.Parallel()
	fake := fakellm.New(fakellm.Config{Tokens: 3})
	fake.FailNext(1, fakellm.Failure{Status: http.StatusBadGateway, RetryAfter: "25"})
	f := startLLM(t, fake, LLMConfig{}, execution.Config{Heartbeat: time.Minute, LeaseTTL: 3 * time.Minute})
	j := f.submit(t, hello, job.Submission{})
	testenv.Eventually(t, 10*time.Second, func() bool { return len(fake.Requests()) == 1 }, "no upstream request")
	f.wait(t, j.ID, job.StateRunning)
	f.cancelJob(t, j.ID)
	done := f.wait(t, j.ID, job.StateCancelled, job.StateFailed, job.StateSucceeded)
	if done.State != job.StateCancelled || len(fake.Requests()) != 1 {
		t.Fatalf("state %s after %d requests, want cancelled during the wait", done.State, len(fake.Requests()))
	}
}

func TestLLMChatServerErrorIsRetriedOnALaterAttempt(t *testing.T) {
	t.Parallel()
	fake := fakellm.New(fakellm.Config{Tokens: 3})
	fake.FailNext(1, fakellm.Failure{Status: http.StatusInternalServerError, Message: "The server had an error"})
	f := startLLM(t, fake, LLMConfig{}, execution.Config{})
	j := f.submit(t, hello, job.Submission{MaxAttempts: 3})
	done := f.wait(t, j.ID, job.StateSucceeded, job.StateFailed)
	if done.State != job.StateSucceeded || done.Attempt != 2 || result(t, done).Text != fakellm.Text(3) {
		t.Fatalf("state %s attempt %d error %+v", done.State, done.Attempt, done.Error)
	}
	reqs := fake.Requests()
	if len(reqs) != 2 || reqs[0].Header.Get("Fencing-Token") == reqs[1].Header.Get("Fencing-Token") {
		t.Fatalf("%d requests; the retry must come from a new execution with a new token", len(reqs))
	}
}

func TestLLMChatBadRequestFailsPermanentlyWithTheUpstreamMessage(t *testing.T) {
	t.Parallel()
	fake := fakellm.New(fakellm.Config{Tokens: 3})
	const msg = "Invalid value: 'robot'. Supported values are: 'system', 'assistant', 'user'."
	fake.FailNext(1, fakellm.Failure{Status: http.StatusBadRequest, Message: msg})
	f := startLLM(t, fake, LLMConfig{}, execution.Config{})
	j := f.submit(t, hello, job.Submission{MaxAttempts: 3})
	done := f.wait(t, j.ID, job.StateSucceeded, job.StateFailed)
	if done.State != job.StateFailed || done.Attempt != 1 || errCode(done) != job.CodeHandlerError ||
		errMessage(done) != "llm.chat: upstream 400 Bad Request: "+msg || len(fake.Requests()) != 1 {
		t.Fatalf("state %s attempt %d error %+v, %d requests", done.State, done.Attempt, done.Error, len(fake.Requests()))
	}
}

func TestLLMChatWrongKeyFailsPermanently(t *testing.T) {
	t.Parallel()
	fake := fakellm.New(fakellm.Config{APIKey: "sk-right"})
	f := startLLM(t, fake, LLMConfig{APIKey: "sk-wrong"}, execution.Config{})
	j := f.submit(t, hello, job.Submission{MaxAttempts: 3})
	done := f.wait(t, j.ID, job.StateSucceeded, job.StateFailed)
	if done.State != job.StateFailed || done.Attempt != 1 || !strings.Contains(errMessage(done), "401 Unauthorized: Incorrect API key") {
		t.Fatalf("state %s attempt %d error %+v", done.State, done.Attempt, done.Error)
	}
}

func TestLLMChatInvalidInputFailsPermanently(t *testing.T) {
	t.Parallel()
	fake := fakellm.New(fakellm.Config{Tokens: 3})
	f := startLLM(t, fake, LLMConfig{}, execution.Config{})
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	cases := []struct{ input, want string }{
		{`{}`, "input.model: is required"},
		{`{"model":" ",` + msgs + `}`, "input.model: is required"},
		{`{"model":"m"}`, "input.messages: must hold at least one message"},
		{`{"model":"m","messages":[]}`, "input.messages: must hold at least one message"},
		{`{"model":"m","messages":[{"content":"hi"}]}`, "input.messages[0].role: is required"},
		{`{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user"}]}`, "input.messages[1].content: is required"},
		{`{"model":"m",` + msgs + `,"max_tokens":0}`, "input.max_tokens: 0: must be from 1 to 1000000000"},
		{`{"model":"m",` + msgs + `,"temperature":2.5}`, "input.temperature: 2.5: must be between 0 and 2"},
		{`{"model":"m",` + msgs + `,"temperature":-0.1}`, "input.temperature: -0.1: must be between 0 and 2"},
		{`{"model":"m",` + msgs + `,"top_p":1}`, `unknown field "top_p"`},
		{`{"model":"m","messages":[{"role":"user","content":[{"type":"text"}]}]}`, "cannot unmarshal"},
		{`["m"]`, "cannot unmarshal"},
	}
	ids := make([]string, len(cases))
	for i, c := range cases {
		ids[i] = f.submit(t, c.input, job.Submission{MaxAttempts: 3}).ID
	}
	for i, c := range cases {
		done := f.wait(t, ids[i], job.StateSucceeded, job.StateFailed)
		if done.State != job.StateFailed || done.Attempt != 1 || errCode(done) != job.CodeHandlerError ||
			!strings.HasPrefix(errMessage(done), "llm.chat: input") || !strings.Contains(errMessage(done), c.want) {
			t.Errorf("input %s: state %s attempt %d error %+v, want a permanent failure saying %q", c.input, done.State, done.Attempt, done.Error, c.want)
		}
	}
	if n := len(fake.Requests()); n != 0 {
		t.Fatalf("invalid input reached the upstream %d times", n)
	}
}

func TestLLMChatWithoutUpstreamFailsPermanently(t *testing.T) {
	t.Parallel()
	// A Client with no BaseURL: the worker was started without one.
	f := startLLM(t, http.NotFoundHandler(), LLMConfig{Client: http.DefaultClient}, execution.Config{})
	j := f.submit(t, hello, job.Submission{MaxAttempts: 3})
	done := f.wait(t, j.ID, job.StateSucceeded, job.StateFailed)
	if done.State != job.StateFailed || done.Attempt != 1 ||
		errMessage(done) != "llm.chat: no upstream configured (LEASEHOLD_LLM_BASE_URL)" {
		t.Fatalf("state %s attempt %d error %+v", done.State, done.Attempt, done.Error)
	}
}

// Upstreams that are not quite the fake.

func TestLLMChatAcceptsAJSONCompletion(t *testing.T) {
	t.Parallel()
	f := startLLM(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		fmt.Fprint(w, `{"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"all at once"}}],`+
			`"usage":{"prompt_tokens":2,"completion_tokens":3,"total_tokens":5}}`)
	}), LLMConfig{}, execution.Config{})
	j := f.submit(t, hello, job.Submission{})
	done := f.wait(t, j.ID, job.StateSucceeded, job.StateFailed)
	res := result(t, done)
	if res.Text != "all at once" || res.Usage == nil || res.Usage.TotalTokens != 5 || !slices.Equal(f.outputs(t, j.ID), []string{"all at once"}) {
		t.Fatalf("state %s result %s outputs %q", done.State, done.Result, f.outputs(t, j.ID))
	}
}

func TestLLMChatStreamWithoutUsageOrDoneAfterFinish(t *testing.T) {
	t.Parallel()
	f := startLLM(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, ": keep-alive\r\n\r\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\r\n\r\n")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\r\n\r\n")
	}), LLMConfig{}, execution.Config{})
	j := f.submit(t, hello, job.Submission{})
	done := f.wait(t, j.ID, job.StateSucceeded, job.StateFailed)
	if done.State != job.StateSucceeded || string(done.Result) != `{"text":"a","usage":null}` {
		t.Fatalf("state %s result %s error %+v", done.State, done.Result, done.Error)
	}
}

func TestLLMChatStreamCutShortIsRetried(t *testing.T) {
	t.Parallel()
	f := startLLM(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"half a\"}}]}\n\n")
	}), LLMConfig{}, execution.Config{})
	j := f.submit(t, hello, job.Submission{MaxAttempts: 2})
	done := f.wait(t, j.ID, job.StateSucceeded, job.StateFailed)
	if done.State != job.StateFailed || done.Attempt != 2 || !strings.Contains(errMessage(done), "stream ended before [DONE]") {
		t.Fatalf("state %s attempt %d error %+v", done.State, done.Attempt, done.Error)
	}
}

func TestLLMChatErrorMidStreamIsRetried(t *testing.T) {
	t.Parallel()
	f := startLLM(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"error\":{\"message\":\"overloaded\"}}\n\n")
	}), LLMConfig{}, execution.Config{})
	j := f.submit(t, hello, job.Submission{MaxAttempts: 2})
	done := f.wait(t, j.ID, job.StateSucceeded, job.StateFailed)
	if done.State != job.StateFailed || done.Attempt != 2 || !strings.Contains(errMessage(done), "overloaded") {
		t.Fatalf("state %s attempt %d error %+v", done.State, done.Attempt, done.Error)
	}
}

func TestLLMChatNonEventStreamFailsPermanently(t *testing.T) {
	t.Parallel()
	f := startLLM(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<html>a login page</html>")
	}), LLMConfig{}, execution.Config{})
	j := f.submit(t, hello, job.Submission{MaxAttempts: 3})
	done := f.wait(t, j.ID, job.StateSucceeded, job.StateFailed)
	if done.State != job.StateFailed || done.Attempt != 1 || !strings.Contains(errMessage(done), `Content-Type "text/html"`) {
		t.Fatalf("state %s attempt %d error %+v", done.State, done.Attempt, done.Error)
	}
}

// The parts, without a worker.

// sseStream is an event stream with every oddity the reader must take:
// comments, blank lines before events, CRLF and bare CR line ends, fields
// other than data, data without a space, multi-line data, an empty data
// event, and a last event without its blank line.
const sseStream = ": keep-alive\n\n" +
	"\n\n" +
	"data: {\"a\":1}\n\n" +
	"event: message\r\nid: 7\r\ndata: {\"b\":2}\r\n\r\n" +
	": comment\rdata:{\"c\":3}\r\r" +
	"data: line one\ndata:  line two\n\n" +
	"retry: 100\ndata\n\n" +
	"data: [DONE]"

var sseWant = []string{`{"a":1}`, `{"b":2}`, `{"c":3}`, "line one\n line two", "", "[DONE]"}

func readAll(t *testing.T, r io.Reader) []string {
	t.Helper()
	s := newSSEReader(r)
	var got []string
	for {
		data, err := s.next()
		if errors.Is(err, io.EOF) {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(data))
	}
}

// chunks is a reader that hands out its chunks one read at a time, as a
// network does.
type chunks []string

func (c *chunks) Read(p []byte) (int, error) {
	if len(*c) == 0 {
		return 0, io.EOF
	}
	n := copy(p, (*c)[0])
	if n < len((*c)[0]) {
		(*c)[0] = (*c)[0][n:]
	} else {
		*c = (*c)[1:]
	}
	return n, nil
}

func TestSSEReaderWholeAndByteByByte(t *testing.T) {
	t.Parallel()
	if got := readAll(t, strings.NewReader(sseStream)); !slices.Equal(got, sseWant) {
		t.Fatalf("whole: got %q, want %q", got, sseWant)
	}
	if got := readAll(t, iotest.OneByteReader(strings.NewReader(sseStream))); !slices.Equal(got, sseWant) {
		t.Fatalf("byte by byte: got %q, want %q", got, sseWant)
	}
}

func TestSSEReaderSplitAnywhere(t *testing.T) {
	t.Parallel()
	for i := 1; i < len(sseStream); i++ {
		r := chunks{sseStream[:i], sseStream[i:]}
		if got := readAll(t, &r); !slices.Equal(got, sseWant) {
			t.Fatalf("split at %d (%q | %q): got %q, want %q", i, sseStream[:i], sseStream[i:], got, sseWant)
		}
	}
}

func TestSSEReaderCRLFSplitBetweenReads(t *testing.T) {
	t.Parallel()
	// A CR ends one read and its LF starts the next: one line end, not two,
	// so the two data lines stay one event.
	r := chunks{"da", "ta: {\"x\":", "1}\r", "\ndata: 2\r", "\n\r", "\n"}
	if got := readAll(t, &r); !slices.Equal(got, []string{"{\"x\":1}\n2"}) {
		t.Fatalf("got %q", got)
	}
}

func TestSSEReaderRefusesHugeEvents(t *testing.T) {
	t.Parallel()
	half := strings.Repeat("x", maxEvent/2+1)
	for name, stream := range map[string]string{
		"one data line": "data: " + strings.Repeat("x", maxEvent+1) + "\n\n",
		"many lines":    "data: " + half + "\ndata: " + half + "\n\n",
		"a comment":     ": " + strings.Repeat("x", maxEvent+1) + "\n\ndata: 1\n\n",
	} {
		s := newSSEReader(strings.NewReader(stream))
		if _, err := s.next(); err == nil || errors.Is(err, io.EOF) {
			t.Errorf("%s: err %v, want a size error", name, err)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"1", time.Second, true},
		{" 30 ", 30 * time.Second, true},
		{"0", 0, true},
		{now.Add(10 * time.Second).Format(http.TimeFormat), 10 * time.Second, true},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0, true},
		{"Sun, 29 Nov 2026 12:00:45 GMT", 45 * time.Second, true},
		{"", 0, false},
		{"-5", 0, false},
		{"1.5", 0, false},
		{"soon", 0, false},
	} {
		got, ok := ParseRetryAfter(c.in, now)
		if got != c.want || ok != c.ok {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestErrorMessage(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 600)
	for _, c := range []struct{ body, want string }{
		{`{"error":{"message":"bad role","type":"invalid_request_error"}}`, "bad role"},
		{`{"error":"model not found"}`, "model not found"},
		{`{"message":"no such model"}`, "no such model"},
		{`{"type":"about:blank","status":400,"detail":"bad input"}`, "bad input"},
		{"<html>\n  Bad   Gateway\n</html>", "<html> Bad Gateway </html>"},
		{"", ""},
		{long, strings.Repeat("x", 500) + "…"},
	} {
		if got := errorMessage([]byte(c.body)); got != c.want {
			t.Errorf("errorMessage(%.40q) = %.60q, want %.60q", c.body, got, c.want)
		}
	}
}
