package fakellm_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/fakellm"
	"github.com/leasehold/leasehold/internal/testenv"
)

// serve runs fake on a test server, closed (fake first) when the test ends.
func serve(t *testing.T, cfg fakellm.Config) (*fakellm.Server, *httptest.Server) {
	t.Helper()
	fake := fakellm.New(cfg)
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	t.Cleanup(fake.Close)
	return fake, srv
}

func post(t *testing.T, ctx context.Context, srv *httptest.Server, path, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// dataLines returns the data: lines of an event stream, and whether every
// event was followed by a blank line.
func dataLines(t *testing.T, r io.Reader) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		} else if sc.Text() != "" {
			t.Fatalf("unexpected line %q", sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestStreamsNumberedTokensUsageAndDone(t *testing.T) {
	t.Parallel()
	fake, srv := serve(t, fakellm.Config{Tokens: 3})
	for _, path := range []string{"/v1/chat/completions", "/chat/completions"} {
		resp := post(t, t.Context(), srv, path,
			`{"model":"m1","messages":[{"role":"user","content":"two words"}],"stream":true,"stream_options":{"include_usage":true}}`)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("%s: status %d, content type %q", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		lines := dataLines(t, resp.Body)
		if len(lines) != 1+3+1+1+1 || lines[len(lines)-1] != "[DONE]" {
			t.Fatalf("%s: data lines %q", path, lines)
		}
		var text strings.Builder
		for _, l := range lines[1:4] {
			var c struct {
				Model   string
				Choices []struct{ Delta struct{ Content string } }
			}
			if err := json.Unmarshal([]byte(l), &c); err != nil || c.Model != "m1" {
				t.Fatalf("chunk %s: %v", l, err)
			}
			text.WriteString(c.Choices[0].Delta.Content)
		}
		if text.String() != "token-1 token-2 token-3 " || text.String() != fakellm.Text(3) {
			t.Fatalf("text %q", text.String())
		}
		if !strings.Contains(lines[4], `"finish_reason":"stop"`) {
			t.Fatalf("finish chunk %s", lines[4])
		}
		var u struct{ Usage fakellm.Usage }
		if err := json.Unmarshal([]byte(lines[5]), &u); err != nil || u.Usage != (fakellm.Usage{PromptTokens: 2, CompletionTokens: 3, TotalTokens: 5}) {
			t.Fatalf("usage chunk %s: %v", lines[5], err)
		}
	}
	if n := len(fake.Requests()); n != 2 || fake.Disconnects() != 0 || fake.InFlight() != 0 || fake.PeakInFlight() != 1 {
		t.Fatalf("requests %d disconnects %d in flight %d peak %d", n, fake.Disconnects(), fake.InFlight(), fake.PeakInFlight())
	}
}

func TestMaxTokensSetsLengthAndNoUsageUnlessAsked(t *testing.T) {
	t.Parallel()
	_, srv := serve(t, fakellm.Config{})
	resp := post(t, t.Context(), srv, "/v1/chat/completions",
		`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":2,"stream":true}`)
	lines := dataLines(t, resp.Body)
	if len(lines) != 1+2+1+1 || !strings.Contains(lines[3], `"finish_reason":"length"`) || strings.Contains(strings.Join(lines, ""), "usage") {
		t.Fatalf("data lines %q", lines)
	}
}

func TestNonStreamingAnswersOneCompletion(t *testing.T) {
	t.Parallel()
	_, srv := serve(t, fakellm.Config{Tokens: 4})
	resp := post(t, t.Context(), srv, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"a b c"}]}`)
	var c struct {
		Object  string
		Choices []struct {
			Message      struct{ Role, Content string }
			FinishReason string `json:"finish_reason"`
		}
		Usage fakellm.Usage
	}
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		t.Fatal(err)
	}
	if c.Object != "chat.completion" || c.Choices[0].Message.Content != fakellm.Text(4) || c.Choices[0].FinishReason != "stop" ||
		c.Usage != (fakellm.Usage{PromptTokens: 3, CompletionTokens: 4, TotalTokens: 7}) {
		t.Fatalf("completion %+v", c)
	}
}

func TestFailNextQueuesCannedErrors(t *testing.T) {
	t.Parallel()
	fake, srv := serve(t, fakellm.Config{Tokens: 1})
	fake.FailNext(1, fakellm.Failure{Status: 429, RetryAfter: "7", Message: "slow down"})
	fake.FailNext(2, fakellm.Failure{Status: 500})
	fake.FailNext(1, fakellm.Failure{Status: 400, Message: "bad role"})
	body := `{"model":"m","messages":[{"role":"user","content":"x"}]}`
	for _, want := range []struct {
		status     int
		retryAfter string
		message    string
	}{
		{429, "7", "slow down"},
		{500, "", "Internal Server Error"},
		{500, "", "Internal Server Error"},
		{400, "", "bad role"},
		{200, "", ""},
	} {
		resp := post(t, t.Context(), srv, "/v1/chat/completions", body)
		if resp.StatusCode != want.status || resp.Header.Get("Retry-After") != want.retryAfter {
			t.Fatalf("status %d Retry-After %q, want %d %q", resp.StatusCode, resp.Header.Get("Retry-After"), want.status, want.retryAfter)
		}
		if want.status == 200 {
			continue
		}
		var e struct{ Error struct{ Message string } }
		if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || e.Error.Message != want.message {
			t.Fatalf("error body %+v (%v), want message %q", e, err, want.message)
		}
	}
	if n := len(fake.Requests()); n != 5 {
		t.Fatalf("%d requests recorded, want 5", n)
	}
}

func TestRefusesBadRequestsAndWrongKey(t *testing.T) {
	t.Parallel()
	_, srv := serve(t, fakellm.Config{APIKey: "sk-1"})
	for _, c := range []struct {
		path, key, body string
		status          int
	}{
		{"/v1/chat/completions", "", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, 401},
		{"/v1/chat/completions", "sk-2", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, 401},
		{"/v1/chat/completions", "sk-1", `{"model":"m","messages":[]}`, 400},
		{"/v1/chat/completions", "sk-1", `{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":0}`, 400},
		{"/v1/chat/completions", "sk-1", `not json`, 400},
		{"/v1/models", "sk-1", `{}`, 404},
		{"/v1/chat/completions", "sk-1", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, 200},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+c.path, strings.NewReader(c.body))
		if c.key != "" {
			req.Header.Set("Authorization", "Bearer "+c.key)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s key %q body %s: status %d, want %d", c.path, c.key, c.body, resp.StatusCode, c.status)
		}
	}
}

