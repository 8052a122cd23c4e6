package remote_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/leasehold/leasehold/cancel"
	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/kinds/remote"
)

func TestMain(m *testing.M) {
	testenv.Main(m, map[string]func() int{"worker": workerProcess, "holder": holderProcess})
}

// kind is the job kind the tests' workers serve remotely.
const kind = "remote.test"

// fixture is a test's slice of the shared Redis and NATS, a handler on an
// httptest server, and the workers that call it.
type fixture struct {
	store   *store.Store
	flags   *cancel.Flags
	nc      *nats.Conn
	prefix  string
	subject string
	srv     *httptest.Server
}

func newFixture(t testing.TB, handler http.HandlerFunc) *fixture {
	t.Helper()
	rdb := testenv.Redis(t).Client(t)
	f := &fixture{nc: testenv.NATS(t).Conn(t), prefix: testenv.Prefix(t)}
	f.subject = "test.cancel." + strings.ReplaceAll(strings.TrimSuffix(f.prefix, ":"), ":", ".")
	var err error
	f.store = store.New(rdb, store.Config{Prefix: f.prefix})
	if f.flags, err = cancel.New(f.store, f.nc, cancel.Config{Subject: f.subject}); err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(handler)
	t.Cleanup(f.srv.Close)
	return f
}

// startWorker runs a worker serving kind by the fixture's handler until the
// test ends.
func (f *fixture) startWorker(t *testing.T, wcfg execution.Config, rcfg remote.Config) {
	t.Helper()
	wcfg.Prefix, wcfg.CancelSubject, wcfg.NATS = f.prefix, f.subject, f.nc
	wcfg.Heartbeat, wcfg.LeaseTTL = 50*time.Millisecond, 500*time.Millisecond
	wcfg.Poll = 50 * time.Millisecond
	wcfg.ShutdownGrace = 5 * time.Second
	if wcfg.Backoff == nil {
		wcfg.Backoff = func(int) time.Duration { return 10 * time.Millisecond }
	}
	w, err := execution.NewWorker(testenv.Redis(t).Client(t), wcfg)
	if err != nil {
		t.Fatal(err)
	}
	remote.Register(w, map[string]string{kind: f.srv.URL + "/run"}, rcfg)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("worker Run: %v", err)
		}
	})
}

