package httpapi_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/httpapi"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// POST /v1/jobs/{id}/signal: a waiting job resumes with the signal at
// once (202, queued); bad bodies are 400 and change nothing; another
// tenant gets 404; an ended job 409 with the job.
func TestSignalEndpoint(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.startWorker(map[string]execution.Handler{"approve": func(ctx context.Context, e *execution.Execution) (any, error) {
		if s := e.Resume().Signal; s != nil {
			return s, nil
		}
		return nil, execution.Wait("approval", time.Hour)
	}})
	j := f.submit(acmeKey, `{"kind":"approve"}`)
	w := f.awaitState(j.ID, job.StateWaiting)
	if w.WaitingFor == nil || w.WaitingFor.Name != "approval" {
		t.Fatalf("waiting_for %+v", w.WaitingFor)
	}
	path := "/v1/jobs/" + j.ID + "/signal"
	post := func(key, body string) response {
		return f.do(request{method: http.MethodPost, path: path, key: key, body: body})
	}
	for body, field := range map[string]string{
		`{"data":{}}`:                   "name",
		`{"name":"Approval"}`:           "name",
		`{"name":"approval","extra":1}`: "extra",
		`{"name":7}`:                    "name",
		`{"name":"approval","data":"` + strings.Repeat("x", 70<<10) + `"}`: "data",
	} {
		expectProblem(t, post(acmeKey, body), http.StatusBadRequest, field)
	}
	expectProblem(t, post(acmeKey, `[`), http.StatusBadRequest, "")
	expectProblem(t, f.do(request{method: http.MethodPost, path: path, key: acmeKey, body: `{"name":"approval"}`,
		header: http.Header{"Content-Type": {"text/plain"}}}), http.StatusUnsupportedMediaType, "")
	expectProblem(t, post(globexKey, `{"name":"approval"}`), http.StatusNotFound, "")
	if got := f.job(j.ID); got.State != job.StateWaiting {
		t.Fatalf("bad signals moved the job to %s", got.State)
	}

	resp := post(acmeKey, `{"name":"approval","data":{"ok":true}}`)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("signal: %s %s", resp.Status, resp.body)
	}
	if got := decode[job.Job](t, resp); got.State != job.StateQueued && got.State != job.StateRunning {
		t.Fatalf("after the signal: %s, want queued", got.State)
	}
	done := f.awaitState(j.ID, job.StateSucceeded)
	if string(done.Result) != `{"name":"approval","data":{"ok":true},"timed_out":false}` {
		t.Fatalf("result %s", done.Result)
	}
	resp = post(adminKey, `{"name":"approval"}`)
	if resp.StatusCode != http.StatusConflict || decode[job.Job](t, resp).State != job.StateSucceeded {
		t.Fatalf("signal of an ended job: %s %s", resp.Status, resp.body)
	}
	expectProblem(t, post(acmeKey, `{"name":"approval"}`), http.StatusConflict, "")
}

// Signals race the waits across two API servers (each with its own Redis
// client, as two processes): 200 jobs, each signalled through one of them
// at a random moment before, during or after its handler decides to wait.
// Each job resumes exactly once, with its own data, and none is left
// waiting.
func TestSignalsFromTwoAPIServers(t *testing.T) {
	t.Parallel()
	a := newFixture(t)
	b := newFixture(t, func(c *httpapi.Config) {
		rdb := redis.NewClient(&redis.Options{Addr: testenv.Redis(t).Addr()})
		t.Cleanup(func() { rdb.Close() })
		store := store.New(rdb, store.Config{Prefix: a.prefix, OnlyLimitedKeys: true})
		c.Redis, c.Store, c.Prefix = rdb, store, a.prefix
	})
	var runs sync.Map // job id -> *atomic.Int32: executions after the wait
	a.startWorker(map[string]execution.Handler{"approve": func(ctx context.Context, e *execution.Execution) (any, error) {
		s := e.Resume().Signal
		if s == nil {
			time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
			return nil, execution.Wait("go", time.Hour)
		}
		n, _ := runs.LoadOrStore(e.JobID, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		return s.Data, nil
	}}, func(c *execution.Config) { c.Concurrency = 64 })
	const jobs = 200
	ids := make([]string, jobs)
	var sent sync.WaitGroup
	for i := range jobs {
		ids[i] = a.submit(acmeKey, `{"kind":"approve"}`).ID
		sent.Go(func() {
			time.Sleep(time.Duration(rand.IntN(20000)) * time.Microsecond)
			api := []*fixture{a, b}[i%2]
			resp := api.do(request{method: http.MethodPost, path: "/v1/jobs/" + ids[i] + "/signal", key: acmeKey,
				body: fmt.Sprintf(`{"name":"go","data":{"i":%d}}`, i)})
			if resp.StatusCode != http.StatusAccepted {
				t.Errorf("signal %d: %s %s", i, resp.Status, resp.body)
			}
		})
	}
	sent.Wait()
	for i, id := range ids {
		var j job.Job
		testenv.Eventually(t, 30*time.Second, func() bool {
			j = a.job(id)
			return j.State.Terminal()
		}, "job %d never ended: %s", i, lazyState(func() job.State { return j.State }))
		if want := fmt.Sprintf(`{"i":%d}`, i); j.State != job.StateSucceeded || string(j.Result) != want {
			t.Fatalf("job %d: %s with %s, want succeeded with %s", i, j.State, j.Result, want)
		}
		if n, ok := runs.Load(id); !ok || n.(*atomic.Int32).Load() != 1 {
			t.Fatalf("job %d resumed %v times, want once", i, n)
		}
	}
}

// lazyState prints the state f returns when the message is printed.
type lazyState func() job.State

func (l lazyState) String() string { return string(l()) }
