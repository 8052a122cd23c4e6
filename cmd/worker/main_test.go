package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/leasehold/leasehold/internal/redisproc"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

func TestMain(m *testing.M) { testenv.Main(m, nil) }

// TestServesMetricsAndProbes runs the worker command on the test Redis and
// NATS: /healthz answers, /readyz is ready while it claims and 503 while it
// drains at shutdown, and /metrics has the worker's metrics under their
// Prometheus names.
func TestServesMetricsAndProbes(t *testing.T) {
	t.Parallel()
	port, err := redisproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	prefix := testenv.Prefix(t)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() {
		done <- runWorker(ctx, []string{
			"--redis-url", "redis://" + testenv.Redis(t).Addr() + "/0", "--nats-url", testenv.NATS(t).URL(),
			"--prefix", prefix, "--metrics-addr", "127.0.0.1:" + strconv.Itoa(port),
			"--heartbeat", "100ms", "--lease-ttl", "1s", "--shutdown-grace", "30s",
		}, io.Discard)
	}()
	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	testenv.Eventually(t, 20*time.Second, func() bool { code, _ := get("/readyz"); return code == http.StatusOK },
		"the worker never became ready")
	if code, body := get("/healthz"); code != http.StatusOK {
		t.Fatalf("healthz: %d %s", code, body)
	}

	store := store.New(testenv.Redis(t).Client(t), store.Config{Prefix: prefix})
	echo, _, err := store.Submit(t.Context(), "acme", job.Submission{Kind: "echo"}, "")
	if err != nil {
		t.Fatal(err)
	}
	// A job that sleeps keeps the worker draining after it is told to stop.
	sleep, _, err := store.Submit(t.Context(), "acme", job.Submission{Kind: "sleep", Input: []byte(`{"duration":"60s","tick":"100ms"}`)}, "")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, func() bool {
		e, err1 := store.Get(t.Context(), "acme", echo.ID, false)
		s, err2 := store.Get(t.Context(), "acme", sleep.ID, false)
		return err1 == nil && err2 == nil && e.State == job.StateSucceeded && s.State == job.StateRunning
	}, "the echo job never succeeded while the sleep job ran")

	var body string
	testenv.Eventually(t, 20*time.Second, func() bool {
		_, body = get("/metrics")
		return strings.Contains(body, "leasehold_worker_heartbeat_lag_seconds_count")
	}, "no heartbeat lag in /metrics")
	for _, name := range []string{
		`leasehold_queue_depth{`,
		`leasehold_queue_oldest_age_seconds{`,
		`leasehold_worker_executions_in_flight{`,
		`leasehold_worker_claim_duration_seconds_bucket{`,
		`leasehold_worker_heartbeat_lag_seconds_bucket{`,
		`leasehold_worker_executions_total{`,
		`go_goroutines `,
	} {
		if !strings.Contains(body, name) {
			t.Errorf("/metrics has no %s", name)
		}
	}

	stop() // SIGTERM, in effect: the sleep job holds the worker in its grace period
	testenv.Eventually(t, 20*time.Second, func() bool { code, _ := get("/readyz"); return code == http.StatusServiceUnavailable },
		"the worker stayed ready while shutting down")
	if _, err := store.Cancel(t.Context(), "acme", sleep.ID, false); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, context.Canceled) { // what the signal handler says when ctx ends
			t.Fatalf("runWorker: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not stop")
	}
}

// A bad LEASEHOLD_HANDLERS stops the worker at start with an error that
// names the entry, and never echoes the URL, which may carry a secret.
func TestBadHandlersStopTheStart(t *testing.T) {
	t.Parallel()
	err := runWorker(t.Context(), []string{"--handlers", "agent.run=http://127.0.0.1:8000/run,rag=ftp://user:s3cr3t@host/x"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "LEASEHOLD_HANDLERS entry 2") || strings.Contains(err.Error(), "s3cr3t") {
		t.Fatalf("runWorker: %v, want an error naming entry 2 without its URL", err)
	}
}

// LEASEHOLD_RETENTION (--retention) sets how long the worker keeps a job
// after it ends: its reaper deletes the record then.
func TestRetentionIsConfigurable(t *testing.T) {
	t.Parallel()
	port, err := redisproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	prefix := testenv.Prefix(t)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runWorker(ctx, []string{
			"--redis-url", "redis://" + testenv.Redis(t).Addr() + "/0", "--nats-url", testenv.NATS(t).URL(),
			"--prefix", prefix, "--metrics-addr", "127.0.0.1:" + strconv.Itoa(port), "--retention", "200ms",
		}, io.Discard)
	}()
	defer func() { stop(); <-done }()
	store := store.New(testenv.Redis(t).Client(t), store.Config{Prefix: prefix})
	j, _, err := store.Submit(t.Context(), "acme", job.Submission{Kind: "echo"}, "")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, func() bool {
		_, err := store.Get(t.Context(), "acme", j.ID, false)
		return errors.Is(err, job.ErrNotFound)
	}, "the job was kept past a 200ms retention")
}