func (f *fixture) submit(t *testing.T, s job.Submission) job.Job {
	t.Helper()
	s.Kind = kind
	if s.Input == nil {
		s.Input = json.RawMessage(`{"n":1}`)
	}
	j, _, err := f.store.Submit(t.Context(), "acme", s, "")
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func (f *fixture) wait(t *testing.T, id string, states ...job.State) job.Job {
	t.Helper()
	var j job.Job
	testenv.Eventually(t, 15*time.Second, func() bool {
		var err error
		if j, err = f.store.Get(t.Context(), "acme", id, false); err != nil {
			t.Fatal(err)
		}
		return slices.Contains(states, j.State)
	}, "job %s never reached %v", id, states)
	return j
}

func (f *fixture) events(t *testing.T, id string) []job.Event {
	t.Helper()
	events, err := f.store.Events(t.Context(), "acme", id, false, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []job.Event
	for _, ev := range events {
		if ev.Type != "state" {
			out = append(out, ev)
		}
	}
	return out
}

// cancelJob cancels as the API does.
func (f *fixture) cancelJob(t *testing.T, id string) {
	t.Helper()
	if _, err := execution.CancelJob(t.Context(), f.store, f.flags, "acme", id, false); err != nil {
		t.Fatal(err)
	}
}

func message(j job.Job) string {
	if j.Error == nil {
		return ""
	}
	return j.Error.Message
}

// ndjson writes lines to w, flushing after each.
func ndjson(w http.ResponseWriter, lines ...string) {
	for _, l := range lines {
		fmt.Fprintln(w, l)
		w.(http.Flusher).Flush()
	}
}

func streamHeader(w http.ResponseWriter) {
	w.Header().Set("Content-Type", remote.ContentNDJSON)
	w.WriteHeader(http.StatusOK)
}

func TestJSONResultAndTheProtocolHeaders(t *testing.T) {
	t.Parallel()
	got := make(chan http.Header, 1)
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		var in map[string]int
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || r.Method != http.MethodPost {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		fmt.Fprintf(w, `{"doubled":%d}`, in["n"]*2)
	})
	spans := tracetest.NewSpanRecorder()
	f.startWorker(t, execution.Config{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))}, remote.Config{})
	start := time.Now()
	j := f.submit(t, job.Submission{Input: json.RawMessage(`{"n":21}`), Timeout: job.Duration(time.Minute)})
	done := f.wait(t, j.ID, job.StateSucceeded, job.StateFailed)
	if done.State != job.StateSucceeded || string(done.Result) != `{"doubled":42}` {
		t.Fatalf("state %s result %s error %+v", done.State, done.Result, done.Error)
	}
	h := <-got
	want := map[string]string{
		remote.HeaderJobID:       j.ID,
		remote.HeaderExecutionID: done.Execution.ID,
		remote.HeaderAttempt:     "1",
		remote.HeaderKind:        kind,
		remote.HeaderTenant:      "acme",
		"Fencing-Token":          strconv.FormatUint(uint64(done.Execution.FencingToken), 10),
	}
	for name, v := range want {
		if h.Get(name) != v {
			t.Errorf("header %s = %q, want %q", name, h.Get(name), v)
		}
	}
	deadline, err := time.Parse(time.RFC3339, h.Get(remote.HeaderDeadline))
	if err != nil || deadline.Before(start.Add(59*time.Second)) || deadline.After(time.Now().Add(time.Minute)) {
		t.Errorf("header %s = %q, want about a minute from the start (%v)", remote.HeaderDeadline, h.Get(remote.HeaderDeadline), err)
	}
	// The handler's parent is the execution's span.
	tp := strings.Split(h.Get("traceparent"), "-")
	if len(tp) != 4 {
		t.Fatalf("traceparent %q", h.Get("traceparent"))
	}
	var process sdktrace.ReadOnlySpan
	testenv.Eventually(t, 5*time.Second, func() bool {
		for _, s := range spans.Ended() {
			if strings.HasPrefix(s.Name(), "process ") {
				process = s
			}
		}
		return process != nil
	}, "no process span")
	if tp[1] != process.SpanContext().TraceID().String() || tp[2] != process.SpanContext().SpanID().String() {
		t.Fatalf("traceparent %q, want the execution's span %s", h.Get("traceparent"), process.SpanContext().SpanID())
	}
}

func TestNDJSONEventsArriveLiveThenTheResult(t *testing.T) {
	t.Parallel()
	seen := make(chan struct{})
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {
		streamHeader(w)
		ndjson(w, `{"event":"progress","data":{"step":1}}`, `{"event":"output","data":{"text":"hel"}}`)
		select { // the result waits until the test saw the events
		case <-seen:
		case <-r.Context().Done():
			return
		}
		ndjson(w, `{"event":"log","data":{"msg":"done"}}`, `{"result":{"text":"hello"}}`)
	})
	f.startWorker(t, execution.Config{}, remote.Config{})
	j := f.submit(t, job.Submission{})
	testenv.Eventually(t, 10*time.Second, func() bool { return len(f.events(t, j.ID)) == 2 }, "the first two events never showed while the stream ran")
	if s := f.wait(t, j.ID, job.StateRunning, job.StateSucceeded).State; s != job.StateRunning {
		t.Fatalf("state %s while the stream runs", s)
	}
	close(seen)
	done := f.wait(t, j.ID, job.StateSucceeded, job.StateFailed)
	if done.State != job.StateSucceeded || string(done.Result) != `{"text":"hello"}` {
		t.Fatalf("state %s result %s error %+v", done.State, done.Result, done.Error)
	}
	var got []string
	for _, ev := range f.events(t, j.ID) {
		got = append(got, ev.Type+" "+string(ev.Data))
	}
	want := []string{`progress {"step":1}`, `output {"text":"hel"}`, `log {"msg":"done"}`}
	if !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
}

