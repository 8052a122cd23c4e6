package kinds

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/nats-io/nats.go"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/fakellm"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// helpers are the roles a test can start this binary in (testenv.StartHelper).
var helpers = map[string]func() int{"llmworker": llmWorkerProcess}

// Environment of the "llmworker" helper.
const (
	envPrefix  = "LH_PREFIX"  // key prefix (required)
	envSubject = "LH_SUBJECT" // cancel subject (required)
	envLLMURL  = "LH_LLM_URL" // the upstream's base URL (required)
)

// llmWorkerProcess runs a worker with the built-in kinds on the parent's
// Redis and NATS until it is killed or gets SIGTERM. It prints "ready <worker
// id>" as it starts.
func llmWorkerProcess() int {
	prefix, subject, url := os.Getenv(envPrefix), os.Getenv(envSubject), os.Getenv(envLLMURL)
	if prefix == "" || subject == "" || url == "" {
		fmt.Fprintf(os.Stderr, "llmworker: %s, %s and %s are required\n", envPrefix, envSubject, envLLMURL)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	rdb := testenv.HelperRedis()
	defer rdb.Close()
	nc, err := nats.Connect(testenv.HelperNATSURL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		fmt.Fprintln(os.Stderr, "llmworker:", err)
		return 1
	}
	defer nc.Close()
	w, err := execution.NewWorker(rdb, execution.Config{
		Prefix: prefix, CancelSubject: subject, NATS: nc,
		Concurrency: 8, // above the model's limit: the limit, not the slots, holds them back
		Heartbeat:   100 * time.Millisecond, LeaseTTL: time.Second, Poll: 50 * time.Millisecond,
		Backoff: func(int) time.Duration { return 10 * time.Millisecond },
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "llmworker:", err)
		return 1
	}
	Register(w, SleepConfig{Allow: NotifyAllow{Loopback: true}}, LLMConfig{BaseURL: url})
	fmt.Printf("ready %s\n", w.ID())
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "llmworker:", err)
		return 1
	}
	return 0
}

// cancelSubject is the cancel subject of the workers of a test's prefix.
func cancelSubject(prefix string) string {
	return "test.cancel." + strings.ReplaceAll(strings.TrimSuffix(prefix, ":"), ":", ".")
}

// fleet is a job store under a key prefix of its own, which worker
// processes ("llmworker") share.
type fleet struct {
	prefix string
	store  *store.Store
}

func newFleet(t testing.TB) fleet {
	t.Helper()
	f := fleet{prefix: testenv.Prefix(t)}
	f.store = store.New(testenv.Redis(t).Client(t), store.Config{Prefix: f.prefix})
	return f
}

// start starts a worker process of the fleet that calls the upstream at
// url, and returns it with its worker id once it is ready.
func (f fleet) start(t testing.TB, url string) (*testenv.Process, string) {
	t.Helper()
	p := testenv.StartHelper(t, "llmworker", envPrefix+"="+f.prefix, envSubject+"="+cancelSubject(f.prefix), envLLMURL+"="+url+"/v1")
	return p, p.Line(t, "ready ", 20*time.Second)
}

// TestModelLimitHoldsWithManyJobsAndAKilledWorker: many llm.chat jobs on
// one model whose limit is 3, served by three worker processes, one killed
// with SIGKILL mid-stream. The upstream never answers more than 3 requests
// at once (it counts them itself), reaches 3, and every job succeeds, the
// killed worker's on a later attempt.
func TestModelLimitHoldsWithManyJobsAndAKilledWorker(t *testing.T) {
	t.Parallel()
	const limit, jobs = 3, 40
	upstream := fakellm.New(fakellm.Config{Tokens: 10, Delay: 15 * time.Millisecond})
	srv := httptest.NewServer(upstream)
	t.Cleanup(srv.Close)
	t.Cleanup(upstream.Close)

	fl := newFleet(t)
	store := fl.store
	if err := store.SetLimit(t.Context(), "model:fake-1", limit); err != nil {
		t.Fatal(err)
	}
	var workers []*testenv.Process
	names := map[string]int{} // worker id -> index in workers
	for i := range 3 {
		p, id := fl.start(t, srv.URL)
		names[id] = i
		workers = append(workers, p)
	}

	ids := make([]string, jobs)
	for i := range ids {
		j, _, err := store.Submit(t.Context(), "acme", job.Submission{
			Kind:            "llm.chat",
			Input:           []byte(fmt.Sprintf(`{"model":"fake-1","messages":[{"role":"user","content":"job %d"}]}`, i)),
			ConcurrencyKeys: []string{"model:fake-1"}, // as the API adds it
			MaxAttempts:     3,
		}, "")
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = j.ID
	}
	get := func(id string) job.Job {
		j, err := store.Get(t.Context(), "acme", id, false)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}

	// Kill a worker while it streams, once some jobs are done: one that a
	// read shows running a job. It is paused first, so that the jobs read
	// as running on it cannot finish before the kill. (A victim chosen in
	// advance was paused at every look while it had no job, and under load
	// the others ran every job while it stood still.)
	testenv.Eventually(t, 30*time.Second, func() bool {
		done := 0
		for _, id := range ids {
			if get(id).State == job.StateSucceeded {
				done++
			}
		}
		return done >= 5
	}, "fewer than 5 jobs were done")
	var victim *testenv.Process
	var victimID string
	var killed []string
	testenv.Eventually(t, 30*time.Second, func() bool {
		on := ""
		for _, id := range ids {
			if j := get(id); j.State == job.StateRunning && j.Execution != nil {
				on = j.Execution.Worker
				break
			}
		}
		i, ok := names[on]
		if !ok {
			return false
		}
		victim, victimID = workers[i], on
		victim.Stop(t)
		killed = killed[:0]
		for _, id := range ids {
			if j := get(id); j.State == job.StateRunning && j.Execution != nil && j.Execution.Worker == on {
				killed = append(killed, id)
			}
		}
		if len(killed) == 0 {
			victim.Cont(t)
		}
		return len(killed) > 0
	}, "no worker was ever seen running a job after the first ones were done")
	victim.Kill(t)

	for _, id := range ids {
		testenv.Eventually(t, 60*time.Second, func() bool {
			s := get(id).State
			return s.Terminal()
		}, "job %s never ended", id)
		if j := get(id); j.State != job.StateSucceeded {
			t.Errorf("job %s ended %s (%v), want succeeded", id, j.State, j.Error)
		}
	}
	// A job read as running on the paused worker is re-run, unless the
	// finish its worker sent just before the pause landed after the read:
	// then the victim's own execution succeeded (it never ran again).
	for _, id := range killed {
		if j := get(id); j.Attempt < 2 && (j.Execution == nil || j.Execution.Worker != victimID) {
			t.Errorf("job %s, running on the killed worker, succeeded on attempt %d by %+v: it was not re-run", id, j.Attempt, j.Execution)
		}
	}
	if peak := upstream.PeakInFlight(); peak != limit {
		t.Fatalf("the upstream saw up to %d requests at once, want the limit, %d", peak, limit)
	}
	// A job the victim had claimed may not have reached the upstream before
	// the pause: its re-run is then its only request.
	if n := len(upstream.Requests()); n < jobs {
		t.Fatalf("the upstream got %d requests for %d jobs", n, jobs)
	}
}
