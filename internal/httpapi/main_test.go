package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/leasehold/leasehold/cancel"
	"github.com/leasehold/leasehold/docs"
	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/httpapi"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

func TestMain(m *testing.M) { testenv.Main(m, nil) }

// The fixture's API keys: two ordinary tenants and the admin.
const (
	acmeKey   = "acme-key-0123456789"
	globexKey = "globex-key-0123456789"
	adminKey  = "admin-key-0123456789"
	apiKeys   = "acme:" + acmeKey + ", globex:" + globexKey + ", admin:" + adminKey
)

// fixture is one test's API: an httptest server on its own key prefix and
// cancel subject, over a real Redis and a real NATS, with a client whose
// every response is checked against docs/openapi.yaml.
type fixture struct {
	t       *testing.T
	prefix  string
	subject string // the cancel subject of this fixture's Flags and workers
	rdb     redis.UniversalClient
	nc      *nats.Conn
	store   *store.Store
	url     string
	opsURL  string // the operations listener: /metrics, /healthz, /readyz
	client  *http.Client
	log     *slog.Logger
}

// newFixture runs the API on the shared Redis and NATS.
func newFixture(t *testing.T, configure ...func(*httpapi.Config)) *fixture {
	t.Helper()
	return newFixtureOn(t, testenv.Redis(t).Addr(), testenv.NATS(t).Conn(t), configure...)
}

