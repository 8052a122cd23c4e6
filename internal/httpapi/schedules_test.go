package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/httpapi"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/schedule"
)

func (f *fixture) postBody(key, path, body string) response {
	f.t.Helper()
	return f.do(request{method: http.MethodPost, path: path, key: key, body: body})
}

func TestSchedulesCreateConflictAndFieldErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	body := `{"name": "nightly", "cron": "0 3 * * *", "timezone": "Europe/Berlin", "job": {"kind": "echo", "input": {"a": 1, "b": 2}}, "overlap": "skip"}`
	resp := f.postBody(acmeKey, "/v1/schedules", body)
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Location") != "/v1/schedules/nightly" {
		t.Fatalf("create: %s %s", resp.Status, resp.body)
	}
	sch := decode[schedule.Schedule](t, resp)
	if sch.Name != "nightly" || sch.Timezone != "Europe/Berlin" || sch.Overlap != schedule.OverlapSkip || sch.Paused || sch.NextRunAt == nil || sch.LastJobID != nil {
		t.Fatalf("created %s", resp.body)
	}
	// The same body, its keys in another order: 200 with the schedule.
	same := `{"job": {"input": {"b": 2, "a": 1}, "kind": "echo"}, "overlap": "skip", "timezone": "Europe/Berlin", "cron": "0 3 * * *", "name": "nightly"}`
	if resp := f.postBody(acmeKey, "/v1/schedules", same); resp.StatusCode != http.StatusOK {
		t.Fatalf("identical body: %s %s", resp.Status, resp.body)
	}
	expectProblem(t, f.postBody(acmeKey, "/v1/schedules", strings.Replace(body, "0 3", "0 4", 1)), http.StatusConflict, "name")
	// Another tenant's names are its own.
	if resp := f.postBody(globexKey, "/v1/schedules", strings.Replace(body, "0 3", "0 4", 1)); resp.StatusCode != http.StatusCreated {
		t.Fatalf("globex's nightly: %s %s", resp.Status, resp.body)
	}

	for _, c := range []struct{ body, field string }{
		{`{"name": "a", "cron": "0 25 * * *", "job": {"kind": "echo"}}`, "cron"},
		{`{"name": "a", "cron": "@every 10ms", "job": {"kind": "echo"}}`, "cron"},
		{`{"name": "a", "cron": "@hourly", "timezone": "Europe/Nowhere", "job": {"kind": "echo"}}`, "timezone"},
		{`{"name": "-a", "cron": "@hourly", "job": {"kind": "echo"}}`, "name"},
		{`{"name": "a", "cron": "@hourly", "overlap": "never", "job": {"kind": "echo"}}`, "overlap"},
		{`{"name": "a", "cron": "@hourly"}`, "job"},
		{`{"name": "a", "cron": "@hourly", "job": {"kind": "echo", "max_attempts": 0}}`, "job.max_attempts"},
		{`{"name": "a", "cron": "@hourly", "job": {"kind": "echo", "colour": "red"}}`, "job.colour"},
		{`{"name": "a", "cron": "@hourly", "job": {"kind": "echo", "queue": "elsewhere"}}`, "job.queue"},
		// Keys a tenant may not name (no limit, another tenant's): refused
		// at create, as a submit is, not left to fail at every fire.
		{`{"name": "a", "cron": "@hourly", "job": {"kind": "echo", "concurrency_keys": ["anything:x"]}}`, "job.concurrency_keys[0]"},
		{`{"name": "a", "cron": "@hourly", "job": {"kind": "echo", "concurrency_keys": ["tenant:globex"]}}`, "job.concurrency_keys[0]"},
		{`{"name": "a", "cron": "@hourly", "job": {"kind": "echo"}, "every": "1s"}`, "every"},
	} {
		expectProblem(t, f.postBody(acmeKey, "/v1/schedules", c.body), http.StatusBadRequest, c.field)
	}
	list := decode[struct{ Schedules []schedule.Schedule }](t, f.get(acmeKey, "/v1/schedules"))
	if len(list.Schedules) != 1 || list.Schedules[0].Name != "nightly" {
		t.Fatalf("acme's schedules after the refusals: %+v", list)
	}
}

