package httpapi_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/testenv"
)

// Reading a job (GET, a waiting GET, the event stream) reads the fields the
// job object shows, not its input, which may be 1 MiB: Redis sends far less
// than one copy of the input for all of them together.
func TestReadsLeaveTheInputInRedis(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t) // its own, so only this test's bytes count
	f := newFixtureOn(t, srv.Addr(), testenv.NATS(t).Conn(t))
	const inputSize = 512 << 10
	id := f.submit(acmeKey, `{"kind": "echo", "input": "`+strings.Repeat("x", inputSize)+`"}`).ID
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
	measure := func(what string, read func()) {
		t.Helper()
		before := sent()
		read()
		if n := sent() - before; n > inputSize/4 {
			t.Errorf("%s: Redis sent %d bytes for a job with %d bytes of input", what, n, inputSize)
		}
	}
	measure("GET and a waiting GET", func() {
		for _, path := range []string{"/v1/jobs/" + id, "/v1/jobs/" + id + "?wait=300ms"} {
			if resp := f.get(acmeKey, path); resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %s: %s %s", path, resp.Status, resp.body)
			}
		}
	})
	if resp := f.do(request{method: http.MethodPost, path: "/v1/jobs/" + id + "/cancel", key: acmeKey}); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("cancel: %s %s", resp.Status, resp.body)
	}
	measure("the event stream", func() {
		resp := f.get(acmeKey, "/v1/jobs/"+id+"/events")
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(resp.body), `"state":"cancelled"`) {
			t.Fatalf("events: %s %s", resp.Status, resp.body)
		}
	})
}
