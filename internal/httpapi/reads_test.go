package httpapi_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/testenv"
)

// A job's input, which may be 1 MiB, is read once for each answer that
// shows it: a GET once, a waiting GET at most twice (before and after its
// wait), the event stream once for its batch of events; a listing, which
// leaves it out, not at all.
func TestReadsTakeTheInputOnlyWhereTheyShowIt(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t) // its own, so only this test's bytes count
	f := newFixtureOn(t, srv.Addr(), testenv.NATS(t).Conn(t))
	const inputSize = 512 << 10
	input := `"` + strings.Repeat("x", inputSize) + `"`
	id := f.submit(acmeKey, `{"kind": "echo", "input": `+input+`}`).ID
	sent := func() int64 {
		text, err := f.rdb.Info(t.Context(), "stats").Result()
		if err != nil {
			t.Fatal(err)
		}
		_, rest, _ := strings.Cut(text, "total_net_output_bytes:")
		n, err := strconv.ParseInt(strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0]), 10, 64)
		if err != nil {
			t.Fatalf("INFO stats: %v", err)
		}
		return n
	}
	measure := func(what string, copies int, read func()) {
		t.Helper()
		before := sent()
		read()
		if n := sent() - before; n > int64(copies*inputSize+inputSize/4) {
			t.Errorf("%s: Redis sent %d bytes for a job with %d bytes of input, want at most %d copies of it", what, n, inputSize, copies)
		}
	}
	measure("GET", 1, func() {
		if j := f.job(id); string(j.Input) != input {
			t.Fatalf("GET: input of %d bytes, want the %d submitted", len(j.Input), len(input))
		}
	})
	measure("a waiting GET", 2, func() {
		if resp := f.get(acmeKey, "/v1/jobs/"+id+"?wait=300ms"); resp.StatusCode != http.StatusOK {
			t.Fatalf("GET ?wait: %s %s", resp.Status, resp.body)
		}
	})
	measure("a listing", 0, func() {
		resp := f.get(acmeKey, "/v1/jobs")
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(resp.body), id) || strings.Contains(string(resp.body), `"input"`) {
			t.Fatalf("GET /v1/jobs: %s %.200s; want the job without its input", resp.Status, resp.body)
		}
	})
	if resp := f.do(request{method: http.MethodPost, path: "/v1/jobs/" + id + "/cancel", key: acmeKey}); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("cancel: %s %s", resp.Status, resp.body)
	}
	measure("the event stream", 1, func() {
		states := f.openStream(acmeKey, id, "").rest()
		if len(states) != 2 {
			t.Fatalf("events %d, want queued and cancelled", len(states))
		}
		for _, e := range states {
			if j := stateOf(t, e); string(j.Input) != input {
				t.Fatalf("%s event: input of %d bytes, want the %d submitted", j.State, len(j.Input), len(input))
			}
		}
	})
}
