package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/httpapi"
	"github.com/leasehold/leasehold/job"
)

// batchEntry is one item's answer as a client reads it.
type batchEntry struct {
	Status  int             `json:"status"`
	Job     *job.Job        `json:"job"`
	Problem json.RawMessage `json:"problem"`
}

// postBatch sends body to POST /v1/jobs/batch as key's tenant.
func (f *fixture) postBatch(key, body string) response {
	f.t.Helper()
	return f.do(request{method: http.MethodPost, path: "/v1/jobs/batch", key: key, body: body})
}

// batch sends items as one batch and returns the entries of its 200.
func (f *fixture) batch(key string, items ...string) []batchEntry {
	f.t.Helper()
	resp := f.postBatch(key, `{"jobs": [`+strings.Join(items, ",")+`]}`)
	if resp.StatusCode != http.StatusOK {
		f.t.Fatalf("batch: %s %s", resp.Status, resp.body)
	}
	entries := decode[struct{ Jobs []batchEntry }](f.t, resp).Jobs
	if len(entries) != len(items) {
		f.t.Fatalf("batch of %d items answered %d entries", len(items), len(entries))
	}
	return entries
}

// statuses lists the entries' statuses.
func statuses(entries []batchEntry) []int {
	out := make([]int, len(entries))
	for i, e := range entries {
		out[i] = e.Status
	}
	return out
}

// A batch of 1000 jobs creates them all, answered in the order of the
// items, each job as submitted.
//
// Fails when the answers are not in the order of the items (the results
// were matched to the wrong items).
func TestBatchOfAThousandInOrder(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	items := make([]string, job.MaxBatch)
	for i := range items {
		items[i] = fmt.Sprintf(`{"kind": "echo", "queue": %q, "metadata": {"n": %d}}`, []string{"default", "batch", "gpu"}[i%3], i)
	}
	entries := f.batch(acmeKey, items...)
	ids := map[string]bool{}
	for i, e := range entries {
		if e.Status != http.StatusCreated || e.Job == nil {
			t.Fatalf("item %d: %d %s", i, e.Status, e.Problem)
		}
		if got := string(e.Job.Metadata); got != fmt.Sprintf(`{"n":%d}`, i) {
			t.Fatalf("item %d answered with the job of metadata %s", i, got)
		}
		ids[e.Job.ID] = true
	}
	if len(ids) != job.MaxBatch {
		t.Fatalf("%d distinct jobs for %d items", len(ids), job.MaxBatch)
	}
	j := f.job(entries[999].Job.ID)
	if j.State != job.StateQueued || j.Queue != "default" || j.Tenant != "acme" {
		t.Errorf("the last job reads %+v", j)
	}
	counts := map[string]int64{}
	for _, q := range f.queues(acmeKey) {
		counts[q.Name] = q.Queued
	}
	if counts["default"] != 334 || counts["batch"] != 333 || counts["gpu"] != 333 {
		t.Errorf("queued per queue %v, want 334, 333, 333", counts)
	}
}

