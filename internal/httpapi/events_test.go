package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/httpapi"
	"github.com/leasehold/leasehold/job"
)

// sseEvent is one server-sent event, or a comment line.
type sseEvent struct {
	id, typ, data string
	comment       bool
}

// sseStream reads a live event stream.
type sseStream struct {
	t      *testing.T
	resp   *http.Response
	events chan sseEvent // closed at the end of the stream
}

// openStream opens the events of id as key's tenant, after lastID ("" =
// from the start). The stream is closed when the test ends.
func (f *fixture) openStream(key, id, lastID string) *sseStream {
	f.t.Helper()
	r := request{method: http.MethodGet, path: "/v1/jobs/" + id + "/events", key: key}
	if lastID != "" {
		r.header = http.Header{"Last-Event-ID": {lastID}}
	}
	resp, err := f.client.Do(f.newRequest(r))
	if err != nil {
		f.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		f.t.Fatalf("events: %s %s", resp.Status, body)
	}
	s := &sseStream{t: f.t, resp: resp, events: make(chan sseEvent, 1000)}
	done := make(chan struct{})
	go s.read(done)
	f.t.Cleanup(func() {
		resp.Body.Close()
		<-done
	})
	return s
}

func (s *sseStream) read(done chan<- struct{}) {
	defer close(done)
	defer close(s.events)
	sc := bufio.NewScanner(s.resp.Body)
	sc.Buffer(nil, 4<<20)
	var e sseEvent
	var data []string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if e.typ != "" || len(data) > 0 {
				e.data = strings.Join(data, "\n")
				s.events <- e
			}
			e, data = sseEvent{}, nil
		case strings.HasPrefix(line, ":"):
			s.events <- sseEvent{comment: true, data: line}
		default:
			name, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch name {
			case "id":
				e.id = value
			case "event":
				e.typ = value
			case "data":
				data = append(data, value)
			}
		}
	}
	// sc.Err() is the body closed under it at the end of the test, or a
	// cut stream, which the test sees as an early end.
}

// next returns the next event, skipping comments; ok is false at the end
// of the stream.
func (s *sseStream) next() (e sseEvent, ok bool) {
	s.t.Helper()
	for {
		select {
		case e, ok = <-s.events:
			if ok && e.comment {
				continue
			}
			return e, ok
		case <-time.After(20 * time.Second):
			s.t.Fatal("no event within 20s")
			return e, false
		}
	}
}

// rest returns every event until the end of the stream.
func (s *sseStream) rest() []sseEvent {
	s.t.Helper()
	var all []sseEvent
	for {
		e, ok := s.next()
		if !ok {
			return all
		}
		all = append(all, e)
	}
}

// stateOf decodes a state event's job.
func stateOf(t *testing.T, e sseEvent) job.Job {
	t.Helper()
	if e.typ != "state" {
		t.Fatalf("event %+v is not a state event", e)
	}
	var j job.Job
	if err := json.Unmarshal([]byte(e.data), &j); err != nil {
		t.Fatalf("state data %s: %v", e.data, err)
	}
	return j
}

