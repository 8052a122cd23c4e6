package httpapi_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/job"
)

func TestUnauthenticated(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.submit(acmeKey, `{"kind": "echo"}`).ID
	authorizations := []string{
		"",
		"Bearer",
		"Bearer ",
		"Bearer wrong-key",
		"Bearer " + acmeKey + "x",
		"Bearer " + acmeKey[:len(acmeKey)-1],
		"Basic " + acmeKey,
		acmeKey,
		"Bearer" + acmeKey,
	}
	routes := []request{
		{method: http.MethodGet, path: "/v1/jobs"},
		{method: http.MethodPost, path: "/v1/jobs", body: `{"kind": "echo"}`},
		{method: http.MethodGet, path: "/v1/jobs/" + id},
		{method: http.MethodPost, path: "/v1/jobs/" + id + "/cancel"},
		{method: http.MethodGet, path: "/v1/jobs/" + id + "/events"},
		{method: http.MethodGet, path: "/v1/queues"},
	}
	for _, auth := range authorizations {
		for _, r := range routes {
			r.header = http.Header{"Authorization": {auth}}
			resp := f.do(r)
			expectProblem(t, resp, http.StatusUnauthorized, "")
			if got := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
				t.Errorf("WWW-Authenticate %q", got)
			}
		}
	}
	if j := f.job(id); j.State != job.StateQueued {
		t.Errorf("an unauthenticated cancel changed the job: %s", j.State)
	}
	if list := decode[listBody](t, f.get(adminKey, "/v1/jobs")); len(list.Jobs) != 1 {
		t.Errorf("unauthenticated submits created jobs: %d jobs", len(list.Jobs))
	}
	// The scheme is case-insensitive, and more than one space may follow it.
	for _, auth := range []string{"bearer " + acmeKey, "BEARER " + acmeKey, "Bearer   " + acmeKey} {
		if resp := f.do(request{method: http.MethodGet, path: "/v1/jobs/" + id, header: http.Header{"Authorization": {auth}}}); resp.StatusCode != 200 {
			t.Errorf("%q: %s", auth, resp.Status)
		}
	}
}

// Another tenant's job is answered exactly like a job that does not exist,
// on every route, and is left as it was.
func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	mine := f.submit(acmeKey, `{"kind": "echo", "metadata": {"secret": "acme"}}`)
	const missing = "0192a000-0000-7000-8000-000000000000"

	for _, suffix := range []string{"", "/events", "?wait=1s"} {
		theirs := f.get(globexKey, "/v1/jobs/"+mine.ID+suffix)
		none := f.get(globexKey, "/v1/jobs/"+missing+suffix)
		expectProblem(t, theirs, 404, "")
		if !bytes.Equal(theirs.body, none.body) || theirs.StatusCode != none.StatusCode {
			t.Errorf("%s: another tenant's job %s differs from a missing one %s", suffix, theirs.body, none.body)
		}
	}
	theirs := f.do(request{method: http.MethodPost, path: "/v1/jobs/" + mine.ID + "/cancel", key: globexKey})
	none := f.do(request{method: http.MethodPost, path: "/v1/jobs/" + missing + "/cancel", key: globexKey})
	expectProblem(t, theirs, 404, "")
	if !bytes.Equal(theirs.body, none.body) {
		t.Errorf("cancel: %s differs from %s", theirs.body, none.body)
	}
	if j := f.job(mine.ID); j.State != job.StateQueued || j.CancelRequested {
		t.Errorf("another tenant's cancel changed the job: %+v", j)
	}
	if list := decode[listBody](t, f.get(globexKey, "/v1/jobs")); len(list.Jobs) != 0 {
		t.Errorf("globex lists acme's jobs: %v", list.ids())
	}
	if list := decode[listBody](t, f.get(acmeKey, "/v1/jobs")); len(list.Jobs) != 1 || list.Jobs[0].ID != mine.ID {
		t.Errorf("acme lists %v", list.ids())
	}
}

