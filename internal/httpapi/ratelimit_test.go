package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/httpapi"
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/ratelimit"
)

// withRate gives the API a token bucket of rate on its own Redis and
// prefix; wrap, when given, wraps it (Shadow, Fallback).
func withRate(t *testing.T, rate string, wrap ...func(ratelimit.Limiter) ratelimit.Limiter) func(*httpapi.Config) {
	return func(c *httpapi.Config) { c.Rate = bucket(t, c.Redis, c.Prefix, rate, wrap...) }
}

func bucket(t *testing.T, rdb redis.UniversalClient, prefix, rate string, wrap ...func(ratelimit.Limiter) ratelimit.Limiter) ratelimit.Limiter {
	t.Helper()
	r, err := ratelimit.ParseRate(rate)
	if err != nil {
		t.Fatal(err)
	}
	var l ratelimit.Limiter
	if l, err = ratelimit.NewTokenBucket(store.New(rdb, store.Config{Prefix: prefix}), ratelimit.Config{Rate: r}); err != nil {
		t.Fatal(err)
	}
	for _, w := range wrap {
		l = w(l)
	}
	return l
}

// postJob submits body as key's tenant, with an Idempotency-Key when idem
// is not "".
func (f *fixture) postJob(key, body, idem string) response {
	f.t.Helper()
	r := request{method: http.MethodPost, path: "/v1/jobs", key: key, body: body}
	if idem != "" {
		r.header = http.Header{"Idempotency-Key": {idem}}
	}
	return f.do(r)
}

// expectRateHeaders checks the RateLimit and RateLimit-Policy headers of a
// limited answer.
func expectRateHeaders(t *testing.T, resp response, policy string) {
	t.Helper()
	if got := resp.Header.Get("RateLimit-Policy"); got != policy {
		t.Errorf("%s: RateLimit-Policy %q, want %q", resp.Status, got, policy)
	}
	if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, `"default";r=`) {
		t.Errorf("%s: RateLimit %q", resp.Status, got)
	}
}

// expectTooMany checks a 429: a problem with Retry-After of at least 1
// second and the RateLimit headers.
func expectTooMany(t *testing.T, resp response, policy string) {
	t.Helper()
	expectProblem(t, resp, http.StatusTooManyRequests, "")
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || s < 1 {
		t.Errorf("429: Retry-After %q", resp.Header.Get("Retry-After"))
	}
	expectRateHeaders(t, resp, policy)
	if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, `"default";r=0;`) {
		t.Errorf("429: RateLimit %q, want none remaining", got)
	}
}