// Every item of a batch is answered as its own POST /v1/jobs is: the same
// status, and for a refused item the same problem; a refused item creates
// nothing.
//
// Fails when an item is decoded or checked otherwise than a submission
// (a check skipped, another message), or when a refused item writes.
func TestBatchItemsAreAnsweredAsTheirOwnSubmits(t *testing.T) {
	t.Parallel()
	const maxBody = 4 << 10
	items := []string{
		`{"kind": "echo"}`,
		`[{"kind": "echo"}]`,
		`"echo"`,
		`null`,
		`{"kind": "echo", "bogus": 1}`,
		`{"KIND": "echo"}`,
		`{"kind": 7}`,
		`{"kind": "echo", "timeout": "ten minutes"}`,
		`{"kind": "Echo"}`,
		`{"queue": "default"}`,
		`{"kind": "echo", "queue": "nowhere"}`,
		`{"kind": "echo", "max_attempts": 0}`,
		`{"kind": "echo", "priority": -101, "timeout": "25h"}`,
		`{"kind": "echo", "concurrency_keys": ["tenant:globex"]}`,
		`{"kind": "echo", "concurrency_keys": ["model:unlimited"]}`,
		`{"kind": "echo", "cost": {"tokens": 0}}`,
		`{"kind": "sleep", "input": {"ticks": 1, "tick": "1ns"}}`,
		`{"kind": "echo", "input": "` + strings.Repeat("x", maxBody) + `"}`,
		`{"kind": "echo", "priority": 5, "metadata": {"a": 1}}`,
	}
	config := func(c *httpapi.Config) { c.MaxBody = maxBody }
	single, batched := newFixture(t, config), newFixture(t, config)
	var want []int
	var problems []string
	for _, item := range items {
		resp := single.do(request{method: http.MethodPost, path: "/v1/jobs", key: acmeKey, body: item})
		want = append(want, resp.StatusCode)
		problems = append(problems, strings.TrimSpace(string(resp.body)))
	}
	entries := batched.batch(acmeKey, items...)
	if got := statuses(entries); !slices.Equal(got, want) {
		t.Fatalf("statuses %v, want as their own submits %v", got, want)
	}
	created := 0
	for i, e := range entries {
		if e.Status == http.StatusCreated {
			created++
			continue
		}
		if string(e.Problem) != problems[i] {
			t.Errorf("item %d: problem\n%s\nwant as its own submit's\n%s", i, e.Problem, problems[i])
		}
	}
	if created != 2 {
		t.Fatalf("%d created, want the 2 valid items", created)
	}
	if got := len(batched.list(acmeKey)); got != created {
		t.Errorf("%d jobs after the batch, want %d", got, created)
	}
	// Written: what two jobs write, as the two single submits wrote.
	if got, want := len(batched.written()), len(single.written()); got != want {
		t.Errorf("the batch wrote %d keys, its items' own submits %d:\n%v\n%v", got, want, batched.written(), single.written())
	}
}

// Items with idempotency keys are replayed as their own submits with the
// Idempotency-Key header are: the same body again is a 200 with the first
// job, another body a 422, and two items of one batch with one key are the
// first request and its replay.
//
// Fails when a replay creates another job, or when the items' keys are not
// the header's (a replay of a POST /v1/jobs not found).
func TestBatchReplaysIdempotentItems(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	resp := f.postJob(acmeKey, `{"kind": "echo", "input": {"a": 1}}`, "first")
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("submit: %s %s", resp.Status, resp.body)
	}
	first := decode[job.Job](t, resp)

	items := []string{
		`{"idempotency_key": "first", "input": {"a": 1}, "kind": "echo"}`,
		`{"kind": "echo", "input": {"a": 2}, "idempotency_key": "first"}`,
		`{"kind": "echo", "idempotency_key": "second"}`,
		`{"kind": "echo", "idempotency_key": "second"}`,
		`{"kind": "echo", "idempotency_key": "second", "priority": 1}`,
		`{"kind": "echo", "idempotency_key": ""}`,
		`{"kind": "echo", "idempotency_key": 7}`,
	}
	entries := f.batch(acmeKey, items...)
	if got, want := statuses(entries), []int{200, 422, 201, 200, 422, 400, 400}; !slices.Equal(got, want) {
		t.Fatalf("statuses %v, want %v", got, want)
	}
	if entries[0].Job.ID != first.ID {
		t.Errorf("replay of the first job answered %s, want %s", entries[0].Job.ID, first.ID)
	}
	second := entries[2].Job.ID
	if entries[3].Job.ID != second {
		t.Errorf("the replay in the batch answered %s, want %s", entries[3].Job.ID, second)
	}
	again := f.batch(acmeKey, items...)
	if got, want := statuses(again), []int{200, 422, 200, 200, 422, 400, 400}; !slices.Equal(got, want) {
		t.Fatalf("the batch again: statuses %v, want %v", got, want)
	}
	if again[2].Job.ID != second {
		t.Errorf("the batch again answered %s, want %s", again[2].Job.ID, second)
	}
	resp = f.postJob(acmeKey, `{"kind": "echo"}`, "second")
	if resp.StatusCode != http.StatusOK || decode[job.Job](t, resp).ID != second {
		t.Errorf("a POST /v1/jobs with the item's key: %s %s", resp.Status, resp.body)
	}
	if got := len(f.list(acmeKey)); got != 2 {
		t.Errorf("%d jobs, want 2", got)
	}
}

