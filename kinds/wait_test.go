package kinds

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// A sleep job with wait_for waits for its signal, then sleeps and
// succeeds with the signal's data; with a short wait_timeout it succeeds
// told that the wait timed out.
func TestSleepWaitsForItsSignal(t *testing.T) {
	t.Parallel()
	f := startKinds(t, http.NotFoundHandler(), SleepConfig{}, LLMConfig{}, execution.Config{}, nil)
	submit := func(in string) job.Job {
		j, _, err := f.store.Submit(t.Context(), "acme", job.Submission{Kind: "sleep", Input: json.RawMessage(in)}, "")
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	a := submit(`{"duration":"100ms","tick":"100ms","wait_for":"approval"}`)
	w := f.wait(t, a.ID, job.StateWaiting)
	if w.WaitingFor == nil || w.WaitingFor.Name != "approval" {
		t.Fatalf("waiting_for %+v", w.WaitingFor)
	}
	if _, _, err := f.store.Signal(t.Context(), "acme", a.ID, false, "approval", json.RawMessage(`{"ok":1}`)); err != nil {
		t.Fatal(err)
	}
	if j := f.wait(t, a.ID, job.StateSucceeded, job.StateFailed); string(j.Result) != `{"signal":{"ok":1},"timed_out":false}` {
		t.Fatalf("result %s (%s %+v)", j.Result, j.State, j.Error)
	}
	b := submit(`{"duration":"100ms","tick":"100ms","wait_for":"approval","wait_timeout":"100ms"}`)
	if j := f.wait(t, b.ID, job.StateSucceeded, job.StateFailed); string(j.Result) != `{"signal":null,"timed_out":true}` {
		t.Fatalf("result %s (%s %+v)", j.Result, j.State, j.Error)
	}
	for _, bad := range []string{`{"wait_for":"Not A Name"}`, `{"wait_for":"a","wait_timeout":"0s"}`, `{"resume":"yes"}`} {
		if err := ValidateInput("sleep", json.RawMessage(bad), NotifyAllow{}); err == nil {
			t.Errorf("input %s accepted", bad)
		}
	}
}

// A sleep job with resume, its worker killed with SIGKILL mid-sleep, goes
// on in its next execution from the tick after its checkpoint: the notify
// ticks continue instead of starting at 1.
func TestSleepResumesFromItsCheckpointAfterKill(t *testing.T) {
	t.Parallel()
	type call struct {
		Execution string `json:"execution"`
		Tick      int    `json:"tick"`
	}
	var mu sync.Mutex
	var calls []call
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var c call
		_ = json.NewDecoder(r.Body).Decode(&c)
		mu.Lock()
		calls = append(calls, c)
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	seen := func() []call {
		mu.Lock()
		defer mu.Unlock()
		return append([]call(nil), calls...)
	}
	prefix := testenv.Prefix(t)
	subject := "test.cancel." + strings.ReplaceAll(strings.TrimSuffix(prefix, ":"), ":", ".")
	env := []string{envPrefix + "=" + prefix, envSubject + "=" + subject, envLLMURL + "=http://127.0.0.1:1/v1"}
	store := store.New(testenv.Redis(t).Client(t), store.Config{Prefix: prefix})
	first := testenv.StartHelper(t, "llmworker", env...)
	first.Line(t, "ready ", 20*time.Second)
	in, _ := json.Marshal(map[string]any{"duration": "3s", "tick": "100ms", "resume": true, "notify_url": srv.URL + "/tick"})
	j, _, err := store.Submit(t.Context(), "acme", job.Submission{Kind: "sleep", Input: in, MaxAttempts: 3}, "")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, func() bool { return len(seen()) >= 5 }, "no 5 ticks from the first worker")
	first.Kill(t)
	killed := seen()
	last := killed[len(killed)-1]
	second := testenv.StartHelper(t, "llmworker", env...)
	second.Line(t, "ready ", 20*time.Second)
	var done job.Job
	testenv.Eventually(t, 30*time.Second, func() bool {
		done, err = store.Get(t.Context(), "acme", j.ID, false)
		return err == nil && done.State.Terminal()
	}, "the job never ended")
	if done.State != job.StateSucceeded {
		t.Fatalf("job %s %+v", done.State, done.Error)
	}
	all := seen()
	var next *call
	for i := len(killed); i < len(all); i++ {
		if all[i].Execution != last.Execution {
			next = &all[i]
			break
		}
	}
	// The kill may land between a tick's notify and its checkpoint: the
	// next execution goes on from that tick, or from the one after.
	if next == nil || next.Tick < last.Tick || next.Tick > last.Tick+1 {
		t.Fatalf("the first execution notified up to tick %d; the next one started at %+v, want %d or %d",
			last.Tick, next, last.Tick, last.Tick+1)
	}
	var cp struct{ Tick int }
	if err := json.Unmarshal(done.Checkpoint, &cp); err != nil || cp.Tick < 25 {
		t.Fatalf("checkpoint %s, want the last tick", done.Checkpoint)
	}
}