func TestSchedulesPauseResumeTriggerDeleteAndTenants(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	resp := f.postBody(acmeKey, "/v1/schedules", `{"name": "hourly.report", "cron": "@hourly", "job": {"kind": "echo", "metadata": {"team": "ops"}}}`)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %s %s", resp.Status, resp.body)
	}
	path := "/v1/schedules/hourly.report"
	// Another tenant: as absent as a schedule that does not exist.
	expectProblem(t, f.get(globexKey, path), http.StatusNotFound, "")
	expectProblem(t, f.post(globexKey, path+"/pause"), http.StatusNotFound, "")
	expectProblem(t, f.post(globexKey, path+"/trigger"), http.StatusNotFound, "")
	expectProblem(t, f.do(request{method: http.MethodDelete, path: path, key: globexKey}), http.StatusNotFound, "")
	expectProblem(t, f.get(acmeKey, "/v1/schedules/nope"), http.StatusNotFound, "")

	paused := decode[schedule.Schedule](t, f.post(acmeKey, path+"/pause"))
	if !paused.Paused || paused.NextRunAt != nil {
		t.Fatalf("paused: %+v", paused)
	}
	resp = f.post(acmeKey, path+"/trigger")
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("trigger: %s %s", resp.Status, resp.body)
	}
	j := decode[job.Job](t, resp)
	if j.Schedule == nil || *j.Schedule != "hourly.report" || !strings.Contains(string(j.Metadata), `"scheduled_for":"`) || !strings.Contains(string(j.Metadata), `"team":"ops"`) {
		t.Fatalf("triggered job %s", resp.body)
	}
	if got := decode[job.Job](t, f.get(acmeKey, "/v1/jobs/"+j.ID)); got.Schedule == nil || *got.Schedule != "hourly.report" {
		t.Fatalf("GET of the job: schedule %v", got.Schedule)
	}
	sch := decode[schedule.Schedule](t, f.get(acmeKey, path))
	if sch.LastJobID == nil || *sch.LastJobID != j.ID || sch.LastRunAt == nil || !sch.Paused {
		t.Fatalf("after the trigger: %+v", sch)
	}
	resumed := decode[schedule.Schedule](t, f.post(acmeKey, path+"/resume"))
	if resumed.Paused || resumed.NextRunAt == nil || !resumed.NextRunAt.After(time.Now()) {
		t.Fatalf("resumed: %+v", resumed)
	}
	if resp := f.do(request{method: http.MethodDelete, path: path, key: acmeKey}); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %s %s", resp.Status, resp.body)
	}
	expectProblem(t, f.get(acmeKey, path), http.StatusNotFound, "")
	// The job it fired stays.
	if resp := f.get(acmeKey, "/v1/jobs/"+j.ID); resp.StatusCode != http.StatusOK {
		t.Fatalf("the fired job after the delete: %s", resp.Status)
	}
}

// A trigger counts against the tenant's cap like a submission.
func TestScheduleTriggerCountsAgainstTheCap(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *httpapi.Config) { c.TenantMaxJobs = 1 })
	if resp := f.postBody(acmeKey, "/v1/schedules", `{"name": "t", "cron": "@hourly", "job": {"kind": "echo", "queue": "idle"}}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %s %s", resp.Status, resp.body)
	}
	if resp := f.post(acmeKey, "/v1/schedules/t/trigger"); resp.StatusCode != http.StatusCreated {
		t.Fatalf("first trigger: %s %s", resp.Status, resp.body)
	}
	expectProblem(t, f.post(acmeKey, "/v1/schedules/t/trigger"), http.StatusTooManyRequests, "")
}