// TestFailures covers each way a handler's reply fails an attempt: whether
// the job is retried, and what its error says.
func TestFailures(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		reply    http.HandlerFunc
		attempts int    // attempts spent, of 3
		message  string // in the job's error
	}{
		{"error line, retryable", func(w http.ResponseWriter, _ *http.Request) {
			streamHeader(w)
			ndjson(w, `{"event":"progress","data":{}}`, `{"error":{"message":"tool timed out","retryable":true}}`)
		}, 3, "remote handler: tool timed out"},
		{"error line, not retryable", func(w http.ResponseWriter, _ *http.Request) {
			streamHeader(w)
			ndjson(w, `{"error":{"message":"bad prompt","retryable":false}}`)
		}, 1, "remote handler: bad prompt"},
		{"400", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "missing field: query", http.StatusBadRequest)
		}, 1, "remote handler: 400 Bad Request: missing field: query"},
		{"503", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
		}, 3, "remote handler: 503 Service Unavailable: overloaded"},
		{"redirect", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://169.254.169.254/", http.StatusFound)
		}, 1, "remote handler: 302 Found"},
		{"connection reset", func(w http.ResponseWriter, _ *http.Request) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.(interface{ SetLinger(int) error }).SetLinger(0) // RST, not FIN
				conn.Close()
			}
		}, 3, "remote handler: connection failed"},
		{"stream without a result", func(w http.ResponseWriter, _ *http.Request) {
			streamHeader(w)
			ndjson(w, `{"event":"progress","data":{"step":1}}`)
		}, 3, "remote handler: the stream ended without a result or an error"},
		{"oversized line", func(w http.ResponseWriter, _ *http.Request) {
			streamHeader(w)
			ndjson(w, `{"event":"output","data":{"text":"`+strings.Repeat("x", 2000)+`"}}`, `{"result":1}`)
		}, 1, "remote handler: protocol: a line over 1024 bytes"},
		{"not a protocol line", func(w http.ResponseWriter, _ *http.Request) {
			streamHeader(w)
			ndjson(w, `{"progress":1}`)
		}, 1, "remote handler: protocol: a line has none of event, usage, checkpoint, result, wait and error"},
		{"another content type", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprintln(w, "ok")
		}, 1, `remote handler: protocol: 200 with Content-Type "text/plain"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				c.reply(w, r)
			})
			f.startWorker(t, execution.Config{}, remote.Config{MaxLine: 1024})
			j := f.submit(t, job.Submission{MaxAttempts: 3})
			done := f.wait(t, j.ID, job.StateSucceeded, job.StateFailed)
			if done.State != job.StateFailed || done.Attempt != c.attempts || int(calls.Load()) != c.attempts {
				t.Fatalf("state %s after %d attempts (%d calls), want failed after %d", done.State, done.Attempt, calls.Load(), c.attempts)
			}
			if done.Error.Code != job.CodeHandlerError || !strings.HasPrefix(message(done), c.message) {
				t.Fatalf("error %+v, want %s starting %q", done.Error, job.CodeHandlerError, c.message)
			}
		})
	}
}

// A downstream that deduplicates on (job id, Leasehold-Attempt) sees a
// retried job's calls as new ones: the attempt numbers go on from the last
// one spent, never back.
func TestRetriedJobsAttemptsGoOn(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var attempts []string
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		attempts = append(attempts, r.Header.Get(remote.HeaderAttempt))
		n := len(attempts)
		mu.Unlock()
		if n <= 2 {
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"ok":true}`)
	})
	f.startWorker(t, execution.Config{}, remote.Config{})
	j := f.submit(t, job.Submission{MaxAttempts: 2})
	if failed := f.wait(t, j.ID, job.StateSucceeded, job.StateFailed); failed.State != job.StateFailed || failed.Attempt != 2 {
		t.Fatalf("state %s at attempt %d, want failed at 2", failed.State, failed.Attempt)
	}
	retried, err := f.store.Retry(t.Context(), "acme", j.ID, false)
	if err != nil || retried.Attempt != 2 || retried.MaxAttempts != 4 {
		t.Fatalf("retry: attempt %d of %d, %v; want 2 of 4", retried.Attempt, retried.MaxAttempts, err)
	}
	done := f.wait(t, j.ID, job.StateSucceeded, job.StateFailed)
	if done.State != job.StateSucceeded || done.Attempt != 3 || done.Execution.Attempt != 3 {
		t.Fatalf("state %s at attempt %d (execution %+v), want succeeded at 3", done.State, done.Attempt, done.Execution)
	}
	mu.Lock()
	if !slices.Equal(attempts, []string{"1", "2", "3"}) {
		t.Errorf("%s of the calls: %q, want 1, 2, 3", remote.HeaderAttempt, attempts)
	}
	mu.Unlock()
	events, err := f.store.Events(t.Context(), "acme", j.ID, false, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var runs []int
	for _, e := range events {
		var d struct {
			State   job.State
			Attempt int
		}
		if e.Type == "state" && json.Unmarshal(e.Data, &d) == nil && d.State == job.StateRunning {
			runs = append(runs, d.Attempt)
		}
	}
	if !slices.Equal(runs, []int{1, 2, 3}) {
		t.Errorf("the executions' attempts %v, want 1, 2, 3", runs)
	}
}