// A malformed batch is a 400 (a body too large a 413), and nothing of it
// is created, not even its valid items.
//
// Fails when a batch of 1001 items is cut to 1000 rather than refused.
func TestBatchMalformedCreatesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *httpapi.Config) { c.MaxBatchBody = 64 << 10 })
	many := func(n int) string {
		return `{"jobs": [` + strings.TrimSuffix(strings.Repeat(`{"kind":"echo"},`, n), ",") + `]}`
	}
	cases := []struct {
		name, body string
		status     int
		field      string
	}{
		{"not JSON", `jobs`, 400, ""},
		{"an array", `[{"kind": "echo"}]`, 400, ""},
		{"null", `null`, 400, ""},
		{"no jobs", `{}`, 400, "jobs"},
		{"jobs null", `{"jobs": null}`, 400, "jobs"},
		{"jobs an object", `{"jobs": {"kind": "echo"}}`, 400, "jobs"},
		{"no items", `{"jobs": []}`, 400, "jobs"},
		{"an unknown member", `{"jobs": [{"kind": "echo"}], "atomic": true}`, 400, "atomic"},
		{"truncated", `{"jobs": [{"kind": "echo"}`, 400, ""},
		{"1001 items", many(1001), 400, "jobs"},
		{"too large", `{"jobs": [{"kind": "echo", "input": "` + strings.Repeat("x", 64<<10) + `"}]}`, 413, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			expectProblem(t, f.postBatch(acmeKey, c.body), c.status, c.field)
		})
	}
	if keys := f.written(); len(keys) > 0 {
		t.Fatalf("malformed batches wrote %d keys: %v", len(keys), keys)
	}
	if got := statuses(f.batch(acmeKey, strings.Split(strings.Repeat(`{"kind":"echo"};`, 1000), ";")[:1000]...)); len(got) != 1000 {
		t.Fatalf("1000 items: %d entries", len(got))
	}
}

// The tenant's cap on jobs not ended is counted item by item: the items
// that fit are created, in order, the others are 429, and a replay is
// answered at the cap.
//
// Fails when the items of a batch are counted against the cap only as it
// stood before the batch (all of them fit, or none).
func TestBatchTenantCapItemByItem(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *httpapi.Config) { c.TenantMaxJobs = 4 })
	f.submit(acmeKey, `{"kind": "echo", "queue": "gpu"}`)
	entries := f.batch(acmeKey,
		`{"kind": "echo", "idempotency_key": "k"}`,
		`{"kind": "echo", "queue": "batch"}`,
		`{"kind": "echo"}`,
		`{"kind": "echo", "queue": "batch"}`,
		`{"kind": "echo", "idempotency_key": "k"}`,
		`{"kind": "echo", "idempotency_key": "over"}`,
	)
	if got, want := statuses(entries), []int{201, 201, 201, 429, 200, 429}; !slices.Equal(got, want) {
		t.Fatalf("statuses %v, want %v", got, want)
	}
	var p problemBody
	if err := json.Unmarshal(entries[3].Problem, &p); err != nil || p.Detail != "tenant has 4 jobs not ended, the cap is 4; retry once some have ended" {
		t.Errorf("the refused item's problem: %s", entries[3].Problem)
	}
	if got := len(f.list(acmeKey)); got != 4 {
		t.Errorf("%d jobs, want the cap's 4", got)
	}
	// The refused key left no record: once there is room it is a new
	// request, whatever its body.
	if resp := f.post(acmeKey, "/v1/jobs/"+entries[0].Job.ID+"/cancel"); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("cancel: %s %s", resp.Status, resp.body)
	}
	if got := statuses(f.batch(acmeKey, `{"kind": "echo", "idempotency_key": "over", "priority": 3}`)); got[0] != http.StatusCreated {
		t.Errorf("the refused key once there is room: %v", got)
	}
}

