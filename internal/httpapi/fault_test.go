package httpapi_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/cancel"
	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/httpapi"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// With Redis down every route that needs it answers 503 with Retry-After,
// quickly, and never 429 or 500; readiness fails; liveness does not. What
// was accepted before is there after a restart.
func TestRedisDown(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	f := newFixtureOn(t, srv.Addr(), testenv.NATS(t).Conn(t))
	accepted := f.submit(acmeKey, `{"kind": "echo", "input": {"keep": "me"}}`)

	srv.Kill(t)
	requests := []request{
		{method: http.MethodPost, path: "/v1/jobs", body: `{"kind": "echo"}`},
		{method: http.MethodPost, path: "/v1/jobs", body: `{"kind": "echo"}`, header: http.Header{"Idempotency-Key": {"k"}}},
		{method: http.MethodGet, path: "/v1/jobs/" + accepted.ID},
		{method: http.MethodGet, path: "/v1/jobs/" + accepted.ID + "?wait=1s"},
		{method: http.MethodGet, path: "/v1/jobs"},
		{method: http.MethodPost, path: "/v1/jobs/" + accepted.ID + "/cancel"},
		{method: http.MethodGet, path: "/v1/jobs/" + accepted.ID + "/events"},
		{method: http.MethodGet, path: "/v1/queues"},
		{method: http.MethodGet, path: "/readyz"},
	}
	for _, r := range requests {
		r.key = acmeKey
		start := time.Now()
		resp := f.do(r)
		elapsed := time.Since(start)
		expectProblem(t, resp, http.StatusServiceUnavailable, "")
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || s < 1 {
			t.Errorf("%s %s: Retry-After %q", r.method, r.path, resp.Header.Get("Retry-After"))
		}
		// The one number the contract names: an answer within 5 s.
		if elapsed > 5*time.Second {
			t.Errorf("%s %s: answered after %v", r.method, r.path, elapsed)
		}
	}
	if resp := f.get("", "/healthz"); resp.StatusCode != http.StatusOK {
		t.Errorf("healthz with Redis down: %s", resp.Status)
	}
	// Validation does not need Redis: a bad request is still a 400.
	expectProblem(t, f.do(request{method: http.MethodPost, path: "/v1/jobs", key: acmeKey, body: `{"kind": 1}`}), 400, "kind")

	srv.Restart(t)
	testenv.Eventually(t, 10*time.Second, func() bool {
		return f.get("", "/readyz").StatusCode == http.StatusOK
	}, "not ready after Redis came back")
	if j := f.job(accepted.ID); j.State != job.StateQueued || string(j.Metadata) != string(accepted.Metadata) {
		t.Errorf("after the restart: %+v", j)
	}
	f.submit(acmeKey, `{"kind": "echo"}`)
}

// A Redis that accepts connections but never answers is as good as down:
// requests are answered 503 after the Redis timeout, not held.
func TestRedisSilent(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	f := newFixtureOn(t, silentServer(t), testenv.NATS(t).Conn(t), func(c *httpapi.Config) { c.RedisTimeout = timeout })
	for _, r := range []request{
		{method: http.MethodPost, path: "/v1/jobs", body: `{"kind": "echo"}`},
		{method: http.MethodGet, path: "/v1/jobs/0192a000-0000-7000-8000-000000000000"},
		{method: http.MethodGet, path: "/v1/jobs/0192a000-0000-7000-8000-000000000000/events"},
		{method: http.MethodGet, path: "/v1/jobs"},
		{method: http.MethodGet, path: "/readyz"},
	} {
		r.key = acmeKey
		start := time.Now()
		resp := f.do(r)
		expectProblem(t, resp, http.StatusServiceUnavailable, "")
		if resp.Header.Get("Retry-After") == "" {
			t.Errorf("%s %s: no Retry-After", r.method, r.path)
		}
		if elapsed := time.Since(start); elapsed > 5*time.Second {
			t.Errorf("%s %s: answered after %v", r.method, r.path, elapsed)
		}
	}
}

// silentServer accepts TCP connections and never answers; it returns its
// address.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

// NATS is only the fast path: with it down, submissions are accepted, the
// API stays ready, and a cancel of a running job still reaches its handler
// (through the flag and the job record its heartbeat reads).
func TestNATSDown(t *testing.T) {
	t.Parallel()
	n := testenv.StartNATS(t)
	f := newFixtureOn(t, testenv.Redis(t).Addr(), n.Conn(t))
	causes := make(chan error, 1)
	f.startWorker(map[string]execution.Handler{"block": func(ctx context.Context, _ *execution.Execution) (any, error) {
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil, context.Cause(ctx)
	}})
	running := f.submit(acmeKey, `{"kind": "block"}`)
	f.awaitState(running.ID, job.StateRunning)

	n.Stop(t)
	queued := f.submit(acmeKey, `{"kind": "echo"}`) // no worker serves echo
	if resp := f.get("", "/readyz"); resp.StatusCode != http.StatusOK {
		t.Errorf("readyz with NATS down: %s %s", resp.Status, resp.body)
	}
	for _, id := range []string{queued.ID, running.ID} {
		if resp := f.cancel(acmeKey, id); resp.StatusCode != http.StatusAccepted {
			t.Errorf("cancel with NATS down: %s %s", resp.Status, resp.body)
		}
	}
	select {
	case cause := <-causes:
		if !errors.Is(cause, cancel.ErrRequested) {
			t.Errorf("handler stopped with %v", cause)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the running job's handler was not cancelled without NATS")
	}
	f.awaitState(running.ID, job.StateCancelled)
}