// A burst of concurrent submissions over the rate: exactly the burst is
// created, the rest are 429 with Retry-After, and another tenant's quota is
// its own.
func TestRateLimitBurst(t *testing.T) {
	t.Parallel()
	const (
		burst    = 5
		requests = 20
		policy   = `"default";q=1;w=3600;burst=5`
	)
	f := newFixture(t, withRate(t, "1/h:5")) // next to no refill while the test runs

	reqs := make([]*http.Request, requests)
	for i := range reqs {
		reqs[i] = f.newRequest(request{method: http.MethodPost, path: "/v1/jobs", key: acmeKey, body: `{"kind": "echo"}`})
	}
	resps := make([]response, requests)
	var wg sync.WaitGroup
	for i, req := range reqs {
		wg.Go(func() {
			resp, err := f.client.Do(req)
			if err != nil {
				t.Errorf("submit: %v", err)
				return
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Errorf("read: %v", err)
			}
			resps[i] = response{resp, body}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	created := 0
	for _, resp := range resps {
		switch resp.StatusCode {
		case http.StatusCreated:
			created++
			expectRateHeaders(t, resp, policy)
			if resp.Header.Get("Retry-After") != "" {
				t.Errorf("201 with Retry-After %q", resp.Header.Get("Retry-After"))
			}
		default:
			expectTooMany(t, resp, policy)
		}
	}
	if created != burst {
		t.Errorf("%d of %d submissions created, want the burst of %d", created, requests, burst)
	}

	// Another tenant has its own bucket.
	for range burst {
		f.submit(globexKey, `{"kind": "echo"}`)
	}
	expectTooMany(t, f.postJob(globexKey, `{"kind": "echo"}`, ""), policy)
	expectTooMany(t, f.postJob(acmeKey, `{"kind": "echo"}`, ""), policy)
}

// A signal spends a unit of the tenant's rate, as a submission does: past
// it, 429 and the job keeps no signal; bad bodies and the admin's signals
// spend nothing, and another tenant's rate is its own.
func TestRateLimitSignal(t *testing.T) {
	t.Parallel()
	const policy = `"default";q=1;w=3600;burst=3`
	f := newFixture(t, withRate(t, "1/h:3"))
	j := f.submit(acmeKey, `{"kind": "echo"}`)
	signal := func(key, body string) response {
		return f.do(request{method: http.MethodPost, path: "/v1/jobs/" + j.ID + "/signal", key: key, body: body})
	}
	expectProblem(t, signal(acmeKey, `{"data":1}`), http.StatusBadRequest, "name")
	for i, key := range []string{adminKey, acmeKey, acmeKey} {
		resp := signal(key, fmt.Sprintf(`{"name":"s%d"}`, i))
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("signal within the rate: %s %s", resp.Status, resp.body)
		}
		if key == acmeKey {
			expectRateHeaders(t, resp, policy)
		}
	}
	expectTooMany(t, signal(acmeKey, `{"name":"late"}`), policy)
	// The refused signal was not kept: the admin fills the job's room
	// for kept signals with as many as it had left.
	kept := 3
	for ; kept <= job.MaxKeptSignals; kept++ {
		if resp := signal(adminKey, fmt.Sprintf(`{"name":"s%d"}`, kept)); resp.StatusCode != http.StatusAccepted {
			break
		}
	}
	if kept != job.MaxKeptSignals {
		t.Errorf("the job kept %d signals, want %d", kept, job.MaxKeptSignals)
	}
	f.submit(globexKey, `{"kind": "echo"}`)
}

// Requests the API refuses on their own merits spend nothing, and are told
// what to fix rather than to wait.
func TestRateLimitInvalidSpendsNothing(t *testing.T) {
	t.Parallel()
	const policy = `"default";q=1;w=3600;burst=1`
	f := newFixture(t, withRate(t, "1/h:1"))
	bad := []struct {
		r      request
		status int
	}{
		{request{body: `{"kind": 1}`}, http.StatusBadRequest},
		{request{body: `{"kind": "echo", "nope": true}`}, http.StatusBadRequest},
		{request{body: `{"kind": "echo"`}, http.StatusBadRequest},
		{request{body: `{"kind": "Not A Kind"}`}, http.StatusBadRequest},
		{request{body: `{"kind": "echo", "max_attempts": 101}`}, http.StatusBadRequest},
		{request{body: `{"kind": "echo", "timeout": "-1s"}`}, http.StatusBadRequest},
		{request{body: `{"kind": "echo"}`, header: http.Header{"Idempotency-Key": {"tab\tkey"}}}, http.StatusBadRequest},
		{request{body: `{"kind": "echo"}`, header: http.Header{"Idempotency-Key": {strings.Repeat("k", 256)}}}, http.StatusBadRequest},
		{request{body: `{"kind": "echo"}`, header: http.Header{"Content-Type": {"text/plain"}}}, http.StatusUnsupportedMediaType},
	}
	for range 2 { // more bad requests than the burst
		for _, b := range bad {
			b.r.method, b.r.path, b.r.key = http.MethodPost, "/v1/jobs", acmeKey
			resp := f.do(b.r)
			expectProblem(t, resp, b.status, "")
			if resp.Header.Get("RateLimit") != "" {
				t.Errorf("%s for %s counted: RateLimit %q", resp.Status, b.r.body, resp.Header.Get("RateLimit"))
			}
		}
	}
	f.submit(acmeKey, `{"kind": "echo"}`) // the one token is still there
	expectTooMany(t, f.postJob(acmeKey, `{"kind": "echo"}`, ""), policy)
}

// A replay of an Idempotency-Key creates nothing and spends nothing, even
// with the quota spent; a new submission is still refused.
func TestRateLimitIdempotentReplayIsFree(t *testing.T) {
	t.Parallel()
	const policy = `"default";q=1;w=3600;burst=1`
	f := newFixture(t, withRate(t, "1/h:1"))
	const body = `{"kind": "echo", "input": {"n": 1}}`
	first := f.postJob(acmeKey, body, "order-1")
	if first.StatusCode != http.StatusCreated {
		t.Fatalf("first: %s %s", first.Status, first.body)
	}
	expectRateHeaders(t, first, policy)
	for range 3 {
		replay := f.postJob(acmeKey, body, "order-1")
		if replay.StatusCode != http.StatusOK {
			t.Fatalf("replay: %s %s", replay.Status, replay.body)
		}
	}
	expectTooMany(t, f.postJob(acmeKey, body, ""), policy)
	expectTooMany(t, f.postJob(acmeKey, body, "order-2"), policy)
	// The same key with another body is still a 422, not a 429.
	expectProblem(t, f.postJob(acmeKey, `{"kind": "echo"}`, "order-1"), http.StatusUnprocessableEntity, "Idempotency-Key")
}

// records is a slog handler that keeps the messages it is given.
type records struct {
	mu   sync.Mutex
	msgs []string
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Message)
	return nil
}

func (r *records) count(prefix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.msgs {
		if strings.HasPrefix(m, prefix) {
			n++
		}
	}
	return n
}

// In shadow mode every submission is created, and what the limit would
// have refused is logged.
func TestRateLimitShadow(t *testing.T) {
	t.Parallel()
	log := &records{}
	f := newFixture(t, withRate(t, "1/h:2", func(l ratelimit.Limiter) ratelimit.Limiter {
		s, err := ratelimit.Shadow(l, ratelimit.ShadowConfig{Logger: slog.New(log)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}))
	for i := range 5 {
		resp := f.postJob(acmeKey, `{"kind": "echo"}`, "")
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("submission %d in shadow mode: %s %s", i, resp.Status, resp.body)
		}
		expectRateHeaders(t, resp, `"default";q=1;w=3600;burst=2`)
	}
	if n := log.count("ratelimit: shadow mode let through"); n != 3 {
		t.Errorf("%d would-reject decisions logged, want 3", n)
	}
}

// With the limiter's Redis down, a submission is a 503 with Retry-After,
// never a 429; with a fallback, the per-process rate decides, and at most
// its budget is admitted.
func TestRateLimitRedisDown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		fallback string // "" = none
	}{
		{"no fallback", ""},
		{"fallback", "1/h:2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The jobs live on the shared Redis; only the limiter's dies, so
			// what the limiter does is all that differs.
			srv := testenv.StartRedis(t)
			limiterRDB := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
			t.Cleanup(func() { limiterRDB.Close() })
			f := newFixture(t, func(c *httpapi.Config) {
				c.Rate = bucket(t, limiterRDB, c.Prefix, "1/h:100", func(l ratelimit.Limiter) ratelimit.Limiter {
					if tc.fallback == "" {
						return l
					}
					r, err := ratelimit.ParseRate(tc.fallback)
					if err != nil {
						t.Fatal(err)
					}
					fb, err := ratelimit.Fallback(l, ratelimit.FallbackConfig{Rate: r, Logger: c.Logger})
					if err != nil {
						t.Fatal(err)
					}
					return fb
				})
			})
			f.submit(acmeKey, `{"kind": "echo"}`)

			srv.Kill(t)
			created := 0
			for range 5 {
				resp := f.postJob(acmeKey, `{"kind": "echo"}`, "")
				switch {
				case tc.fallback == "":
					expectProblem(t, resp, http.StatusServiceUnavailable, "")
					if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || s < 1 {
						t.Errorf("503: Retry-After %q", resp.Header.Get("Retry-After"))
					}
					if resp.Header.Get("RateLimit") != "" {
						t.Errorf("503 with RateLimit %q", resp.Header.Get("RateLimit"))
					}
				case resp.StatusCode == http.StatusCreated:
					created++
					expectRateHeaders(t, resp, `"default";q=1;w=3600;burst=2`)
				default:
					expectTooMany(t, resp, `"default";q=1;w=3600;burst=2`)
				}
			}
			if tc.fallback != "" && created != 2 {
				t.Errorf("%d created on the fallback, want its burst of 2", created)
			}
		})
	}
}