// newFixtureOn runs the API on the Redis at addr and on nc.
func newFixtureOn(t *testing.T, addr string, nc *nats.Conn, configure ...func(*httpapi.Config)) *fixture {
	t.Helper()
	f := &fixture{t: t, prefix: testenv.Prefix(t), nc: nc}
	// Named, so a test can see this client's blocked XREADs in CLIENT LIST.
	rdb := redis.NewClient(&redis.Options{Addr: addr, ClientName: f.clientName(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	return f.start(rdb, configure...)
}

// newFixtureWith runs the API on rdb (a Sentinel's or a Cluster's client)
// and on nc.
func newFixtureWith(t *testing.T, rdb redis.UniversalClient, nc *nats.Conn, configure ...func(*httpapi.Config)) *fixture {
	t.Helper()
	f := &fixture{t: t, prefix: testenv.Prefix(t), nc: nc}
	return f.start(rdb, configure...)
}

func (f *fixture) start(rdb redis.UniversalClient, configure ...func(*httpapi.Config)) *fixture {
	t, nc := f.t, f.nc
	t.Helper()
	f.subject = "test.cancel." + strings.NewReplacer(":", ".").Replace(strings.TrimSuffix(f.prefix, ":"))
	f.log = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	f.rdb = rdb

	var err error
	f.store = store.New(rdb, store.Config{Prefix: f.prefix, OnlyLimitedKeys: true})
	flags, err := cancel.New(f.store, nc, cancel.Config{Subject: f.subject, Logger: f.log})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := httpapi.ParseKeys(apiKeys)
	if err != nil {
		t.Fatal(err)
	}
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		t.Fatal(err)
	}
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	t.Cleanup(func() { _ = meters.Shutdown(context.Background()) })

	cfg := httpapi.Config{
		Redis:         rdb,
		Store:         f.store,
		Flags:         flags,
		NATS:          nc,
		Prefix:        f.prefix,
		Keys:          keys,
		Logger:        f.log,
		MeterProvider: meters,
		Metrics:       promhttp.HandlerFor(registry, promhttp.HandlerOpts{}),
		Queues:        []string{"default", "batch", "gpu", "other", "idle"}, // the queues the tests use
	}
	for _, c := range configure {
		c(&cfg)
	}
	h, err := httpapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	f.url = ts.URL
	ops, err := httpapi.Ops(cfg)
	if err != nil {
		t.Fatal(err)
	}
	opsServer := httptest.NewServer(ops)
	t.Cleanup(opsServer.Close)
	f.opsURL = opsServer.URL
	f.client = &http.Client{Transport: newValidator(t, ts.URL, ts.Client().Transport)}
	return f
}

func (f *fixture) clientName() string {
	return "httpapi-test-" + strings.ReplaceAll(f.prefix, ":", "-")
}

// request is one call to the API.
type request struct {
	method, path, key string
	body              string
	header            http.Header // added to the defaults
}

// response is what came back, the body read whole.
type response struct {
	*http.Response
	body []byte
}

// do sends r, with Content-Type application/json when it has a body and
// no Content-Type of its own, and returns the response read whole.
func (f *fixture) do(r request) response {
	f.t.Helper()
	resp, err := f.client.Do(f.newRequest(r))
	if err != nil {
		f.t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatalf("%s %s: read body: %v", r.method, r.path, err)
	}
	return response{resp, body}
}

func (f *fixture) newRequest(r request) *http.Request {
	f.t.Helper()
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	req, err := http.NewRequest(r.method, f.url+r.path, body)
	if err != nil {
		f.t.Fatal(err)
	}
	if r.key != "" {
		req.Header.Set("Authorization", "Bearer "+r.key)
	}
	if r.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, vs := range r.header {
		req.Header.Del(k)
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	return req
}

func (f *fixture) get(key, path string) response {
	f.t.Helper()
	return f.do(request{method: http.MethodGet, path: path, key: key})
}

// scrape reads /metrics from the operations listener.
func (f *fixture) scrape() string {
	f.t.Helper()
	resp, err := http.Get(f.opsURL + "/metrics")
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		f.t.Fatalf("metrics: %s %v", resp.Status, err)
	}
	return string(body)
}

// submit submits body as key's tenant and returns the new job.
func (f *fixture) submit(key, body string) job.Job {
	f.t.Helper()
	resp := f.do(request{method: http.MethodPost, path: "/v1/jobs", key: key, body: body})
	if resp.StatusCode != http.StatusCreated {
		f.t.Fatalf("submit %s: %s %s", body, resp.Status, resp.body)
	}
	return decode[job.Job](f.t, resp)
}

// job reads job id as the admin.
func (f *fixture) job(id string) job.Job {
	f.t.Helper()
	resp := f.get(adminKey, "/v1/jobs/"+id)
	if resp.StatusCode != http.StatusOK {
		f.t.Fatalf("get %s: %s %s", id, resp.Status, resp.body)
	}
	return decode[job.Job](f.t, resp)
}

// written returns every Redis key under the fixture's prefix.
func (f *fixture) written() []string {
	f.t.Helper()
	ctx := context.Background()
	var found []string
	it := f.rdb.Scan(ctx, 0, f.prefix+"*", 1000).Iterator()
	for it.Next(ctx) {
		found = append(found, it.Val())
	}
	if err := it.Err(); err != nil {
		f.t.Fatal(err)
	}
	slices.Sort(found)
	return found
}

// blockedReads counts this fixture's Redis connections blocked in XREAD.
func (f *fixture) blockedReads() int {
	f.t.Helper()
	list, err := f.rdb.ClientList(context.Background()).Result()
	if err != nil {
		f.t.Fatal(err)
	}
	n := 0
	for line := range strings.Lines(list) {
		if strings.Contains(line, " name="+f.clientName()+" ") && strings.Contains(line, " cmd=xread") && strings.Contains(line, " flags=b ") {
			n++
		}
	}
	return n
}

// startWorker runs a worker on the fixture's prefix, default queue and
// cancel subject, with handlers, until the test ends or stop is called;
// configure, when given, changes its config.
func (f *fixture) startWorker(handlers map[string]execution.Handler, configure ...func(*execution.Config)) (stop func()) {
	f.t.Helper()
	cfg := execution.Config{
		Prefix:        f.prefix,
		Heartbeat:     200 * time.Millisecond,
		LeaseTTL:      3 * time.Second,
		Poll:          50 * time.Millisecond,
		ShutdownGrace: 2 * time.Second,
		NATS:          f.nc,
		CancelSubject: f.subject,
		Logger:        f.log,
	}
	for _, c := range configure {
		c(&cfg)
	}
	w, err := execution.NewWorker(f.rdb, cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	for kind, h := range handlers {
		w.Handle(kind, h)
	}
	ctx, cancelRun := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancelRun()
			if err := <-done; err != nil {
				f.t.Errorf("worker: %v", err)
			}
		})
	}
	f.t.Cleanup(stop)
	return stop
}