// ticker is a job kind that emits a progress event each time the test
// asks, and succeeds when the test closes the channel.
func ticker(ticks <-chan int) execution.Handler {
	return func(ctx context.Context, e *execution.Execution) (any, error) {
		for {
			select {
			case n, ok := <-ticks:
				if !ok {
					return map[string]string{"done": "yes"}, nil
				}
				if err := e.Emit(ctx, execution.EventProgress, map[string]int{"tick": n}); err != nil {
					return nil, err
				}
				if err := e.Emit(ctx, execution.EventOutput, map[string]string{"text": "line\nbreak"}); err != nil {
					return nil, err
				}
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		}
	}
}

// Events arrive live while a worker runs the job, and the stream ends
// after the terminal state event. A resumed stream repeats and loses
// nothing.
func TestEventsLiveAndResumed(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ticks := make(chan int)
	f.startWorker(map[string]execution.Handler{"ticker": ticker(ticks)})
	id := f.submit(acmeKey, `{"kind": "ticker", "metadata": {"m": "1"}}`).ID
	s := f.openStream(acmeKey, id, "")

	var seen []sseEvent
	expect := func(typ string) sseEvent {
		t.Helper()
		e, ok := s.next()
		if !ok {
			t.Fatalf("the stream ended; want a %s event", typ)
		}
		if e.typ != typ || e.id == "" {
			t.Fatalf("event %+v, want a %s event", e, typ)
		}
		seen = append(seen, e)
		return e
	}
	if j := stateOf(t, expect("state")); j.State != job.StateQueued || j.ID != id || string(j.Metadata) != `{"m":"1"}` {
		t.Errorf("first state %+v", j)
	}
	if j := stateOf(t, expect("state")); j.State != job.StateRunning || j.Attempt != 1 {
		t.Errorf("second state %+v", j)
	}
	for n := 1; n <= 3; n++ {
		ticks <- n // the handler emits only now: the events come live
		var p struct{ Tick int }
		if err := json.Unmarshal([]byte(expect("progress").data), &p); err != nil || p.Tick != n {
			t.Errorf("progress %d: %+v %v", n, p, err)
		}
		var o struct{ Text string }
		if err := json.Unmarshal([]byte(expect("output").data), &o); err != nil || o.Text != "line\nbreak" {
			t.Errorf("output: %+v %v", o, err)
		}
	}
	close(ticks)
	last := stateOf(t, expect("state"))
	if last.State != job.StateSucceeded || string(last.Result) != `{"done":"yes"}` || last.FinishedAt == nil {
		t.Errorf("terminal state %+v", last)
	}
	if e, ok := s.next(); ok {
		t.Fatalf("an event after the terminal state: %+v", e)
	}

	// A replay from the start sends the same events, with the same ids.
	ids := func(events []sseEvent) []string {
		var out []string
		for _, e := range events {
			out = append(out, e.id+" "+e.typ)
		}
		return out
	}
	if got := ids(f.openStream(acmeKey, id, "").rest()); !slices.Equal(got, ids(seen)) {
		t.Errorf("replay %v, want %v", got, ids(seen))
	}
	// Resuming after any event sends exactly the ones after it.
	for i := range seen {
		got := ids(f.openStream(acmeKey, id, seen[i].id).rest())
		if want := ids(seen[i+1:]); !slices.Equal(got, want) {
			t.Errorf("after event %d: %v, want %v", i, got, want)
		}
	}
	// A replayed old state event shows the job as it was then.
	replayed := stateOf(t, f.openStream(acmeKey, id, "").rest()[0])
	if replayed.State != job.StateQueued || replayed.Attempt != 0 || replayed.ID != id || replayed.Execution != nil {
		t.Errorf("replayed first state %+v", replayed)
	}
}

// A state event is the job as it was at that move, live and replayed
// alike: a client that resumes with Last-Event-ID never sees a state that
// did not exist, such as a queued job with the execution of a later
// attempt.
func TestReplayedStateEventsAreTheLiveOnes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.submit(acmeKey, `{"kind": "flaky", "max_attempts": 2}`).ID
	s := f.openStream(acmeKey, id, "")
	var live []sseEvent
	expect := func(state job.State, attempt int) job.Job {
		t.Helper()
		e, ok := s.next()
		if !ok {
			t.Fatalf("the stream ended; want %s", state)
		}
		live = append(live, e)
		j := stateOf(t, e)
		if j.State != state || j.Attempt != attempt {
			t.Fatalf("live event %s, want %s at attempt %d", e.data, state, attempt)
		}
		return j
	}
	// The first event comes before any worker runs: live, the job is queued.
	if j := expect(job.StateQueued, 0); j.Execution != nil || j.StartedAt != nil {
		t.Errorf("the first queued event has an execution or a start: %+v", j)
	}

	// Each attempt hands the test the channel of its outcome, and waits.
	attempts := make(chan chan error)
	f.startWorker(map[string]execution.Handler{"flaky": func(ctx context.Context, _ *execution.Execution) (any, error) {
		outcome := make(chan error)
		select {
		case attempts <- outcome:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		select {
		case err := <-outcome:
			return map[string]int{"n": 2}, err
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}}, func(c *execution.Config) { c.Backoff = func(int) time.Duration { return 10 * time.Millisecond } })
	first := <-attempts
	// While a handler runs, its job stands as the running event showed it
	// but for the execution's heartbeats.
	standsAsShown := func(shown job.Job) {
		t.Helper()
		var now job.Job
		if err := json.Unmarshal(f.get(acmeKey, "/v1/jobs/"+id).body, &now); err != nil {
			t.Fatal(err)
		}
		if now.Execution == nil || shown.Execution == nil {
			t.Fatalf("no execution: now %+v, shown %+v", now, shown)
		}
		now.Execution.HeartbeatAt = shown.Execution.HeartbeatAt
		a, _ := json.Marshal(now)
		b, _ := json.Marshal(shown)
		if !bytes.Equal(a, b) {
			t.Errorf("the job while it runs\n%s\nits running event\n%s", a, b)
		}
	}
	running := expect(job.StateRunning, 1)
	standsAsShown(running)
	first <- errors.New("upstream said 500")
	if j := expect(job.StateRetrying, 1); j.Error == nil || j.Execution == nil || j.Execution.FinishedAt == nil ||
		j.Execution.ID != running.Execution.ID || j.FinishedAt != nil {
		t.Errorf("retrying %+v", j)
	}
	expect(job.StateQueued, 1)
	second := <-attempts
	secondRun := expect(job.StateRunning, 2)
	standsAsShown(secondRun)
	if j := secondRun; j.Execution == nil || j.Execution.Attempt != 2 || j.Execution.FinishedAt != nil ||
		j.Error == nil || !j.StartedAt.Equal(*running.StartedAt) {
		t.Errorf("second running %+v", j)
	}
	second <- nil
	if j := expect(job.StateSucceeded, 2); string(j.Result) != `{"n":2}` || j.Error != nil || j.FinishedAt == nil {
		t.Errorf("succeeded %+v", j)
	}
	if e, ok := s.next(); ok {
		t.Fatalf("an event after the terminal state: %+v", e)
	}

	// A replay from the start, and one after each event, send the bytes
	// the live stream sent.
	for i := -1; i < len(live); i++ {
		after := ""
		if i >= 0 {
			after = live[i].id
		}
		got := f.openStream(acmeKey, id, after).rest()
		if len(got) != len(live)-i-1 {
			t.Fatalf("after %q: %d events, want %d", after, len(got), len(live)-i-1)
		}
		for k, e := range got {
			if want := live[i+1+k]; e != want {
				t.Errorf("after %q: replayed\n%+v\nlive\n%+v", after, e, want)
			}
		}
	}
	// The last event is the job as it stands.
	if body := f.get(acmeKey, "/v1/jobs/"+id).body; string(bytes.TrimSpace(body)) != live[len(live)-1].data {
		t.Errorf("the job %s\nits last state event %s", body, live[len(live)-1].data)
	}
}

// An idle stream sends comment lines; the interval is the API's KeepAlive.
func TestEventsKeepAlive(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *httpapi.Config) { c.KeepAlive = 50 * time.Millisecond })
	id := f.submit(acmeKey, `{"kind": "echo"}`).ID // no worker: the job waits
	s := f.openStream(acmeKey, id, "")
	if e, _ := s.next(); e.typ != "state" {
		t.Fatalf("first event %+v", e)
	}
	comments := 0
	deadline := time.After(20 * time.Second)
	for comments < 3 {
		select {
		case e, ok := <-s.events:
			if !ok {
				t.Fatal("the stream ended")
			}
			if !e.comment {
				t.Fatalf("unexpected event %+v", e)
			}
			comments++
		case <-deadline:
			t.Fatalf("%d keep-alive comments in 20s", comments)
		}
	}
	// The job ends while the stream idles: its event ends the stream.
	if resp := f.cancel(acmeKey, id); resp.StatusCode != http.StatusAccepted {
		t.Fatal(resp.Status)
	}
	var last sseEvent
	for _, e := range s.rest() {
		last = e
	}
	if j := stateOf(t, last); j.State != job.StateCancelled {
		t.Errorf("last event %+v", j)
	}
}

func TestEventsErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.submit(acmeKey, `{"kind": "echo"}`).ID
	for _, last := range []string{"bogus", "1-x", "-1", "1-2-3", "{0}"} {
		resp := f.do(request{method: http.MethodGet, path: "/v1/jobs/" + id + "/events", key: acmeKey,
			header: http.Header{"Last-Event-ID": {last}}})
		expectProblem(t, resp, 400, "Last-Event-ID")
	}
	expectProblem(t, f.get(acmeKey, "/v1/jobs/0192a000-0000-7000-8000-000000000000/events"), 404, "")
	// Resuming past the end of an ended job's stream ends at once.
	if resp := f.cancel(acmeKey, id); resp.StatusCode != http.StatusAccepted {
		t.Fatal(resp.Status)
	}
	all := f.openStream(acmeKey, id, "").rest()
	if len(all) != 2 {
		t.Fatalf("events %+v", all)
	}
	if rest := f.openStream(acmeKey, id, all[1].id).rest(); len(rest) != 0 {
		t.Errorf("after the terminal event: %+v", rest)
	}
	if rest := f.openStream(acmeKey, id, "99999999999999-0").rest(); len(rest) != 0 {
		t.Errorf("after the end: %+v", rest)
	}
}

// A replay is read a page (job.EventsPage) at a time. A page that is full
// may have more after it, even when its last state event is terminal: a
// job that failed at the end of a full page and was retried streams on to
// its real end.
func TestAReplayGoesOnPastAFullPage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.startWorker(map[string]execution.Handler{"flaky": func(ctx context.Context, e *execution.Execution) (any, error) {
		if e.Attempt() > 1 {
			return "ok", nil
		}
		// queued, running, these, failed: a full first page.
		for i := range job.EventsPage - 3 {
			if err := e.Emit(ctx, execution.EventProgress, i); err != nil {
				return nil, err
			}
		}
		return nil, errors.New("first attempt")
	}})
	id := f.submit(acmeKey, `{"kind": "flaky", "max_attempts": 1}`).ID
	f.awaitState(id, job.StateFailed)
	if resp := f.post(acmeKey, "/v1/jobs/"+id+"/retry"); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("retry: %s %s", resp.Status, resp.body)
	}
	f.awaitState(id, job.StateSucceeded)

	s := f.openStream(acmeKey, id, "")
	var states []job.State
	n := 0
	for {
		e, ok := s.next()
		if !ok {
			break
		}
		n++
		if e.typ == "state" {
			states = append(states, stateOf(t, e).State)
		}
	}
	want := []job.State{job.StateQueued, job.StateRunning, job.StateFailed, job.StateQueued, job.StateRunning, job.StateSucceeded}
	if !slices.Equal(states, want) || n != job.EventsPage+3 {
		t.Errorf("replayed %d events, states %v; want %d, %v", n, states, job.EventsPage+3, want)
	}
}
