package fakellm_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/fakellm"
	"github.com/leasehold/leasehold/internal/testenv"
)

// clock is a windows' clock the test moves by hand.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

const oneWord = `{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":1}`

// refusal reads a refused answer: its status, Retry-After, retry-after-ms
// and error message.
func refusal(t *testing.T, resp *http.Response) (status int, retryAfter, retryAfterMS, message string) {
	t.Helper()
	var e struct {
		Error struct{ Message, Type string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("retry-after-ms"), e.Error.Message
}

// wantStats compares the counts; Busy, which depends on the clock, has a
// test of its own.
func wantStats(t *testing.T, fake *fakellm.Server, want fakellm.Stats) {
	t.Helper()
	got := fake.Stats()
	got.Busy = 0
	if got != want {
		t.Fatalf("stats %+v, want %+v", got, want)
	}
}

func TestConcurrencyCapacityChangesAtRunTime(t *testing.T) {
	t.Parallel()
	// Streams of more than one token hang until their client leaves: each
	// holds its place in the capacity meanwhile.
	fake, srv := serve(t, fakellm.Config{Tokens: 10, HangAfter: 1, Limits: fakellm.Limits{Concurrency: 2}})
	hanging := `{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true}`
	hold := func() {
		t.Helper()
		resp := post(t, t.Context(), srv, "/v1/chat/completions", hanging)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d, want 200", resp.StatusCode)
		}
		if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	hold()
	hold()
	status, ra, raMS, msg := refusal(t, post(t, t.Context(), srv, "/v1/chat/completions", oneWord))
	if status != 429 || ra != "1" || raMS != "1000" || msg != "Too many concurrent requests: Limit 2." {
		t.Fatalf("over the capacity: %d Retry-After %q retry-after-ms %q %q", status, ra, raMS, msg)
	}
	wantStats(t, fake, fakellm.Stats{Calls: 3, Refused: 1, Serving: 2, PeakServing: 2, RequestsLastMinute: 2, TokensLastMinute: 2 * (1 + 10)})

	// Raised at run time: one more fits, and no more.
	fake.SetLimits(fakellm.Limits{Concurrency: 3, RetryAfter: 2500 * time.Millisecond})
	hold()
	status, ra, raMS, _ = refusal(t, post(t, t.Context(), srv, "/v1/chat/completions", oneWord))
	if status != 429 || ra != "3" || raMS != "2500" {
		t.Fatalf("over the raised capacity: %d Retry-After %q retry-after-ms %q", status, ra, raMS)
	}
	// Lowered below what runs: those run on, and nothing new starts
	// until they have ended.
	fake.SetLimits(fakellm.Limits{Concurrency: 1})
	if status, _, _, _ := refusal(t, post(t, t.Context(), srv, "/v1/chat/completions", oneWord)); status != 429 {
		t.Fatalf("over the lowered capacity: %d", status)
	}
	if s := fake.Stats(); s.Serving != 3 || s.PeakServing != 3 || s.Refused != 3 {
		t.Fatalf("stats %+v", s)
	}
	fake.Close() // ends the hanging streams
	testenv.Eventually(t, 5*time.Second, func() bool { return fake.Stats().Serving == 0 }, "the hanging streams still count")
}

// TestBusyIntegratesServing: with two calls served, Busy grows twice as
// fast as the clock; with the capacity lowered to one under them, as fast;
// with none served, not at all.
func TestBusyIntegratesServing(t *testing.T) {
	t.Parallel()
	fake, srv := serve(t, fakellm.Config{Tokens: 10, HangAfter: 1, Limits: fakellm.Limits{Concurrency: 2}})
	hanging := `{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true}`
	for range 2 {
		resp := post(t, t.Context(), srv, "/v1/chat/completions", hanging)
		if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	// Each read is bracketed by the clock: the growth between two reads is
	// n times a span between the brackets' inner and outer ends.
	grows := func(n time.Duration) {
		t.Helper()
		b0 := time.Now()
		busy0 := fake.Stats().Busy
		a0 := time.Now()
		testenv.Eventually(t, 5*time.Second, func() bool { return time.Since(a0) > 50*time.Millisecond }, "")
		b1 := time.Now()
		busy1 := fake.Stats().Busy
		a1 := time.Now()
		if grew := busy1 - busy0; grew < n*b1.Sub(a0) || grew > n*a1.Sub(b0) {
			t.Fatalf("Busy grew %v over %v..%v, want %d times the span", grew, b1.Sub(a0), a1.Sub(b0), n)
		}
	}
	grows(2)
	fake.SetLimits(fakellm.Limits{Concurrency: 1}) // the two run on above it
	grows(1)
	fake.Close() // ends the hanging streams
	testenv.Eventually(t, 5*time.Second, func() bool { return fake.Stats().Serving == 0 }, "the hanging streams still count")
	grows(0)
}

func TestAnEndedCallFreesItsPlace(t *testing.T) {
	t.Parallel()
	fake, srv := serve(t, fakellm.Config{Limits: fakellm.Limits{Concurrency: 1}})
	for range 3 {
		if resp := post(t, t.Context(), srv, "/v1/chat/completions", oneWord); resp.StatusCode != 200 {
			t.Fatalf("status %d: one call at a time fits a capacity of 1", resp.StatusCode)
		}
	}
	wantStats(t, fake, fakellm.Stats{Calls: 3, PeakServing: 1, RequestsLastMinute: 3, TokensLastMinute: 3 * 2})
}

func TestRPMWindowSlides(t *testing.T) {
	t.Parallel()
	c := newClock()
	fake, srv := serve(t, fakellm.Config{Clock: c.now, Limits: fakellm.Limits{RPM: 3}})
	// Three admitted 10s apart: each says what is left, and when a fourth
	// would fit (when the first leaves the window).
	for i, want := range []struct{ remaining, reset string }{{"2", "0s"}, {"1", "0s"}, {"0", "40s"}} {
		resp := post(t, t.Context(), srv, "/v1/chat/completions", oneWord)
		h := resp.Header
		if resp.StatusCode != 200 || h.Get("x-ratelimit-limit-requests") != "3" ||
			h.Get("x-ratelimit-remaining-requests") != want.remaining || h.Get("x-ratelimit-reset-requests") != want.reset {
			t.Fatalf("call %d: %d limit %q remaining %q reset %q, want 200 3 %q %q", i, resp.StatusCode,
				h.Get("x-ratelimit-limit-requests"), h.Get("x-ratelimit-remaining-requests"), h.Get("x-ratelimit-reset-requests"), want.remaining, want.reset)
		}
		if h.Get("x-ratelimit-limit-tokens") != "" {
			t.Fatalf("token headers %v without a TPM", h)
		}
		c.advance(10 * time.Second)
	}
	resp := post(t, t.Context(), srv, "/v1/chat/completions", oneWord)
	if h := resp.Header; h.Get("x-ratelimit-remaining-requests") != "0" || h.Get("x-ratelimit-reset-requests") != "30s" {
		t.Fatalf("refusal's headers %v", h)
	}
	status, ra, raMS, msg := refusal(t, resp)
	if status != 429 || ra != "30" || raMS != "30000" || msg != "Rate limit reached for requests per min (RPM): Limit 3." {
		t.Fatalf("fourth in the minute: %d Retry-After %q retry-after-ms %q %q", status, ra, raMS, msg)
	}
	// 20ms before the first leaves: still refused, told so to the ms.
	c.advance(30*time.Second - 20*time.Millisecond)
	resp = post(t, t.Context(), srv, "/v1/chat/completions", oneWord)
	if status, ra, raMS, _ := refusal(t, resp); status != 429 || ra != "1" || raMS != "20" || resp.Header.Get("x-ratelimit-reset-requests") != "20ms" {
		t.Fatalf("20ms early: %d Retry-After %q retry-after-ms %q reset %q", status, ra, raMS, resp.Header.Get("x-ratelimit-reset-requests"))
	}
	c.advance(20 * time.Millisecond)
	if resp := post(t, t.Context(), srv, "/v1/chat/completions", oneWord); resp.StatusCode != 200 {
		t.Fatalf("once the first left the window: %d", resp.StatusCode)
	}
	// Refused calls do not count in the window.
	wantStats(t, fake, fakellm.Stats{Calls: 6, Refused: 2, RequestsLastMinute: 3, TokensLastMinute: 3 * 2, PeakServing: 1})
	c.advance(time.Minute)
	if s := fake.Stats(); s.RequestsLastMinute != 0 || s.TokensLastMinute != 0 {
		t.Fatalf("a minute later the windows hold %+v", s)
	}
}

func TestTPMCountsPromptAndAnswerTokens(t *testing.T) {
	t.Parallel()
	c := newClock()
	fake, srv := serve(t, fakellm.Config{Clock: c.now, AnswerTokens: 20, Limits: fakellm.Limits{TPM: 100}})
	// max_tokens 300 of a model that says 20: usage 5 + 20, finished.
	asks300 := `{"model":"m","messages":[{"role":"user","content":"a b c d e"}],"max_tokens":300}`
	for i := range 4 {
		resp := post(t, t.Context(), srv, "/v1/chat/completions", asks300)
		h := resp.Header
		var body struct {
			Choices []struct {
				Message      struct{ Content string }
				FinishReason string `json:"finish_reason"`
			}
			Usage fakellm.Usage
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || body.Usage != (fakellm.Usage{PromptTokens: 5, CompletionTokens: 20, TotalTokens: 25}) ||
			body.Choices[0].Message.Content != fakellm.Text(20) || body.Choices[0].FinishReason != "stop" {
			t.Fatalf("call %d: %d %+v", i, resp.StatusCode, body)
		}
		if h.Get("x-ratelimit-limit-tokens") != "100" || h.Get("x-ratelimit-remaining-tokens") != []string{"75", "50", "25", "0"}[i] ||
			h.Get("x-ratelimit-limit-requests") != "" {
			t.Fatalf("call %d: headers %v", i, h)
		}
		c.advance(time.Second)
	}
	resp := post(t, t.Context(), srv, "/v1/chat/completions", asks300)
	if h := resp.Header; h.Get("x-ratelimit-remaining-tokens") != "0" || h.Get("x-ratelimit-reset-tokens") != "56s" {
		t.Fatalf("refusal's headers %v", h)
	}
	status, ra, raMS, msg := refusal(t, resp)
	if status != 429 || ra != "56" || raMS != "56000" || msg != "Rate limit reached for tokens per min (TPM): Limit 100, Used 100, Requested 25." {
		t.Fatalf("over the TPM: %d Retry-After %q retry-after-ms %q %q", status, ra, raMS, msg)
	}
	wantStats(t, fake, fakellm.Stats{Calls: 5, Refused: 1, RequestsLastMinute: 4, TokensLastMinute: 100, PeakServing: 1})

	// A smaller request fits sooner: 5 + 5 needs the first call gone only.
	// max_tokens below the answer cuts it short.
	c.advance(56 * time.Second)
	resp = post(t, t.Context(), srv, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"a b c d e"}],"max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}`)
	if resp.StatusCode != 200 || resp.Header.Get("x-ratelimit-remaining-tokens") != "15" {
		t.Fatalf("after the first left: %d remaining %q", resp.StatusCode, resp.Header.Get("x-ratelimit-remaining-tokens"))
	}
	lines := dataLines(t, resp.Body)
	var u struct{ Usage fakellm.Usage }
	if err := json.Unmarshal([]byte(lines[len(lines)-2]), &u); err != nil || u.Usage != (fakellm.Usage{PromptTokens: 5, CompletionTokens: 5, TotalTokens: 10}) {
		t.Fatalf("streamed usage %s (%v)", lines[len(lines)-2], err)
	}

	// Set at run time: back to max_tokens, which now does not fit.
	fake.SetAnswerTokens(0)
	if status, ra, _, _ := refusal(t, post(t, t.Context(), srv, "/v1/chat/completions", asks300)); status != 429 || ra != "60" {
		t.Fatalf("a request larger than the TPM: %d Retry-After %q, want 429 and a whole window", status, ra)
	}
	if s := fake.Stats(); s.TokensLastMinute != 3*25+10 {
		t.Fatalf("tokens in the window %d, want %d", s.TokensLastMinute, 3*25+10)
	}
}

func TestRefusalsCanBe503(t *testing.T) {
	t.Parallel()
	c := newClock()
	fake, srv := serve(t, fakellm.Config{Clock: c.now, Limits: fakellm.Limits{RPM: 1, Status: http.StatusServiceUnavailable}})
	if resp := post(t, t.Context(), srv, "/v1/chat/completions", oneWord); resp.StatusCode != 200 {
		t.Fatalf("first call: %d", resp.StatusCode)
	}
	resp := post(t, t.Context(), srv, "/v1/chat/completions", oneWord)
	var e struct{ Error struct{ Type string } }
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "60" || resp.Header.Get("retry-after-ms") != "60000" ||
		resp.Header.Get("x-ratelimit-reset-requests") != "1m0s" || e.Error.Type != "server_error" {
		t.Fatalf("second call in the minute: %d %v %+v", resp.StatusCode, resp.Header, e)
	}
	wantStats(t, fake, fakellm.Stats{Calls: 2, Refused: 1, RequestsLastMinute: 1, TokensLastMinute: 2, PeakServing: 1})
}

// Under a burst, the capacity holds: never more admitted at once, and
// every call either admitted or refused.
func TestBurstNeverExceedsTheCapacity(t *testing.T) {
	t.Parallel()
	fake, srv := serve(t, fakellm.Config{Tokens: 20, Delay: 5 * time.Millisecond, Limits: fakellm.Limits{Concurrency: 5}})
	const calls = 40
	statuses := make(chan int, calls)
	var wg sync.WaitGroup
	for range calls {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/v1/chat/completions",
				strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true}`))
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			statuses <- resp.StatusCode
		})
	}
	wg.Wait()
	close(statuses)
	ok, refused := 0, 0
	for s := range statuses {
		switch s {
		case 200:
			ok++
		case 429:
			refused++
		default:
			t.Fatalf("status %d", s)
		}
	}
	s := fake.Stats()
	if ok+refused != calls || s.Calls != calls || s.Refused != refused || s.PeakServing > 5 || s.PeakServing < 1 || s.RequestsLastMinute != ok {
		t.Fatalf("%d admitted, %d refused; stats %+v", ok, refused, s)
	}
	t.Logf("%d admitted, %d refused, peak %d", ok, refused, s.PeakServing)
}

// A model named fake-capacity-N answers N requests at once, refuses more
// as an upstream at capacity does, and takes one again when one ends;
// other models are not held to it.
func TestCapacityModel(t *testing.T) {
	t.Parallel()
	fake, srv := serve(t, fakellm.Config{Tokens: 10, HangAfter: 1})
	hanging := `{"model":"fake-capacity-2","messages":[{"role":"user","content":"x"}],"stream":true}`
	hold := func() (leave func()) {
		t.Helper()
		ctx, leave := context.WithCancel(t.Context())
		resp := post(t, ctx, srv, "/v1/chat/completions", hanging)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d, want 200", resp.StatusCode)
		}
		if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		return leave
	}
	leave := hold()
	hold()
	one := func(model string) *http.Response {
		return post(t, t.Context(), srv, "/v1/chat/completions", strings.Replace(oneWord, `"m"`, `"`+model+`"`, 1))
	}
	status, ra, _, msg := refusal(t, one("fake-capacity-2"))
	if status != 429 || ra != "1" || msg != "Too many concurrent requests for fake-capacity-2: Limit 2." {
		t.Fatalf("over the model's capacity: %d Retry-After %q %q", status, ra, msg)
	}
	for _, model := range []string{"m", "fake-capacity-3", "fake-capacity-0", "fake-capacity-x"} {
		resp := one(model)
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 200 {
			t.Errorf("model %s beside the held ones: status %d, want 200", model, resp.StatusCode)
		}
	}
	if got := fake.Stats(); got.Refused != 1 || got.Serving != 2 {
		t.Fatalf("stats %+v, want 1 refused and 2 served", got)
	}
	leave()
	testenv.Eventually(t, 10*time.Second, func() bool { return fake.Stats().Serving == 1 }, "the stream left is still served")
	if resp := one("fake-capacity-2"); resp.StatusCode != 200 {
		t.Fatalf("a place freed: status %d, want 200", resp.StatusCode)
	}
}