func TestCountsDisconnectsInFlightAndPeak(t *testing.T) {
	t.Parallel()
	fake, srv := serve(t, fakellm.Config{Tokens: 1000, Delay: time.Millisecond})
	ctx, stop := context.WithCancel(t.Context())
	body := `{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true}`
	var resps []*http.Response
	for range 3 {
		resps = append(resps, post(t, ctx, srv, "/v1/chat/completions", body))
	}
	for _, r := range resps {
		if _, err := bufio.NewReader(r.Body).ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	if fake.InFlight() != 3 || fake.PeakInFlight() != 3 || fake.Disconnects() != 0 {
		t.Fatalf("in flight %d peak %d disconnects %d", fake.InFlight(), fake.PeakInFlight(), fake.Disconnects())
	}
	stop()
	testenv.Eventually(t, 5*time.Second, func() bool { return fake.Disconnects() == 3 && fake.InFlight() == 0 },
		"the server did not see three clients leave")
	if fake.PeakInFlight() != 3 {
		t.Fatalf("peak %d, want 3", fake.PeakInFlight())
	}
}

func TestHangAfterHoldsTheStreamUntilTheClientLeaves(t *testing.T) {
	t.Parallel()
	fake, srv := serve(t, fakellm.Config{Tokens: 10, HangAfter: 2})
	ctx, stop := context.WithCancel(t.Context())
	resp := post(t, ctx, srv, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true}`)
	br := bufio.NewReader(resp.Body)
	var got []string
	for len(got) < 3 { // role chunk and two tokens
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if d, ok := strings.CutPrefix(strings.TrimSpace(l), "data: "); ok {
			got = append(got, d)
		}
	}
	if !strings.Contains(got[2], fakellm.Token(2)) {
		t.Fatalf("chunks %q", got)
	}
	if l, err := br.ReadString('\n'); err != nil || l != "\n" {
		t.Fatalf("after the second token %q, %v; want its blank line", l, err)
	}
	time.Sleep(20 * time.Millisecond) // a stalled stream sends nothing more
	if br.Buffered() != 0 || fake.InFlight() != 1 {
		t.Fatalf("buffered %d in flight %d: the stream did not stall", br.Buffered(), fake.InFlight())
	}
	stop()
	testenv.Eventually(t, 5*time.Second, func() bool { return fake.Disconnects() == 1 && fake.InFlight() == 0 }, "the hang did not end with the client")
}

func TestCloseEndsHangingStreams(t *testing.T) {
	t.Parallel()
	fake, srv := serve(t, fakellm.Config{Tokens: 10, HangAfter: 1})
	resp := post(t, t.Context(), srv, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true}`)
	testenv.Eventually(t, 5*time.Second, func() bool { return fake.InFlight() == 1 }, "no request in flight")
	fake.Close()
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return fake.InFlight() == 0 }, "Close did not end the stream")
	if fake.Disconnects() != 0 {
		t.Fatalf("Close counted %d disconnects", fake.Disconnects())
	}
}