// A 429 is pushback: with max_attempts 1 the job still succeeds, on
// attempt 1, and the second call waits for the Retry-After.
func TestA429IsPushbackThatSpendsNoAttempt(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var calls []time.Time
	f := newFixture(t, func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		calls = append(calls, time.Now())
		n := len(calls)
		mu.Unlock()
		if n == 1 {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return
		}
		w.Header().Set("Content-Type", remote.ContentJSON)
		fmt.Fprint(w, `"ok"`)
	})
	f.startWorker(t, execution.Config{}, remote.Config{})
	j := f.submit(t, job.Submission{MaxAttempts: 1})
	done := f.wait(t, j.ID, job.StateSucceeded, job.StateFailed)
	if done.State != job.StateSucceeded || done.Attempt != 1 {
		t.Fatalf("state %s attempt %d error %+v", done.State, done.Attempt, done.Error)
	}
	mu.Lock()
	defer mu.Unlock()
	// The worker's backoff is 10ms: only Retry-After explains a second.
	if gap := calls[1].Sub(calls[0]); gap < time.Second {
		t.Fatalf("second call %v after the first, want at least the Retry-After, 1s", gap)
	}
}

// A 429 that names its keys (Leasehold-Pushback-Keys) cuts and throttles
// only those of the job's adaptive keys; names the job does not hold are
// ignored. A 429 that names none cuts every adaptive key of the job.
func TestA429CutsTheKeysItNames(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get(remote.HeaderAttempt) == "1" && string(body) == `{"n":1}` {
			w.Header().Set(remote.HeaderPushbackKeys, "model:zzz, model:a,tenant:other")
		}
		w.Header().Set("Retry-After", "30")
		http.Error(w, "slow down", http.StatusTooManyRequests)
	})
	n := int64(16)
	for _, k := range []string{"model:a", "model:b", "model:c", "model:d"} {
		if err := f.store.SetKeyLimit(t.Context(), k, job.KeyLimit{Limit: &n, Budget: job.Budget{Adaptive: true}}); err != nil {
			t.Fatal(err)
		}
	}
	limits := func() map[string]job.Limit {
		ls, err := f.store.Limits(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]job.Limit{}
		for _, l := range ls {
			m[l.Key] = l
		}
		return m
	}
	before := limits()
	f.startWorker(t, execution.Config{}, remote.Config{})
	named := f.submit(t, job.Submission{Input: json.RawMessage(`{"n":1}`), ConcurrencyKeys: []string{"model:a", "model:b"}})
	unnamed := f.submit(t, job.Submission{Input: json.RawMessage(`{"n":2}`), ConcurrencyKeys: []string{"model:c", "model:d"}})
	f.wait(t, named.ID, job.StateRetrying)
	f.wait(t, unnamed.ID, job.StateRetrying)
	// The keys are settled just after the job's state is written: wait
	// for those to be cut, then look at every key.
	var after map[string]job.Limit
	testenv.Eventually(t, 10*time.Second, func() bool {
		after = limits()
		return !after["model:a"].ThrottledUntil.IsZero() && !after["model:c"].ThrottledUntil.IsZero() && !after["model:d"].ThrottledUntil.IsZero()
	}, "the keys the 429s concern were never throttled")
	for k, cut := range map[string]bool{"model:a": true, "model:b": false, "model:c": true, "model:d": true} {
		l, was := after[k], before[k]
		throttled, lowered := !l.ThrottledUntil.IsZero(), l.EffectiveLimit.Value < was.EffectiveLimit.Value
		if throttled != cut || lowered != cut || l.EffectiveLimit.Value > was.EffectiveLimit.Value {
			t.Errorf("%s: throttled until %v, effective limit %+v (before %+v); want cut and throttled: %v",
				k, l.ThrottledUntil, l.EffectiveLimit, was.EffectiveLimit, cut)
		}
	}
}

