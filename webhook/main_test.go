package webhook_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/internal/testsignal"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/kinds"
	"github.com/leasehold/leasehold/webhook"
)

func TestMain(m *testing.M) { testenv.Main(m, nil) }

// secret is acme's secret in the tests, and key its key.
const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func key(t testing.TB) []byte {
	t.Helper()
	k, err := base64.StdEncoding.DecodeString(secret[len("whsec_"):])
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// fixture is a job store, a worker serving the kinds "ok", "fail", "wait"
// (which waits for a signal) and "block" (which runs until its context
// ends), and a drainer config, on a
// key prefix of their own.
type fixture struct {
	rdb    redis.UniversalClient
	jobs   *store.Store
	keys   keys.Space
	prefix string
	cfg    webhook.Config
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	return newFixtureOn(t, testenv.Redis(t).Client(t))
}

// newFixtureOn is newFixture on rdb (a Redis Cluster's client, say).
func newFixtureOn(t testing.TB, rdb redis.UniversalClient) *fixture {
	t.Helper()
	prefix := testenv.Prefix(t)
	jobs := store.New(rdb, store.Config{Prefix: prefix})
	return &fixture{rdb: rdb, jobs: jobs, keys: keys.New(prefix), prefix: prefix, cfg: webhook.Config{
		Prefix: prefix, Queues: []string{job.DefaultQueue},
		Policy:  webhook.Policy{Allow: kinds.NotifyAllow{Loopback: true}, Secrets: webhook.Secrets{"acme": {key(t)}, "beta": {key(t)}}},
		Backoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, Timeout: 2 * time.Second, Poll: 10 * time.Millisecond,
	}}
}

// worker runs a worker until the test ends.
func (fx *fixture) worker(t *testing.T, cfg execution.Config) *execution.Worker {
	t.Helper()
	cfg.Prefix = fx.prefix
	w, err := execution.NewWorker(fx.rdb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("ok", func(context.Context, *execution.Execution) (any, error) { return map[string]bool{"ok": true}, nil })
	w.Handle("fail", func(context.Context, *execution.Execution) (any, error) {
		return nil, &job.Error{Code: job.CodeHandlerError, Message: "no"}
	})
	w.Handle("wait", func(context.Context, *execution.Execution) (any, error) {
		return nil, execution.Wait("approval", time.Hour)
	})
	w.Handle("block", func(ctx context.Context, _ *execution.Execution) (any, error) {
		<-ctx.Done()
		return nil, context.Cause(ctx)
	})
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })
	return w
}

// drain runs a drainer of cfg until the test ends.
func (fx *fixture) drain(t *testing.T, cfg webhook.Config) *webhook.Drainer {
	t.Helper()
	d, err := webhook.New(fx.rdb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })
	return d
}

// ended submits sub for tenant, waits for the job to end, and returns it
// with a drainer the test runs by hand (RunOnce) and the signal of its
// tries.
func (fx *fixture) ended(t *testing.T, tenant string, sub job.Submission) (job.Job, *webhook.Drainer, *testsignal.Signal) {
	t.Helper()
	j := fx.submit(t, tenant, sub)
	testenv.Eventually(t, 10*time.Second, func() bool { return fx.get(t, j.ID).State.Terminal() }, "job never ended")
	d, err := webhook.New(fx.rdb, fx.cfg)
	if err != nil {
		t.Fatal(err)
	}
	tried := testsignal.New()
	d.OnTry(tried)
	return j, d, tried
}

func (fx *fixture) submit(t *testing.T, tenant string, sub job.Submission) job.Job {
	t.Helper()
	j, _, err := fx.jobs.Submit(context.Background(), tenant, sub, "")
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func (fx *fixture) get(t *testing.T, id string) job.Job {
	t.Helper()
	j, err := fx.jobs.Get(context.Background(), "", id, true)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// waitWebhook waits until job id's delivery is in state.
func (fx *fixture) waitWebhook(t *testing.T, id string, state job.WebhookState) job.Job {
	t.Helper()
	var j job.Job
	testenv.Eventually(t, 20*time.Second, func() bool {
		j = fx.get(t, id)
		return j.Webhook != nil && j.State.Terminal() && j.Webhook.State == state && j.Webhook.ID != ""
	}, "job %s: webhook never %s: %+v", id, state, &j)
	return j
}

// request is one request a receiver got.
type request struct {
	header http.Header
	body   []byte
}

// receiver is an HTTP server that records its requests and answers the
// nth (0-based) with answer(n).
type receiver struct {
	*httptest.Server
	mu   sync.Mutex
	got  []request
	seen chan struct{}
}

func newReceiver(t *testing.T, answer func(n int, w http.ResponseWriter, r *http.Request)) *receiver {
	t.Helper()
	rc := &receiver{seen: make(chan struct{}, 100)}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		n := len(rc.got)
		rc.got = append(rc.got, request{header: r.Header.Clone(), body: b})
		rc.mu.Unlock()
		select {
		case rc.seen <- struct{}{}:
		default:
		}
		answer(n, w, r)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) requests() []request {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]request(nil), rc.got...)
}

func status(code int) func(int, http.ResponseWriter, *http.Request) {
	return func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(code) }
}

func withWebhook(kind, url string) job.Submission {
	return job.Submission{Kind: kind, Webhook: &job.WebhookTarget{URL: url}, MaxAttempts: 1}
}

func decodeJob(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("body %s: %v", b, err)
	}
	return m
}
