package httpapi_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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

// The 1,001st schedule of a tenant (the default cap) is refused, however
// many requests create at once; the same body again still answers 200,
// another tenant still creates, and a delete frees a place.
func TestSchedulesTenantCap(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	body := func(name string) string {
		return `{"name": "` + name + `", "cron": "@hourly", "job": {"kind": "echo", "queue": "idle"}}`
	}
	const tries = schedule.DefaultTenantMax + 20
	var created, refused atomic.Int64
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < tries; i += 16 {
				resp := f.postBody(acmeKey, "/v1/schedules", body(fmt.Sprintf("s-%04d", i)))
				switch resp.StatusCode {
				case http.StatusCreated:
					created.Add(1)
				case http.StatusTooManyRequests:
					refused.Add(1)
				default:
					t.Errorf("create s-%04d: %s %s", i, resp.Status, resp.body)
				}
			}
		})
	}
	wg.Wait()
	if created.Load() != schedule.DefaultTenantMax || refused.Load() != tries-schedule.DefaultTenantMax {
		t.Fatalf("%d created, %d refused; want %d and %d", created.Load(), refused.Load(), schedule.DefaultTenantMax, tries-schedule.DefaultTenantMax)
	}
	expectProblem(t, f.postBody(acmeKey, "/v1/schedules", body("one-more")), http.StatusTooManyRequests, "name")
	if resp := f.postBody(acmeKey, "/v1/schedules", body("s-0000")); resp.StatusCode != http.StatusOK {
		t.Fatalf("the same body again at the cap: %s %s", resp.Status, resp.body)
	}
	if resp := f.postBody(globexKey, "/v1/schedules", body("one-more")); resp.StatusCode != http.StatusCreated {
		t.Fatalf("another tenant: %s %s", resp.Status, resp.body)
	}
	if resp := f.do(request{method: http.MethodDelete, path: "/v1/schedules/s-0000", key: acmeKey}); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %s %s", resp.Status, resp.body)
	}
	if resp := f.postBody(acmeKey, "/v1/schedules", body("one-more")); resp.StatusCode != http.StatusCreated {
		t.Fatalf("after a delete: %s %s", resp.Status, resp.body)
	}
	expectProblem(t, f.postBody(acmeKey, "/v1/schedules", body("two-more")), http.StatusTooManyRequests, "name")
}

// Creating a schedule spends one unit of the tenant's submission rate; the
// same body again, or a taken name, spends none, and a refusal changes
// nothing.
func TestSchedulesCreateSpendsTheRate(t *testing.T) {
	t.Parallel()
	f := newFixture(t, withRate(t, "1/h:2"))
	body := func(name string) string {
		return `{"name": "` + name + `", "cron": "@hourly", "job": {"kind": "echo", "queue": "idle"}}`
	}
	for _, name := range []string{"a", "b"} {
		if resp := f.postBody(acmeKey, "/v1/schedules", body(name)); resp.StatusCode != http.StatusCreated {
			t.Fatalf("create %s: %s %s", name, resp.Status, resp.body)
		}
	}
	resp := f.postBody(acmeKey, "/v1/schedules", body("c"))
	expectProblem(t, resp, http.StatusTooManyRequests, "")
	if resp.Header.Get("Retry-After") == "" {
		t.Errorf("429 without Retry-After")
	}
	expectProblem(t, f.get(acmeKey, "/v1/schedules/c"), http.StatusNotFound, "")
	if resp := f.postBody(acmeKey, "/v1/schedules", body("a")); resp.StatusCode != http.StatusOK {
		t.Fatalf("the same body again: %s %s", resp.Status, resp.body)
	}
	expectProblem(t, f.postBody(acmeKey, "/v1/schedules", strings.Replace(body("a"), "@hourly", "@daily", 1)), http.StatusConflict, "name")
	// A body refused as bad spends nothing, as a bad submission does not.
	g := newFixture(t, withRate(t, "1/h:1"))
	for _, bad := range []struct{ field, body string }{
		{"cron", strings.Replace(body("d"), "@hourly", "0 25 * * *", 1)},
		{"cron", strings.Replace(body("d"), "@hourly", "0 0 30 2 *", 1)}, // never comes due
		{"name", body("Not A Name")},
	} {
		expectProblem(t, g.postBody(acmeKey, "/v1/schedules", bad.body), http.StatusBadRequest, bad.field)
	}
	if resp := g.postBody(acmeKey, "/v1/schedules", body("d")); resp.StatusCode != http.StatusCreated {
		t.Fatalf("create after bad bodies: %s %s", resp.Status, resp.body)
	}
	// Another tenant's rate is its own.
	if resp := f.postBody(globexKey, "/v1/schedules", body("c")); resp.StatusCode != http.StatusCreated {
		t.Fatalf("another tenant: %s %s", resp.Status, resp.body)
	}
}

