package execution_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/cancel"
	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// fixture is one test's slice of the shared Redis and NATS: its own key
// prefix and cancel subject, a job store and a cancel flag writer on them.
type fixture struct {
	rdb     redis.UniversalClient
	nc      *nats.Conn
	prefix  string
	subject string
	store   *store.Store
	flags   *cancel.Flags
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixtureOn(t, testenv.Redis(t).Client(t), testenv.NATS(t).Conn(t))
}

func newFixtureOn(t *testing.T, rdb redis.UniversalClient, nc *nats.Conn) *fixture {
	t.Helper()
	f := &fixture{rdb: rdb, nc: nc, prefix: testenv.Prefix(t)}
	f.subject = "test.cancel." + f.prefix[:len(f.prefix)-1]
	f.subject = subjectSafe(f.subject)
	var err error
	f.store = store.New(rdb, store.Config{Prefix: f.prefix})
	if f.flags, err = cancel.New(f.store, nc, cancel.Config{Subject: f.subject}); err != nil {
		t.Fatal(err)
	}
	return f
}

// subjectSafe turns a key prefix into NATS subject tokens.
func subjectSafe(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c == ':' {
			b[i] = '.'
		}
	}
	return string(b)
}

// config is a worker config for tests: fast heartbeats and polls, and
// leases of 5 s, which a loaded machine's stalls do not outlast. A test
// that waits for a lease to run out sets a short one of its own.
func (f *fixture) config(cfg execution.Config) execution.Config {
	cfg.Prefix = f.prefix
	cfg.CancelSubject = f.subject
	if cfg.NATS == nil {
		cfg.NATS = f.nc
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = 50 * time.Millisecond
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 5 * time.Second
	}
	if cfg.Poll == 0 {
		cfg.Poll = 50 * time.Millisecond
	}
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = 100 * time.Millisecond
	}
	if cfg.Backoff == nil {
		cfg.Backoff = func(int) time.Duration { return 10 * time.Millisecond }
	}
	return cfg
}

// startWorker runs a worker until the test ends or stop is called; stop
// waits for Run to return.
func (f *fixture) startWorker(t *testing.T, cfg execution.Config, handlers map[string]execution.Handler) (w *execution.Worker, stop func()) {
	t.Helper()
	return f.startWorkerOn(t, f.rdb, cfg, handlers)
}

// startWorkerOn is startWorker with a worker of client rdb (a client of
// f's Redis).
func (f *fixture) startWorkerOn(t *testing.T, rdb redis.UniversalClient, cfg execution.Config, handlers map[string]execution.Handler) (w *execution.Worker, stop func()) {
	t.Helper()
	w, err := execution.NewWorker(rdb, f.config(cfg))
	if err != nil {
		t.Fatal(err)
	}
	for kind, h := range handlers {
		w.Handle(kind, h)
	}
	ctx, cancelRun := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancelRun()
		if err := <-done; err != nil {
			t.Errorf("worker Run: %v", err)
		}
	}
	t.Cleanup(stop)
	return w, stop
}

func (f *fixture) submit(t *testing.T, s job.Submission) job.Job {
	t.Helper()
	j, _, err := f.store.Submit(t.Context(), "acme", s, "")
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func (f *fixture) get(t *testing.T, id string) job.Job {
	t.Helper()
	j, err := f.store.Get(t.Context(), "acme", id, false)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// waitState waits until job id is in one of states and returns it. A read
// that fails is tried again until the deadline: after a Redis restart,
// go-redis answers with its last dial error for a while, even once a ping
// has got through on another connection.
func (f *fixture) waitState(t *testing.T, id string, timeout time.Duration, states ...job.State) job.Job {
	t.Helper()
	var j job.Job
	var err error
	testenv.Eventually(t, timeout, func() bool {
		j, err = f.store.Get(t.Context(), "acme", id, false)
		return err == nil && slices.Contains(states, j.State)
	}, "job %s never reached %v; last read: %v", id, states, lazy(func() string {
		if err != nil {
			return err.Error()
		}
		return fmt.Sprintf("%s on attempt %d, error %+v", j.State, j.Attempt, j.Error)
	}))
	return j
}

// lazy is a message argument computed when it is printed: what a wait
// saw last, only once it has failed.
type lazy func() string

func (l lazy) String() string { return l() }

// cancelJob does what the API does: the job's state first, then the flag
// and the NATS message.
func (f *fixture) cancelJob(t *testing.T, id string) job.Job {
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
	return j
}

// countFrom sets the fence counter at key above the Redis clock and returns
// its value: tokens are floored by the clock in µs (fence.lua), and a
// counter above it (2^52 > TIME in µs until the year 2112) counts the
// tokens it issues one by one again, for tests that count claims or grants.
func (f *fixture) countFrom(t *testing.T, key string) int64 {
	t.Helper()
	const above = int64(1) << 52
	if err := f.rdb.Set(t.Context(), key, above, 0).Err(); err != nil {
		t.Fatal(err)
	}
	return above
}

// echo returns its input.
func echo(_ context.Context, e *execution.Execution) (any, error) { return e.Input, nil }

// block waits until its context ends and reports why.
func block(ctx context.Context, _ *execution.Execution) (any, error) {
	<-ctx.Done()
	return nil, context.Cause(ctx)
}

func raw(s string) json.RawMessage { return json.RawMessage(s) }

func errCode(j job.Job) job.Code {
	if j.Error == nil {
		return ""
	}
	return j.Error.Code
}

var errBoom = errors.New("boom")