// The submission rate is spent one unit per item, item by item, before
// any item is decoded: an invalid item spends its unit (it is decoded
// only once the rate admitted it), a replay spends nothing, the items past
// the rate are 429, and the answer carries the RateLimit headers and
// Retry-After.
//
// Fails when the batch asks the limiter for all its items at once (none
// is admitted over the rate), or when a replay spends a unit.
func TestBatchRateItemByItem(t *testing.T) {
	t.Parallel()
	f := newFixture(t, withRate(t, "4/h"))
	if resp := f.postJob(acmeKey, `{"kind": "echo"}`, "paid"); resp.StatusCode != http.StatusCreated {
		t.Fatalf("submit: %s %s", resp.Status, resp.body)
	}
	resp := f.postBatch(acmeKey, `{"jobs": [
		{"kind": "Echo"},
		{"kind": "echo", "idempotency_key": "paid"},
		{"kind": "echo"},
		{"kind": "echo", "idempotency_key": "new"},
		{"kind": "echo"},
		{"kind": "echo"},
		{"kind": "echo", "idempotency_key": "late"}
	]}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("batch: %s %s", resp.Status, resp.body)
	}
	entries := decode[struct{ Jobs []batchEntry }](t, resp).Jobs
	if got, want := statuses(entries), []int{400, 200, 201, 201, 429, 429, 429}; !slices.Equal(got, want) {
		t.Fatalf("statuses %v, want %v", got, want)
	}
	expectRateHeaders(t, resp, `"default";q=4;w=3600;burst=4`)
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || s < 1 {
		t.Errorf("Retry-After %q", resp.Header.Get("Retry-After"))
	}
	if got := len(f.list(acmeKey)); got != 3 {
		t.Errorf("%d jobs, want the rate's 4 but the invalid item's", got)
	}
	// The key refused for the rate left no record: it is a new request.
	if resp := f.postJob(acmeKey, `{"kind": "echo"}`, "late"); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("the refused key again: %s %s", resp.Status, resp.body)
	}
}

// A batch longer than one run of the submit script (job.SubmitChunk
// items; a queue's runs are pipelined) is answered as one that is not:
// an item sees the items of the runs before it, as the items' own submits
// sent one after another would. Its idempotency key replays an earlier
// run's job, and the tenant's cap counts the jobs the earlier runs
// created.
//
// Fails when the runs are taken out of order or each against the counts
// before the batch (a later run's job created before an earlier one's, a
// key created twice), or when an answer goes to another run's item.
func TestBatchRunsSeeTheRunsBefore(t *testing.T) {
	t.Parallel()
	const n, cap = 2*job.SubmitChunk + 50, job.SubmitChunk + 30
	f := newFixture(t, func(c *httpapi.Config) { c.TenantMaxJobs = cap })
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf(`{"kind": "echo", "metadata": {"n": %d}}`, i)
	}
	items[1] = `{"kind": "echo", "metadata": {"n": 1}, "idempotency_key": "k"}`
	items[job.SubmitChunk+1] = `{"kind": "echo", "metadata": {"n": 1}, "idempotency_key": "k"}`
	items[n-1] = `{"kind": "echo", "metadata": {"n": 1}, "idempotency_key": "k"}`
	entries := f.batch(acmeKey, items...)
	for i, e := range entries {
		want := http.StatusCreated
		switch {
		case i == job.SubmitChunk+1 || i == n-1:
			want = http.StatusOK // the replay of item 1, in a later run
		case i > cap:
			want = http.StatusTooManyRequests // item 0 to cap, but the replay, are the cap's jobs
		}
		if e.Status != want {
			t.Fatalf("item %d: %d %s, want %d", i, e.Status, e.Problem, want)
		}
		if e.Job == nil {
			continue
		}
		if want == http.StatusOK {
			if e.Job.ID != entries[1].Job.ID {
				t.Errorf("item %d replayed %s, want item 1's %s", i, e.Job.ID, entries[1].Job.ID)
			}
		} else if got := string(e.Job.Metadata); got != fmt.Sprintf(`{"n":%d}`, i) {
			t.Fatalf("item %d answered with the job of metadata %s", i, got)
		}
	}
	if got := len(f.list(acmeKey)); got != cap {
		t.Errorf("%d jobs, want the cap's %d", got, cap)
	}
}