// GET /v1/schedules is paged: walking its cursors lists every schedule
// exactly once, in name order, while schedules are deleted and created
// between pages; a bad cursor or limit is a 400.
func TestSchedulesListPaging(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	create := func(name string) {
		t.Helper()
		resp := f.postBody(acmeKey, "/v1/schedules", `{"name": "`+name+`", "cron": "@hourly", "job": {"kind": "echo", "queue": "idle"}}`)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("create %s: %s %s", name, resp.Status, resp.body)
		}
	}
	const n = 120
	for i := range n {
		create(fmt.Sprintf("s-%03d", i))
	}
	type page struct {
		Schedules  []schedule.Schedule
		NextCursor *string `json:"next_cursor"`
	}
	if first := decode[page](t, f.get(acmeKey, "/v1/schedules")); len(first.Schedules) != 50 || first.NextCursor == nil {
		t.Fatalf("default page: %d schedules, next %v", len(first.Schedules), first.NextCursor)
	}
	seen := map[string]int{}
	var order []string
	path := "/v1/schedules?limit=7"
	for pages := 0; ; pages++ {
		if pages > n {
			t.Fatal("paging does not end")
		}
		p := decode[page](t, f.get(acmeKey, path))
		if len(p.Schedules) > 7 {
			t.Fatalf("a page of %d with limit 7", len(p.Schedules))
		}
		for _, s := range p.Schedules {
			seen[s.Name]++
			order = append(order, s.Name)
		}
		if pages == 2 {
			// Behind the walk and ahead of it: neither moves a name it
			// has not listed yet.
			if resp := f.do(request{method: http.MethodDelete, path: "/v1/schedules/s-000", key: acmeKey}); resp.StatusCode != http.StatusNoContent {
				t.Fatalf("delete: %s", resp.Status)
			}
			create("s-999")
		}
		if p.NextCursor == nil {
			break
		}
		path = "/v1/schedules?limit=7&cursor=" + *p.NextCursor
	}
	if len(seen) != n+1 || !slices.IsSorted(order) {
		t.Fatalf("walked %d names (want %d), sorted %v", len(seen), n+1, slices.IsSorted(order))
	}
	for name, times := range seen {
		if times != 1 {
			t.Fatalf("%s listed %d times", name, times)
		}
	}
	// Another tenant's list is its own.
	if other := decode[page](t, f.get(globexKey, "/v1/schedules")); len(other.Schedules) != 0 || other.NextCursor != nil {
		t.Fatalf("globex sees %d schedules", len(other.Schedules))
	}
	for _, q := range []string{"cursor=%25%25", "cursor=bm90IGEgbmFtZSE", "limit=0", "limit=501", "limit=x"} {
		field, _, _ := strings.Cut(q, "=")
		expectProblem(t, f.get(acmeKey, "/v1/schedules?"+q), http.StatusBadRequest, field)
	}
}

