package httpapi_test

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/kinds"
	"github.com/leasehold/leasehold/ratelimit/usage"
)

// usageReport is GET /v1/usage's body as a client reads it.
type usageReport struct {
	Tenant string `json:"tenant"`
	From   string `json:"from"`
	To     string `json:"to"`
	Days   []struct {
		Date   string           `json:"date"`
		Counts map[string]int64 `json:"counts"`
	} `json:"days"`
}

// usageAround asks, with key, for the usage of the days around today, so a
// test that runs over midnight UTC sees all of its counts; it returns them
// summed over the days.
func (f *fixture) usageAround(key, tenant string) map[string]int64 {
	f.t.Helper()
	now := time.Now().UTC()
	q := url.Values{"from": {now.AddDate(0, 0, -1).Format(time.DateOnly)}, "to": {now.AddDate(0, 0, 1).Format(time.DateOnly)}}
	if tenant != "" {
		q.Set("tenant", tenant)
	}
	resp := f.get(key, "/v1/usage?"+q.Encode())
	if resp.StatusCode != http.StatusOK {
		f.t.Fatalf("usage: %s %s", resp.Status, resp.body)
	}
	r := decode[usageReport](f.t, resp)
	if len(r.Days) != 3 || r.From != q.Get("from") || r.To != q.Get("to") {
		f.t.Fatalf("usage of %s to %s: %s", q.Get("from"), q.Get("to"), resp.body)
	}
	sum := map[string]int64{}
	for _, d := range r.Days {
		for k, v := range d.Counts {
			sum[k] += v
		}
	}
	return sum
}

// A small real workload is counted exactly: a job that succeeds, one whose
// first attempt fails and is retried, one cancelled while it runs, and an
// idempotent replay, which counts nothing. The tenant sees its counts, the
// admin sees them with tenant=, and another tenant sees none of them.
func TestUsageCountsWorkload(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	counters, err := usage.New(store.New(f.rdb, store.Config{Prefix: f.prefix}), usage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	f.startWorker(map[string]execution.Handler{
		"echo": kinds.Echo,
		"flaky": func(_ context.Context, e *execution.Execution) (any, error) {
			if e.Attempt() == 1 {
				return nil, errors.New("first attempt fails")
			}
			return "ok", nil
		},
		"block": func(ctx context.Context, _ *execution.Execution) (any, error) {
			<-ctx.Done()
			return nil, context.Cause(ctx)
		},
	}, func(c *execution.Config) {
		c.Usage = counters
		c.Backoff = func(int) time.Duration { return 10 * time.Millisecond }
	})

	echo := f.postJob(acmeKey, `{"kind": "echo", "input": 1}`, "once")
	if echo.StatusCode != http.StatusCreated {
		t.Fatalf("submit: %s %s", echo.Status, echo.body)
	}
	if replay := f.postJob(acmeKey, `{"kind": "echo", "input": 1}`, "once"); replay.StatusCode != http.StatusOK {
		t.Fatalf("replay: %s %s", replay.Status, replay.body)
	}
	flaky := f.submit(acmeKey, `{"kind": "flaky", "max_attempts": 2}`)
	block := f.submit(acmeKey, `{"kind": "block", "timeout": "1h"}`)
	f.awaitState(decode[job.Job](t, echo).ID, job.StateSucceeded)
	f.awaitState(flaky.ID, job.StateSucceeded)
	f.awaitState(block.ID, job.StateRunning)
	if resp := f.do(request{method: http.MethodPost, path: "/v1/jobs/" + block.ID + "/cancel", key: acmeKey}); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("cancel: %s %s", resp.Status, resp.body)
	}
	f.awaitState(block.ID, job.StateCancelled)

	want := map[string]int64{
		usage.JobsSubmitted:                3,
		usage.ExecutionsStarted:            4,
		usage.ExecutionsEnded("succeeded"): 2,
		usage.ExecutionsEnded("failed"):    1,
		usage.ExecutionsEnded("cancelled"): 1,
	}
	// Each is counted in the step that moves its job: the counts are
	// there once the states are.
	if got := f.usageAround(acmeKey, ""); !maps.Equal(got, want) {
		t.Errorf("acme's usage: %v, want %v", got, want)
	}
	if got := f.usageAround(adminKey, "acme"); !maps.Equal(got, want) {
		t.Errorf("acme's usage read by the admin: %v, want %v", got, want)
	}
	if got := f.usageAround(globexKey, ""); len(got) != 0 {
		t.Errorf("globex's usage: %v, want none", got)
	}
	if got := f.usageAround(adminKey, ""); len(got) != 0 {
		t.Errorf("the admin's own usage: %v, want none", got)
	}
}

// Another tenant's usage is not readable, and the answer says so without
// a count.
func TestUsageOtherTenant(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.submit(acmeKey, `{"kind": "echo"}`)
	today := time.Now().UTC().Format(time.DateOnly)
	resp := f.get(globexKey, "/v1/usage?from="+today+"&to="+today+"&tenant=acme")
	expectProblem(t, resp, http.StatusBadRequest, "tenant")
	expectProblem(t, f.get("", "/v1/usage?from="+today+"&to="+today), http.StatusUnauthorized, "")
	// Naming oneself is fine.
	if got := f.usageAround(acmeKey, "acme"); got[usage.JobsSubmitted] != 1 {
		t.Errorf("acme's own usage with tenant=acme: %v", got)
	}
}

// Bad ranges are 400s naming the field, and write nothing.
func TestUsageBadInput(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	before := f.written()
	for _, tc := range []struct{ query, field string }{
		{"", "from"},
		{"from=2026-01-01", "to"},
		{"to=2026-01-01", "from"},
		{"from=2026-1-1&to=2026-01-02", "from"},
		{"from=2026-01-01&to=2026-02-30", "to"},
		{"from=yesterday&to=2026-01-02", "from"},
		{"from=2026-01-02&to=2026-01-01", "to"},
		{"from=2025-01-01&to=2026-01-02", "to"}, // 367 days: one too many
		{"from=2026-01-01&to=2026-01-01&tenant=", "tenant"},
	} {
		expectProblem(t, f.get(acmeKey, "/v1/usage?"+tc.query), http.StatusBadRequest, tc.field)
	}
	expectProblem(t, f.get(adminKey, "/v1/usage?from=2026-01-01&to=2026-01-01&tenant=a{b}"), http.StatusBadRequest, "tenant")
	// The longest range is fine.
	resp := f.get(acmeKey, "/v1/usage?from=2025-01-01&to=2026-01-01")
	if resp.StatusCode != http.StatusOK || len(decode[usageReport](t, resp).Days) != usage.MaxDays {
		t.Fatalf("%d days: %s", usage.MaxDays, resp.Status)
	}
	if after := f.written(); !slices.Equal(before, after) {
		t.Errorf("bad requests wrote keys: %v", after)
	}
}