func TestTimeoutClosesTheRequest(t *testing.T) {
	t.Parallel()
	closed := make(chan struct{})
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {
		streamHeader(w)
		ndjson(w, `{"event":"progress","data":{}}`)
		<-r.Context().Done()
		close(closed)
	})
	f.startWorker(t, execution.Config{}, remote.Config{})
	j := f.submit(t, job.Submission{MaxAttempts: 1, Timeout: job.Duration(300 * time.Millisecond)})
	done := f.wait(t, j.ID, job.StateSucceeded, job.StateFailed)
	if done.Error == nil || done.Error.Code != job.CodeTimeout {
		t.Fatalf("state %s error %+v, want failed by %s", done.State, done.Error, job.CodeTimeout)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler never saw its request end")
	}
}

func TestCancelMidStreamClosesTheRequest(t *testing.T) {
	t.Parallel()
	closed := make(chan struct{})
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {
		streamHeader(w)
		ndjson(w, `{"event":"output","data":{"text":"thinking"}}`)
		<-r.Context().Done()
		close(closed)
	})
	f.startWorker(t, execution.Config{}, remote.Config{})
	j := f.submit(t, job.Submission{MaxAttempts: 3})
	testenv.Eventually(t, 10*time.Second, func() bool { return len(f.events(t, j.ID)) == 1 }, "no event from the stream")
	f.cancelJob(t, j.ID)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler never saw its request end")
	}
	if done := f.wait(t, j.ID, job.StateCancelled, job.StateFailed, job.StateSucceeded); done.State != job.StateCancelled {
		t.Fatalf("state %s error %+v", done.State, done.Error)
	}
}

func TestConcurrencyLimitHoldsAcrossWorkers(t *testing.T) {
	t.Parallel()
	const limit, jobs = 2, 10
	var inFlight, most atomic.Int32
	f := newFixture(t, func(w http.ResponseWriter, _ *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(50 * time.Millisecond)
		w.Header().Set("Content-Type", remote.ContentJSON)
		fmt.Fprint(w, `{}`)
	})
	if err := f.store.SetLimit(t.Context(), "tool:search", limit); err != nil {
		t.Fatal(err)
	}
	f.startWorker(t, execution.Config{Concurrency: 8}, remote.Config{})
	f.startWorker(t, execution.Config{Concurrency: 8}, remote.Config{})
	var ids []string
	for range jobs {
		ids = append(ids, f.submit(t, job.Submission{ConcurrencyKeys: []string{"tool:search"}}).ID)
	}
	for _, id := range ids {
		if s := f.wait(t, id, job.StateSucceeded, job.StateFailed).State; s != job.StateSucceeded {
			t.Fatalf("job %s %s", id, s)
		}
	}
	if most.Load() > limit {
		t.Fatalf("%d requests in flight at once, over the limit %d", most.Load(), limit)
	}
}

// Environment of the "worker" helper.
const (
	envPrefix  = "LH_PREFIX"
	envSubject = "LH_SUBJECT"
	envURL     = "LH_URL"
)

