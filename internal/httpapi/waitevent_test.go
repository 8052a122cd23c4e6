package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/job"
)

// The waiting event is the job as GET shows it while it waits, field by
// field, its checkpoint included; a replay after a later execution saved
// another checkpoint sends the bytes the live stream sent.
func TestTheWaitingEventIsTheJobAsItWaits(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.startWorker(map[string]execution.Handler{"draft": func(ctx context.Context, e *execution.Execution) (any, error) {
		if s := e.Resume().Signal; s != nil {
			return s.Data, e.Checkpoint(ctx, map[string]int{"n": 2})
		}
		// A checkpoint with what JSON escapes: quotes, a newline, a slash.
		if err := e.Checkpoint(ctx, map[string]any{"draft": "about \"refunds\"\nand </script>", "n": 1}); err != nil {
			return nil, err
		}
		return nil, execution.Wait("approval", time.Hour)
	}})
	id := f.submit(acmeKey, `{"kind": "draft", "input": {"topic": "refunds"}}`).ID
	s := f.openStream(acmeKey, id, "")
	var live []sseEvent
	for {
		e, ok := s.next()
		if !ok {
			t.Fatalf("the stream ended before the job waited: %+v", live)
		}
		live = append(live, e)
		if e.typ == "state" && stateOf(t, e).State == job.StateWaiting {
			break
		}
	}
	waiting := live[len(live)-1]
	fields := func(b []byte) map[string]json.RawMessage {
		t.Helper()
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		return m
	}
	shown, now := fields([]byte(waiting.data)), fields(f.get(acmeKey, "/v1/jobs/"+id).body)
	for _, name := range slices.Sorted(maps.Keys(now)) {
		if !bytes.Equal(shown[name], now[name]) {
			t.Errorf("%s: the waiting event shows %s, GET %s", name, shown[name], now[name])
		}
	}
	if len(shown) != len(now) {
		t.Errorf("the waiting event has %d fields, GET %d", len(shown), len(now))
	}
	if string(now["checkpoint"]) != `{"draft":"about \"refunds\"\nand \u003c/script\u003e","n":1}` {
		t.Errorf("checkpoint %s", now["checkpoint"])
	}

	resp := f.do(request{method: http.MethodPost, path: "/v1/jobs/" + id + "/signal", key: acmeKey, body: `{"name":"approval","data":{"ok":true}}`})
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("signal: %s %s", resp.Status, resp.body)
	}
	if done := f.awaitState(id, job.StateSucceeded); string(done.Result) != `{"ok":true}` || string(done.Checkpoint) != `{"n":2}` {
		t.Errorf("result %s, checkpoint %s", done.Result, done.Checkpoint)
	}
	replay := f.openStream(acmeKey, id, "")
	for _, want := range live {
		if got, ok := replay.next(); !ok || got != want {
			t.Fatalf("replayed\n%+v\nlive\n%+v", got, want)
		}
	}
}
