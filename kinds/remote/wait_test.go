package remote_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/redisproc"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/kinds/remote"
)

// A handler saves a checkpoint and waits with NDJSON lines; the signal
// resumes the job, and the next call carries Leasehold-Resume and the
// envelope of input, checkpoint and signal.
func TestCheckpointAndWaitLines(t *testing.T) {
	t.Parallel()
	var resumed atomic.Pointer[remote.Envelope]
	var header atomic.Value
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		streamHeader(w)
		if h := r.Header.Get(remote.HeaderResume); h != "" {
			var env remote.Envelope
			_ = json.Unmarshal(body, &env)
			resumed.Store(&env)
			header.Store(h)
			ndjson(w, `{"result":"done"}`)
			return
		}
		ndjson(w, `{"checkpoint":{"step":1}}`, `{"wait":{"for":"approval","timeout":"24h"}}`)
	})
	f.startWorker(t, execution.Config{}, remote.Config{})
	j := f.submit(t, job.Submission{Input: json.RawMessage(`{"n":7}`)})
	w := f.wait(t, j.ID, job.StateWaiting, job.StateFailed)
	if w.State != job.StateWaiting || w.WaitingFor.Name != "approval" || time.Until(w.WaitingFor.Until) < 23*time.Hour ||
		string(w.Checkpoint) != `{"step":1}` {
		t.Fatalf("after the wait line: %s %+v, waiting_for %+v, checkpoint %s", w.State, w.Error, w.WaitingFor, w.Checkpoint)
	}
	if _, _, err := f.store.Signal(t.Context(), "acme", j.ID, false, "approval", json.RawMessage(`{"ok":true}`)); err != nil {
		t.Fatal(err)
	}
	f.wait(t, j.ID, job.StateSucceeded)
	env := resumed.Load()
	if env == nil || string(env.Input) != `{"n":7}` || string(env.Checkpoint) != `{"step":1}` || env.Signal == nil ||
		env.Signal.Name != "approval" || string(env.Signal.Data) != `{"ok":true}` || header.Load() != "checkpoint, signal" {
		t.Fatalf("the resumed call got %+v, %s: %v", env, remote.HeaderResume, header.Load())
	}
}

// A wait line with a bad name or timeout breaks the protocol: the job
// fails at once.
func TestBadWaitLineFailsTheJob(t *testing.T) {
	t.Parallel()
	for _, l := range []string{`{"wait":{"for":"Not OK"}}`, `{"wait":{"for":"ok","timeout":"soon"}}`, `{"wait":{"for":"ok","timeout":"-1s"}}`} {
		f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {
			streamHeader(w)
			ndjson(w, l)
		})
		f.startWorker(t, execution.Config{}, remote.Config{})
		j := f.wait(t, f.submit(t, job.Submission{MaxAttempts: 3}).ID, job.StateFailed, job.StateWaiting)
		if j.State != job.StateFailed || j.Attempt != 1 || !strings.Contains(message(j), "wait") {
			t.Errorf("%s: %s on attempt %d: %q", l, j.State, j.Attempt, message(j))
		}
	}
}

// The Python and Node examples' approval flows, end to end: each drafts
// the action, checkpoints it and waits; a signal resumes it, and the
// resumed call decides from the checkpoint and the signal's data.
func TestExampleApprovalFlows(t *testing.T) {
	t.Parallel()
	_, file, _, _ := runtime.Caller(0)
	examples := filepath.Join(filepath.Dir(file), "..", "..", "examples")
	for _, c := range []struct{ name, bin, script, portFlag string }{
		{"python", "python3", "python-handler/handler.py", "--port"},
		{"node", "node", "node-handler/handler.js", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			port, err := redisproc.FreePort()
			if err != nil {
				t.Fatal(err)
			}
			args := []string{c.script, strconv.Itoa(port)}
			if c.portFlag != "" {
				args = []string{c.script, c.portFlag, strconv.Itoa(port)}
			}
			// The Node example loads the TypeScript SDK's build: held
			// still until the handler has loaded it.
			start := func(string) {
				cmd := exec.Command(c.bin, args...)
				cmd.Dir = examples
				out, err := cmd.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				if err := cmd.Start(); err != nil {
					t.Fatalf("%s: %v (apt-get install -y python3 nodejs)", c.bin, err)
				}
				t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
				listening := make(chan struct{})
				go func() {
					sc := bufio.NewScanner(out)
					for sc.Scan() {
						if strings.HasPrefix(sc.Text(), "listening") {
							close(listening)
						}
					}
				}()
				select {
				case <-listening:
				case <-time.After(30 * time.Second):
					t.Fatal("the handler never listened")
				}
			}
			if c.bin == "node" {
				testenv.WithTypeScriptSDK(t, start)
			} else {
				start("")
			}
			f := newFixture(t, http.NotFoundHandler().ServeHTTP)
			startRemoteWorker(t, f, map[string]string{"demo.approve": "http://127.0.0.1:" + strconv.Itoa(port) + "/approve"})
			for decision, data := range map[string]string{"approved": `{"approved":true}`, "rejected": `{"approved":false}`} {
				j, _, err := f.store.Submit(t.Context(), "acme", job.Submission{Kind: "demo.approve",
					Input: json.RawMessage(`{"action":"refund order 42"}`)}, "")
				if err != nil {
					t.Fatal(err)
				}
				if w := f.wait(t, j.ID, job.StateWaiting, job.StateFailed); w.State != job.StateWaiting {
					t.Fatalf("%s %+v, want waiting", w.State, w.Error)
				}
				if _, _, err := f.store.Signal(t.Context(), "acme", j.ID, false, "approval", json.RawMessage(data)); err != nil {
					t.Fatal(err)
				}
				done := f.wait(t, j.ID, job.StateSucceeded, job.StateFailed)
				var res struct{ Action, Decision string }
				if err := json.Unmarshal(done.Result, &res); err != nil || res.Decision != decision || res.Action != "approve: refund order 42" {
					t.Fatalf("%s: result %s (%+v)", decision, done.Result, done.Error)
				}
			}
		})
	}
}

// startRemoteWorker runs a worker serving handlers (kind → URL) on f's
// Redis and NATS until the test ends.
func startRemoteWorker(t *testing.T, f *fixture, handlers map[string]string) {
	t.Helper()
	w, err := execution.NewWorker(testenv.Redis(t).Client(t), execution.Config{
		Prefix: f.prefix, CancelSubject: f.subject, NATS: f.nc,
		Heartbeat: 100 * time.Millisecond, LeaseTTL: 5 * time.Second, Poll: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	remote.Register(w, handlers, remote.Config{})
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
