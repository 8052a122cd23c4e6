package cancel_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/cancel"
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m, nil) }

// env is one test's own corner of the shared servers: a key prefix, a NATS
// subject no other test uses, and a log it can read back.
type env struct {
	prefix  string
	subject string
	log     *slog.Logger
	logs    *testenv.Buffer
}

func newEnv(t testing.TB) env {
	t.Helper()
	prefix := testenv.Prefix(t)
	logs := &testenv.Buffer{}
	// Registered first, so it runs last: after every watcher has stopped.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log:\n%s", logs)
		}
	})
	return env{
		prefix:  prefix,
		subject: "lhtest.cancel." + prefix,
		log:     slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		logs:    logs,
	}
}

func (e env) flags(t testing.TB, rdb redis.UniversalClient, nc *nats.Conn) *cancel.Flags {
	t.Helper()
	f, err := cancel.New(store.New(rdb, store.Config{Prefix: e.prefix}), nc, cancel.Config{Subject: e.subject, Logger: e.log})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// watcher starts a Watcher's Run for the rest of the test and checks, when
// the test ends, that Run returned nil.
func (e env) watcher(t testing.TB, rdb redis.UniversalClient, nc *nats.Conn, poll time.Duration) *cancel.Watcher {
	t.Helper()
	w, err := cancel.NewWatcher(store.New(rdb, store.Config{Prefix: e.prefix}), nc, cancel.WatcherConfig{Subject: e.subject, Poll: poll, Logger: e.log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return w
}

// subscribed returns once some client subscribed to e's subject on srv,
// so that a request published from then on reaches the watcher.
func (e env) subscribed(t testing.TB, srv *testenv.NATSServer) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, func() bool { return srv.Interest(e.subject) },
		"watcher never subscribed")
}

// fresh returns once Run has read the flags of every id watched before the
// call: it watches a probe whose flag is set and waits for its cancel, which
// comes in the same read as theirs or after it.
func (e env) fresh(t testing.TB, f *cancel.Flags, w *cancel.Watcher) {
	t.Helper()
	if err := f.Request(t.Context(), "probe", time.Minute); err != nil {
		t.Fatal(err)
	}
	ctx, stop := w.Watch(context.Background(), "probe")
	defer stop()
	cancelled(t, ctx, 5*time.Second, "probe")
}

// disconnected waits until every nc has noticed that its server is gone.
func disconnected(t testing.TB, ncs ...*nats.Conn) {
	t.Helper()
	for _, nc := range ncs {
		testenv.Eventually(t, 5*time.Second, func() bool { return nc.Status() != nats.CONNECTED },
			"NATS connection still CONNECTED after its server stopped")
	}
}

// cancelled waits until ctx is done and checks that it was cancelled because
// cancellation was requested.
func cancelled(t testing.TB, ctx context.Context, timeout time.Duration, what string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(timeout):
		t.Fatalf("%s: context not cancelled within %v", what, timeout)
	}
	if cause := context.Cause(ctx); cause != cancel.ErrRequested {
		t.Fatalf("%s: cause = %v, want %v", what, cause, cancel.ErrRequested)
	}
}
