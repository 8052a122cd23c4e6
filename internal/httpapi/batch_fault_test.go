package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/httpapi"
	"github.com/leasehold/leasehold/internal/testenv"
)

// A batch whose second run of the submit script ran but whose reply was
// lost (the network dropped it) answers 200 all the same: the first run's
// items 201, the others 503 with Retry-After, as each one's own POST
// /v1/jobs would be. Sent again with the same idempotency keys, every
// item is answered with its one job: the ones the lost run created, and
// the ones never run created now; no item gets a second job.
//
// Fails when a failed run makes the whole batch a 5xx (the items created
// are not reported), when the items left unanswered are not 503, or when
// their idempotency records are dropped (the retry creates a second job).
func TestBatchAnswersEachItemAfterARunsReplyIsLost(t *testing.T) {
	t.Parallel()
	proxy := testenv.StartProxy(t, testenv.Redis(t).Addr())
	f := newFixtureOn(t, proxy.Addr(), testenv.NATS(t).Conn(t), func(c *httpapi.Config) { c.RedisTimeout = 300 * time.Millisecond })
	const n, lost = 250, 100 // three runs of the submit script; the second's reply is lost
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf(`{"kind": "echo", "queue": "batch", "idempotency_key": "k%d", "metadata": {"n": %d}}`, i, i)
	}
	// Item lost's metadata, as its run of the script gets it.
	testenv.Before(f.rdb, testenv.HasArg(fmt.Sprintf(`{"n":%d}`, lost)), func() { proxy.Swallow(true) })

	resp := f.postBatch(acmeKey, `{"jobs": [`+strings.Join(items, ",")+`]}`)
	proxy.Swallow(false)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("batch: %s %s", resp.Status, resp.body)
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || s < 1 {
		t.Errorf("Retry-After %q", resp.Header.Get("Retry-After"))
	}
	entries := decode[struct{ Jobs []batchEntry }](t, resp).Jobs
	first := map[int]string{}
	for i, e := range entries {
		switch {
		case i < lost && (e.Status != http.StatusCreated || e.Job == nil):
			t.Fatalf("item %d of the first run: %d %s", i, e.Status, e.Problem)
		case i < lost:
			first[i] = e.Job.ID
		case e.Status != http.StatusServiceUnavailable || e.Job != nil:
			t.Fatalf("item %d after the lost reply: %d %s", i, e.Status, e.Problem)
		}
	}
	var p problemBody
	if err := json.Unmarshal(entries[lost].Problem, &p); err != nil || p.Status != http.StatusServiceUnavailable || p.Detail == "" {
		t.Fatalf("the problem of an item left unanswered: %s (%v)", entries[lost].Problem, err)
	}
	// The lost reply's run was done: its jobs are there before any retry.
	if queued := f.queued(acmeKey, "batch"); queued < 2*lost {
		t.Fatalf("%d jobs queued after the lost reply, want at least %d", queued, 2*lost)
	}

	again := f.batch(acmeKey, items...)
	ids := map[string]bool{}
	for i, e := range again {
		switch {
		case e.Job == nil:
			t.Fatalf("item %d sent again: %d %s", i, e.Status, e.Problem)
		case i < 2*lost && e.Status != http.StatusOK:
			t.Errorf("item %d sent again: %d, want 200: its job was created", i, e.Status)
		case i < lost && e.Job.ID != first[i]:
			t.Errorf("item %d sent again answered job %s, want %s", i, e.Job.ID, first[i])
		case string(e.Job.Metadata) != fmt.Sprintf(`{"n":%d}`, i):
			t.Errorf("item %d sent again answered the job of metadata %s", i, e.Job.Metadata)
		}
		ids[e.Job.ID] = true
	}
	if len(ids) != n {
		t.Errorf("%d distinct jobs for %d items", len(ids), n)
	}
	if queued := f.queued(acmeKey, "batch"); queued != n {
		t.Errorf("%d jobs queued, want %d: one per item", queued, n)
	}
}

// queued is how many of key's tenant's jobs queue holds queued.
func (f *fixture) queued(key, queue string) int64 {
	f.t.Helper()
	for _, q := range f.queues(key) {
		if q.Name == queue {
			return q.Queued
		}
	}
	return 0
}