// awaitState waits until job id is in state.
func (f *fixture) awaitState(id string, state job.State) job.Job {
	f.t.Helper()
	var j job.Job
	testenv.Eventually(f.t, 10*time.Second, func() bool {
		j = f.job(id)
		return j.State == state
	}, "job %s did not become %s", id, state)
	return j
}

func decode[T any](t testing.TB, resp response) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(resp.body, &v); err != nil {
		t.Fatalf("%s: decode %T: %v\n%s", resp.Request.URL.Path, v, err, resp.body)
	}
	return v
}

// problemBody is a problem as a client reads it.
type problemBody struct {
	Type   string           `json:"type"`
	Title  string           `json:"title"`
	Status int              `json:"status"`
	Detail string           `json:"detail"`
	Errors []job.FieldError `json:"errors"`
}

// expectProblem checks that resp is a problem with status and, when field
// is not "", that it names field, and returns it.
func expectProblem(t testing.TB, resp response, status int, field string) problemBody {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("%s %s: got %s, want %d: %s", resp.Request.Method, resp.Request.URL, resp.Status, status, resp.body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("content type %q, want application/problem+json", ct)
	}
	p := decode[problemBody](t, resp)
	if p.Status != status || p.Type != "about:blank" || p.Title != http.StatusText(status) || p.Detail == "" {
		t.Fatalf("problem %+v", p)
	}
	if field != "" && !slices.ContainsFunc(p.Errors, func(e job.FieldError) bool { return e.Field == field && e.Message != "" }) {
		t.Fatalf("problem does not name field %q: %s", field, resp.body)
	}
	return p
}

// validator checks every response the client receives against
// docs/openapi.yaml: status, headers and body of the operation; for a path
// or method the document does not have, that the body is a Problem.
type validator struct {
	t       testing.TB
	router  routers.Router
	problem *openapi3.Schema
	next    http.RoundTripper
}

func newValidator(t testing.TB, serverURL string, next http.RoundTripper) *validator {
	t.Helper()
	ctx := context.Background()
	doc, err := openapi3.NewLoader().LoadFromData([]byte(docs.OpenAPI()))
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(ctx); err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	doc.Servers = openapi3.Servers{{URL: serverURL}}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return &validator{t: t, router: router, problem: doc.Components.Schemas["Problem"].Value, next: next}
}

func (v *validator) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := v.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	if err := v.check(req, resp); err != nil {
		v.t.Errorf("%s %s → %s does not match docs/openapi.yaml: %v", req.Method, req.URL, resp.Status, err)
	}
	return resp, nil
}

func (v *validator) check(req *http.Request, resp *http.Response) error {
	mediaType, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	stream := mediaType == "text/event-stream"
	var body []byte
	if !stream { // an event stream is read by the test, live
		var err error
		if body, err = io.ReadAll(resp.Body); err != nil {
			return err
		}
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
	}

	route, params, err := v.router.FindRoute(req)
	if errors.Is(err, routers.ErrPathNotFound) || errors.Is(err, routers.ErrMethodNotAllowed) {
		var value any
		if err := json.Unmarshal(body, &value); err != nil {
			return err
		}
		if mediaType != "application/problem+json" {
			return errors.New("unrouted request answered with " + mediaType)
		}
		return v.problem.VisitJSON(value)
	}
	if err != nil {
		return err
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true, ExcludeResponseBody: stream},
	}
	if stream {
		documented := route.Operation.Responses.Status(resp.StatusCode)
		if documented == nil || documented.Value.Content.Get(mediaType) == nil {
			return errors.New("an event stream where the document has none")
		}
	}
	return openapi3filter.ValidateResponse(req.Context(), in)
}

// decodeBody reads a JSON body; it may run outside the test's goroutine.
func decodeBody[T any](t testing.TB, resp *http.Response) T {
	var v T
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Errorf("decode %T: %v", v, err)
	}
	return v
}

// isNull reports whether raw JSON is absent or null.
func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}