// PUT /v1/schedules/{name} replaces a schedule's cron, timezone, job and
// overlap and keeps its history; a bad body or name is a 400 naming the
// field and changes nothing; an absent schedule, or another tenant's, is
// a 404. Each update spends one unit of the submission rate; a refused
// one spends nothing.
func TestSchedulesUpdate(t *testing.T) {
	t.Parallel()
	f := newFixture(t, withRate(t, "1/h:4"))
	const path = "/v1/schedules/nightly"
	put := func(key, body string) response {
		t.Helper()
		return f.do(request{method: http.MethodPut, path: path, key: key, body: body})
	}
	if resp := f.postBody(acmeKey, "/v1/schedules", `{"name": "nightly", "cron": "0 3 * * *", "timezone": "Europe/Berlin", "job": {"kind": "echo"}, "overlap": "skip"}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %s %s", resp.Status, resp.body)
	}
	fired := decode[job.Job](t, f.post(acmeKey, path+"/trigger"))
	before := decode[schedule.Schedule](t, f.get(acmeKey, path))

	body := `{"cron": "30 4 * * *", "timezone": "UTC", "job": {"kind": "echo", "input": {"v": 2}}}`
	resp := put(acmeKey, body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("update: %s %s", resp.Status, resp.body)
	}
	got := decode[schedule.Schedule](t, resp)
	if got.Cron != "30 4 * * *" || got.Timezone != "UTC" || got.Overlap != schedule.OverlapAllow || string(got.Job.Input) != `{"v":2}` {
		t.Fatalf("updated %s", resp.body)
	}
	if got.LastJobID == nil || *got.LastJobID != fired.ID || !got.LastRunAt.Equal(*before.LastRunAt) || !got.CreatedAt.Equal(before.CreatedAt) {
		t.Fatalf("history after the update %s, want it as before", resp.body)
	}
	if n := got.NextRunAt; n == nil || n.UTC().Hour() != 4 || n.Minute() != 30 {
		t.Fatalf("next_run_at %v, want 04:30 UTC", got.NextRunAt)
	}
	if g := decode[schedule.Schedule](t, f.get(acmeKey, path)); g.Cron != "30 4 * * *" || g.LastJobID == nil {
		t.Fatalf("GET after the update %+v", g)
	}

	for _, c := range []struct{ body, field string }{
		{`{"name": "other", "cron": "@hourly", "job": {"kind": "echo"}}`, "name"},
		{`{"cron": "0 25 * * *", "job": {"kind": "echo"}}`, "cron"},
		{`{"cron": "@hourly", "timezone": "Europe/Nowhere", "job": {"kind": "echo"}}`, "timezone"},
		{`{"cron": "@hourly"}`, "job"},
		{`{"cron": "@hourly", "job": {"kind": "echo", "max_attempts": 1000}}`, "job.max_attempts"},
		{`{"cron": "@hourly", "job": {"kind": "echo"}, "paused": true}`, "paused"},
	} {
		expectProblem(t, put(acmeKey, c.body), http.StatusBadRequest, c.field)
	}
	if g := decode[schedule.Schedule](t, f.get(acmeKey, path)); g.Cron != "30 4 * * *" || string(g.Job.Input) != `{"v":2}` {
		t.Fatalf("refused updates changed the schedule: %+v", g)
	}
	expectProblem(t, put(globexKey, body), http.StatusNotFound, "")
	expectProblem(t, f.do(request{method: http.MethodPut, path: "/v1/schedules/nope", key: acmeKey, body: body}), http.StatusNotFound, "")

	// The create, the trigger and the update spent 3 of the burst of 4;
	// the name given in the body, when it is the path's, is accepted.
	if resp := put(acmeKey, `{"name": "nightly", "cron": "@daily", "job": {"kind": "echo"}}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("update with the name: %s %s", resp.Status, resp.body)
	}
	resp = put(acmeKey, body)
	expectProblem(t, resp, http.StatusTooManyRequests, "")
	if g := decode[schedule.Schedule](t, f.get(acmeKey, path)); g.Cron != "@daily" {
		t.Fatalf("an update over the rate changed the schedule: %+v", g)
	}
}
