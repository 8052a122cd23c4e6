package httpapi_test

import (
	"bufio"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/httpapi"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/kinds"
)

// TestSlowBodyGets408 trickles a submit body one byte at a time, for as
// long as the server lets it: the server answers 408 once BodyTimeout has
// passed, instead of waiting for the body with no limit.
func TestSlowBodyGets408(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *httpapi.Config) { c.BodyTimeout = 300 * time.Millisecond })
	conn, err := net.Dial("tcp", strings.TrimPrefix(f.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"kind":"echo","input":{"pad":"` + strings.Repeat("x", 1000) + `"}}`
	if _, err := conn.Write([]byte("POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + acmeKey +
		"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	answered := make(chan *http.Response, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err == nil {
			answered <- resp
		}
		close(answered)
	}()
	deadline := time.After(30 * time.Second)
	for i := 0; ; i++ {
		select {
		case resp, ok := <-answered:
			if !ok {
				t.Fatal("the connection closed without an answer")
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestTimeout || resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("answer %d %s, want a 408 problem", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			return
		case <-deadline:
			t.Fatal("no answer after 30s of a trickled body: the server waits for it with no limit")
		case <-time.After(100 * time.Millisecond):
		}
		if i < len(body)-1 { // never the last byte
			_, _ = conn.Write([]byte{body[i]})
		}
	}
}

// TestSleepInputCheckedAtSubmit: a sleep tick under 100ms, which would
// loop on Redis writes, and a notify_url outside LEASEHOLD_NOTIFY_ALLOW,
// which would make a worker call into the operator's network, are
// refused at submit, naming the field, and nothing is written.
func TestSleepInputCheckedAtSubmit(t *testing.T) {
	t.Parallel()
	allow, err := kinds.ParseNotifyAllow("https://hooks.example.com/leasehold/")
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, func(c *httpapi.Config) { c.NotifyAllow = allow })
	for body, field := range map[string]string{
		`{"kind":"sleep","input":{"tick":"1ns"}}`:                                                  "input.tick",
		`{"kind":"sleep","input":{"tick":"99ms"}}`:                                                 "input.tick",
		`{"kind":"sleep","input":{"tick":"0s"}}`:                                                   "input.tick",
		`{"kind":"sleep","input":{"notify_url":"http://169.254.169.254/latest/meta-data/"}}`:       "input.notify_url",
		`{"kind":"sleep","input":{"notify_url":"http://127.0.0.1:6379/"}}`:                         "input.notify_url",
		`{"kind":"sleep","input":{"notify_url":"https://hooks.example.com/leasehold/../admin"}}`:   "input.notify_url",
		`{"kind":"sleep","input":{"notify_url":"https://hooks.example.com.evil.net/leasehold/"}}`:  "input.notify_url",
		`{"kind":"sleep","input":{"notify_url":"https://hooks.example.com@evil.net/leasehold/"}}`:  "input.notify_url",
		`{"kind":"sleep","input":{"duration":"5s","tick":"1s","notify_url":"file:///etc/passwd"}}`: "input.notify_url",
		`{"kind":"sleep","input":{"duration":"-1s"}}`:                                              "input.duration",
		`{"kind":"sleep","input":{"fail_attempts":-1}}`:                                            "input.fail_attempts",
		`{"kind":"sleep","input":{"tick":"1s","extra":1}}`:                                         "input",
	} {
		expectProblem(t, f.do(request{method: http.MethodPost, path: "/v1/jobs", key: acmeKey, body: body}), http.StatusBadRequest, field)
	}
	if keys := f.written(); len(keys) > 0 {
		t.Fatalf("wrote %v", keys)
	}
	f.submit(acmeKey, `{"kind":"sleep","input":{"tick":"100ms","notify_url":"https://hooks.example.com/leasehold/tick"}}`)
	f.submit(acmeKey, `{"kind":"other","input":{"tick":"1ns","notify_url":"http://169.254.169.254/"}}`) // not ours to judge
}

// TestChatInputCheckedAtSubmit: an llm.chat input its handler would
// refuse (no model, no message, a bad max_tokens or temperature) is a 400
// naming the field, as the handler's parser names it; so is a max_tokens
// that takes the estimate past its bound (2^63-1 would wrap it
// negative). Nothing is written.
func TestChatInputCheckedAtSubmit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	for body, field := range map[string]string{
		`{"kind":"llm.chat"}`:                                                                         "input.model",
		`{"kind":"llm.chat","input":{` + msgs + `}}`:                                                  "input.model",
		`{"kind":"llm.chat","input":{"model":"m"}}`:                                                   "input.messages",
		`{"kind":"llm.chat","input":{"model":"m","messages":[{"content":"hi"}]}}`:                     "input.messages[0].role",
		`{"kind":"llm.chat","input":{"model":"m","messages":[{"role":"user"}]}}`:                      "input.messages[0].content",
		`{"kind":"llm.chat","input":{"model":"m",` + msgs + `,"max_tokens":0}}`:                       "input.max_tokens",
		`{"kind":"llm.chat","input":{"model":"m",` + msgs + `,"max_tokens":9223372036854775807}}`:     "input.max_tokens",
		`{"kind":"llm.chat","input":{"model":"m",` + msgs + `,"max_tokens":1000000000}}`:              "input.max_tokens",
		`{"kind":"llm.chat","input":{"model":"m",` + msgs + `,"max_tokens":99999999999999999999999}}`: "input.max_tokens",
		`{"kind":"llm.chat","input":{"model":"m",` + msgs + `,"temperature":3}}`:                      "input.temperature",
		`{"kind":"llm.chat","input":{"model":"m",` + msgs + `,"top_p":1}}`:                            "input",
	} {
		expectProblem(t, f.do(request{method: http.MethodPost, path: "/v1/jobs", key: acmeKey, body: body}), http.StatusBadRequest, field)
	}
	if keys := f.written(); len(keys) > 0 {
		t.Fatalf("wrote %v", keys)
	}
	f.submit(acmeKey, `{"kind":"llm.chat","input":{"model":"m",`+msgs+`,"max_tokens":999999990}}`)
}

// TestLookAlikeInputKeysGet400: an input whose keys differ only in case
// could run one model while the API keyed another.
func TestLookAlikeInputKeysGet400(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for model, field := range map[string]string{
		`"gpt-3.5"`: "input",
		`" "`:       "input.model", // the handler's parser reads the last, a blank
	} {
		expectProblem(t, f.do(request{method: http.MethodPost, path: "/v1/jobs", key: acmeKey,
			body: `{"kind":"llm.chat","input":{"model":"gpt-4o","MODEL":` + model + `,"messages":[{"role":"user","content":"hi"}]}}`}),
			http.StatusBadRequest, field)
	}
	if keys := f.written(); len(keys) > 0 {
		t.Fatalf("wrote %v", keys)
	}
}

// TestStreamsOfOneTenantDoNotStarveTheOthers: tenant A holds hundreds of
// event streams, each in XREAD BLOCK, while tenant B's submit and get
// still succeed; A's streams and waits past its cap get 429 with
// Retry-After, and a slot is free again when a stream ends.
func TestStreamsOfOneTenantDoNotStarveTheOthers(t *testing.T) {
	t.Parallel()
	const maxStreams = 200
	blocking := redis.NewClient(&redis.Options{Addr: testenv.Redis(t).Addr(), PoolSize: maxStreams + 10, ContextTimeoutEnabled: true})
	t.Cleanup(func() { blocking.Close() })
	f := newFixture(t, func(c *httpapi.Config) {
		// A stream notices its client left when its XREAD BLOCK ends: at
		// the next keep-alive.
		c.Blocking, c.MaxStreams, c.KeepAlive = blocking, maxStreams, 500*time.Millisecond
	})
	idle := f.submit(acmeKey, `{"kind":"nobody-serves-this"}`) // stays queued: its stream never ends

	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	open := func(key, path string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, f.url+path, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	var held []*http.Response
	t.Cleanup(func() {
		for _, resp := range held {
			resp.Body.Close()
		}
	})
	for i := range maxStreams + 50 {
		resp := open(acmeKey, "/v1/jobs/"+idle.ID+"/events")
		switch {
		case i < maxStreams && resp.StatusCode == http.StatusOK:
			held = append(held, resp)
		case i >= maxStreams && resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != "":
			resp.Body.Close()
		default:
			resp.Body.Close()
			t.Fatalf("stream %d: %s (Retry-After %q)", i, resp.Status, resp.Header.Get("Retry-After"))
		}
	}
	// Past the cap a wait is refused too.
	if resp := open(acmeKey, "/v1/jobs/"+idle.ID+"?wait=30s"); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a wait past the cap: %s", resp.Status)
	} else {
		resp.Body.Close()
	}

	// Tenant B is served: submit, get, and a wait of its own.
	for range 20 {
		j := f.submit(globexKey, `{"kind":"echo"}`)
		if resp := f.get(globexKey, "/v1/jobs/"+j.ID); resp.StatusCode != http.StatusOK {
			t.Fatalf("tenant B's get: %s %s", resp.Status, resp.body)
		}
	}
	other := f.submit(globexKey, `{"kind":"nobody-serves-this"}`)
	if resp := f.get(globexKey, "/v1/jobs/"+other.ID+"?wait=50ms"); resp.StatusCode != http.StatusOK {
		t.Fatalf("tenant B's wait: %s %s", resp.Status, resp.body)
	}

	// A stream that ends frees its slot (within a keep-alive interval).
	held[0].Body.Close()
	held = held[1:]
	testenv.Eventually(t, 10*time.Second, func() bool {
		resp := open(acmeKey, "/v1/jobs/"+idle.ID+"/events")
		if resp.StatusCode == http.StatusOK {
			held = append(held, resp)
			return true
		}
		resp.Body.Close()
		return false
	}, "the slot of a closed stream was never freed")
}

// TestLimitsHideOtherTenantsKeys: GET /v1/limits shows a tenant every key
// but another tenant's own; the admin sees them all.
func TestLimitsHideOtherTenantsKeys(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for key, limit := range map[string]string{"tenant:acme": "5", "tenant:globex": "7", "tenant:%2A": "10", "model:x": "3"} {
		if resp := f.putLimit(adminKey, key, `{"limit": `+limit+`}`); resp.StatusCode != http.StatusOK {
			t.Fatalf("put %s: %s %s", key, resp.Status, resp.body)
		}
	}
	names := func(key string) []string {
		var out []string
		for _, l := range f.limits(key) {
			out = append(out, l.Key)
		}
		slices.Sort(out)
		return out
	}
	for key, want := range map[string][]string{
		acmeKey:   {"model:x", "tenant:*", "tenant:acme"},
		globexKey: {"model:x", "tenant:*", "tenant:globex"},
		adminKey:  {"model:x", "tenant:*", "tenant:acme", "tenant:globex"},
	} {
		if got := names(key); !slices.Equal(got, want) {
			t.Errorf("%s lists %v, want %v", key, got, want)
		}
	}
}

// TestOnlyConfiguredQueuesAcceptJobs: a tenant cannot create queues: a
// queue the API was not configured with is a 400 naming queue, and
// nothing is written.
func TestOnlyConfiguredQueuesAcceptJobs(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *httpapi.Config) { c.Queues = []string{"default", "batch"} })
	for _, body := range []string{`{"kind":"echo","queue":"mine"}`, `{"kind":"echo","queue":"Default"}`} {
		expectProblem(t, f.do(request{method: http.MethodPost, path: "/v1/jobs", key: acmeKey, body: body}), http.StatusBadRequest, "queue")
	}
	if keys := f.written(); len(keys) > 0 {
		t.Fatalf("wrote %v", keys)
	}
	f.submit(acmeKey, `{"kind":"echo","queue":"batch"}`)
	f.submit(acmeKey, `{"kind":"echo"}`)

	only := newFixture(t, func(c *httpapi.Config) { c.Queues = []string{"batch"} })
	expectProblem(t, only.do(request{method: http.MethodPost, path: "/v1/jobs", key: acmeKey, body: `{"kind":"echo"}`}), http.StatusBadRequest, "queue")
	if _, err := httpapi.New(httpapi.Config{Redis: f.rdb, Keys: mustKeys(t), Queues: []string{"no spaces"}}); err == nil {
		t.Error("New accepted a queue name that cannot be one")
	}
}

func mustKeys(t *testing.T) httpapi.Keys {
	t.Helper()
	k, err := httpapi.ParseKeys(apiKeys)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