// workerProcess runs a worker serving kind by the handler at $LH_URL, with
// a 1s lease TTL, until it is killed. It prints "ready" before it runs.
func workerProcess() int {
	nc, err := nats.Connect(testenv.HelperNATSURL())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer nc.Close()
	w, err := execution.NewWorker(testenv.HelperRedis(), execution.Config{
		Prefix: os.Getenv(envPrefix), CancelSubject: os.Getenv(envSubject), NATS: nc,
		Heartbeat: 100 * time.Millisecond, LeaseTTL: time.Second, Poll: 50 * time.Millisecond,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	remote.Register(w, map[string]string{kind: os.Getenv(envURL)}, remote.Config{})
	fmt.Println("ready")
	if err := w.Run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// TestLeaseLossClosesTheRequest pauses the worker that runs a job past its
// lease TTL: another worker runs the job with a higher token, and when the
// paused one wakes, its request is closed and its result refused.
func TestLeaseLossClosesTheRequest(t *testing.T) {
	t.Parallel()
	type call struct{ token uint64 }
	calls := make(chan call, 2)
	firstClosed := make(chan struct{})
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {
		// Go's server sees the client go only once the body is read.
		_, _ = io.Copy(io.Discard, r.Body)
		token, _ := strconv.ParseUint(r.Header.Get("Fencing-Token"), 10, 64)
		calls <- call{token: token}
		if r.Header.Get(remote.HeaderAttempt) == "1" {
			<-r.Context().Done() // the paused owner's request
			close(firstClosed)
			return
		}
		<-firstClosed // answer once the stale request is gone
		w.Header().Set("Content-Type", remote.ContentJSON)
		fmt.Fprintf(w, `{"token":%d}`, token)
	})
	first := testenv.StartHelper(t, "worker", envPrefix+"="+f.prefix, envSubject+"="+f.subject, envURL+"="+f.srv.URL)
	first.Line(t, "ready", 10*time.Second)
	j := f.submit(t, job.Submission{MaxAttempts: 3})
	c1 := <-calls
	first.Stop(t) // SIGSTOP: a GC pause, a partition
	f.startWorker(t, execution.Config{}, remote.Config{})
	var c2 call
	select {
	case c2 = <-calls:
	case <-time.After(15 * time.Second):
		t.Fatal("no second execution after the first owner's lease expired")
	}
	if c2.token <= c1.token {
		t.Fatalf("second execution's token %d, not above the first's %d", c2.token, c1.token)
	}
	first.Cont(t)
	select {
	case <-firstClosed:
	case <-time.After(15 * time.Second):
		t.Fatal("the paused owner's request was never closed")
	}
	done := f.wait(t, j.ID, job.StateSucceeded, job.StateFailed)
	if done.State != job.StateSucceeded || string(done.Result) != fmt.Sprintf(`{"token":%d}`, c2.token) {
		t.Fatalf("state %s result %s error %+v, want the second execution's result", done.State, done.Result, done.Error)
	}
}

func TestParseHandlers(t *testing.T) {
	t.Parallel()
	got, err := remote.ParseHandlers(" agent.run=http://127.0.0.1:8000/run , rag=https://rag.internal/v1/jobs")
	if err != nil || len(got) != 2 || got["agent.run"] != "http://127.0.0.1:8000/run" || got["rag"] != "https://rag.internal/v1/jobs" {
		t.Fatalf("got %v, %v", got, err)
	}
	const secret = "s3cr3t"
	for _, bad := range []string{
		"agent.run",
		"https://user:" + secret + "@host/x",
		"Agent=http://h/x",
		"a=ftp://h/" + secret,
		"a=/relative/" + secret,
		"a=http://h/x,a=http://h/y?" + secret,
		"https://h/x?token=" + secret + "=1",
	} {
		_, err := remote.ParseHandlers(bad)
		if err == nil || !strings.HasPrefix(err.Error(), "LEASEHOLD_HANDLERS entry") || strings.Contains(err.Error(), secret) {
			t.Errorf("ParseHandlers(%q) = %v, want an error naming the entry, without the secret", bad, err)
		}
	}
}

// An NDJSON error line's message may be as long as a line (1 MiB by
// default); the job keeps at most execution.MaxErrorMessage bytes of it,
// in its error and so in every later state event.
func TestALongErrorMessageIsCut(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(w http.ResponseWriter, _ *http.Request) {
		streamHeader(w)
		ndjson(w, `{"error":{"message":"`+strings.Repeat("why ", 200_000)+`","retryable":false}}`)
	})
	f.startWorker(t, execution.Config{}, remote.Config{})
	j := f.submit(t, job.Submission{MaxAttempts: 1})
	done := f.wait(t, j.ID, job.StateSucceeded, job.StateFailed)
	if done.State != job.StateFailed || done.Error == nil {
		t.Fatalf("state %s error %+v, want failed", done.State, done.Error)
	}
	if msg := done.Error.Message; len(msg) > execution.MaxErrorMessage || !strings.HasPrefix(msg, "remote handler: why why") {
		t.Errorf("a message of %d bytes starting %.40q, want at most %d", len(msg), msg, execution.MaxErrorMessage)
	}
	for _, ev := range f.events(t, j.ID) {
		if len(ev.Data) > 2*execution.MaxErrorMessage {
			t.Errorf("a %s event of %d bytes", ev.Type, len(ev.Data))
		}
	}
}