func TestAdminSeesAndActsOnEveryTenant(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	acme := f.submit(acmeKey, `{"kind": "echo"}`)
	globex := f.submit(globexKey, `{"kind": "echo"}`)

	if j := decode[job.Job](t, f.get(adminKey, "/v1/jobs/"+acme.ID)); j.Tenant != "acme" {
		t.Errorf("admin reads %+v", j)
	}
	all := decode[listBody](t, f.get(adminKey, "/v1/jobs"))
	if got := all.ids(); len(got) != 2 || got[0] != globex.ID || got[1] != acme.ID {
		t.Errorf("admin lists %v, want [%s %s]", got, globex.ID, acme.ID)
	}
	for tenant, want := range map[string]string{"acme": acme.ID, "globex": globex.ID} {
		list := decode[listBody](t, f.get(adminKey, "/v1/jobs?tenant="+tenant))
		if got := list.ids(); len(got) != 1 || got[0] != want {
			t.Errorf("tenant=%s: %v, want [%s]", tenant, got, want)
		}
	}
	if list := decode[listBody](t, f.get(adminKey, "/v1/jobs?tenant=nobody")); len(list.Jobs) != 0 {
		t.Errorf("tenant=nobody: %v", list.ids())
	}
	expectProblem(t, f.get(adminKey, "/v1/jobs?tenant=a:b"), 400, "tenant")

	resp := f.do(request{method: http.MethodPost, path: "/v1/jobs/" + globex.ID + "/cancel", key: adminKey})
	if resp.StatusCode != http.StatusAccepted || decode[job.Job](t, resp).State != job.StateCancelled {
		t.Errorf("admin cancel: %s %s", resp.Status, resp.body)
	}
	stream := f.get(adminKey, "/v1/jobs/"+globex.ID+"/events")
	if stream.StatusCode != 200 || !strings.Contains(string(stream.body), `"state":"cancelled"`) {
		t.Errorf("admin events: %s %s", stream.Status, stream.body)
	}
}

// Hostile job ids in paths are not found, on every route, and write
// nothing.
func TestHostileJobIDs(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ids := []string{
		"..",
		"..%2F..%2Fqueues",
		"%2E%2E",
		"%2F",
		"a%2Fb",
		"%2e%2e%2fv1%2fqueues",
		"{q:default}:job:x",
		"%7Bq:default%7D",
		"%7B%7D",
		"ü",
		"%C3%BC%F0%9F%98%80",
		"%00",
		"%0D%0AX-Injected:%201",
		"%FF%FE",
		"*",
		"0192a000-0000-7000-8000-00000000000",    // one digit short
		"0192A000-0000-7000-8000-000000000000",   // upper case: not the canonical form
		"{0192a000-0000-7000-8000-000000000000}", // braces around a valid id
		"urn:uuid:0192a000-0000-7000-8000-000000000000",
		"0192a000-0000-7000-8000-000000000000%20",
		strings.Repeat("a", 10000),
		strings.Repeat("%2F", 500),
	}
	for _, id := range ids {
		for _, r := range []request{
			{method: http.MethodGet, path: "/v1/jobs/" + id},
			{method: http.MethodGet, path: "/v1/jobs/" + id + "?wait=10ms"},
			{method: http.MethodPost, path: "/v1/jobs/" + id + "/cancel"},
			{method: http.MethodGet, path: "/v1/jobs/" + id + "/events"},
		} {
			r.key = adminKey
			resp := f.do(r)
			expectProblem(t, resp, http.StatusNotFound, "")
			if resp.Header.Get("X-Injected") != "" {
				t.Fatalf("%s: header injected", r.path)
			}
		}
	}
	// Dot segments are refused outright, never redirected.
	for _, path := range []string{"/v1/jobs/../queues", "/v1/jobs/./x", "//v1/jobs", "/v1//jobs", "/v1/jobs/x/../../queues"} {
		req := f.newRequest(request{method: http.MethodGet, path: "/", key: adminKey})
		req.URL.Path, req.URL.RawPath = path, ""
		resp, err := f.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: %s", path, resp.Status)
		}
	}
	if keys := f.written(); len(keys) > 0 {
		t.Fatalf("hostile ids wrote %v", keys)
	}
}
