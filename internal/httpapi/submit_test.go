package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/httpapi"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/job"
)

func TestSubmitCreatesJobWithDefaults(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	wake, err := f.nc.SubscribeSync(keys.New(f.prefix).WakeSubject("default"))
	if err != nil {
		t.Fatal(err)
	}
	defer wake.Unsubscribe()
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.store.SetLimit(t.Context(), "model:gpt-4o", 100); err != nil { // a key a tenant may name
		t.Fatal(err)
	}

	resp := f.do(request{method: http.MethodPost, path: "/v1/jobs", key: acmeKey,
		body: `{"kind": "echo", "input": {"b": 1, "a": [true]}, "concurrency_keys": ["model:gpt-4o"], "metadata": {"conversation": "c-1"}}`})
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("%s: %s", resp.Status, resp.body)
	}
	j := decode[job.Job](t, resp)
	if got, want := resp.Header.Get("Location"), "/v1/jobs/"+j.ID; got != want {
		t.Errorf("Location %q, want %q", got, want)
	}
	if j.Tenant != "acme" || j.Queue != "default" || j.Kind != "echo" || j.State != job.StateQueued ||
		j.Attempt != 0 || j.MaxAttempts != 3 || j.Priority != 0 || j.CancelRequested || j.Execution != nil ||
		j.StartedAt != nil || j.FinishedAt != nil || j.Error != nil || !isNull(j.Result) {
		t.Errorf("job %+v", j)
	}
	if !slices.Equal(j.ConcurrencyKeys, []string{"model:gpt-4o", "tenant:acme"}) {
		t.Errorf("concurrency keys %v: the tenant's own key must be added", j.ConcurrencyKeys)
	}
	if string(j.Metadata) != `{"conversation":"c-1"}` {
		t.Errorf("metadata %s", j.Metadata)
	}
	// The wire form: RFC 3339 with milliseconds, UTC; nulls present.
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(resp.body, &raw); err != nil {
		t.Fatal(err)
	}
	if ts := string(raw["created_at"]); len(ts) != len(`"2006-01-02T15:04:05.000Z"`) || !strings.HasSuffix(ts, `Z"`) {
		t.Errorf("created_at %s", ts)
	}
	for _, field := range []string{"started_at", "finished_at", "execution", "result", "error"} {
		if string(raw[field]) != "null" {
			t.Errorf("%s = %s, want null", field, raw[field])
		}
	}
	if _, err := wake.NextMsg(5 * time.Second); err != nil {
		t.Errorf("no wake-up for the queue after a submit: %v", err)
	}
	if got := f.job(j.ID); got.ID != j.ID || got.State != job.StateQueued {
		t.Errorf("read back %+v", got)
	}
}

func TestSubmitAcceptsJSONWithCharset(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, ct := range []string{"application/json; charset=utf-8", "Application/JSON;charset=UTF-8"} {
		resp := f.do(request{method: http.MethodPost, path: "/v1/jobs", key: acmeKey, body: `{"kind": "echo"}`,
			header: http.Header{"Content-Type": {ct}}})
		if resp.StatusCode != http.StatusCreated {
			t.Errorf("%s: %s %s", ct, resp.Status, resp.body)
		}
	}
}

func TestSubmitOptions(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	j := f.submit(globexKey, `{"kind": "sleep", "queue": "gpu", "priority": -5, "max_attempts": 7,
		"timeout": "30s", "max_wait": "5m", "delay": "1h", "on_busy": "reject", "metadata": null, "input": null}`)
	if j.Queue != "gpu" || j.Priority != -5 || j.MaxAttempts != 7 || j.Tenant != "globex" || !isNull(j.Metadata) {
		t.Errorf("job %+v", j)
	}
	// A zero that is in range is a value; a field left out takes its default.
	j = f.submit(globexKey, `{"kind": "echo", "priority": 0, "delay": "0s", "concurrency_keys": []}`)
	if j.Priority != 0 || j.MaxAttempts != 3 || j.Queue != "default" {
		t.Errorf("job %+v", j)
	}
}

// Every bad request is a problem naming what is wrong, and writes nothing.
func TestSubmitRefusesBadInputAndWritesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	huge := `{"kind": "echo", "input": "` + strings.Repeat("x", httpapi.DefaultMaxBody) + `"}`
	cases := []struct {
		name   string
		body   string
		header http.Header
		status int
		field  string // "" when no field is at fault
	}{
		{name: "empty body", body: "", status: 400},
		{name: "not JSON", body: `kind=echo`, status: 400},
		{name: "malformed", body: `{"kind": echo}`, status: 400},
		{name: "truncated", body: `{"kind": "echo", "input": {"a": [1, 2`, status: 400},
		{name: "truncated string", body: `{"kind": "ec`, status: 400},
		{name: "array", body: `[{"kind": "echo"}]`, status: 400},
		{name: "string", body: `"echo"`, status: 400},
		{name: "null", body: `null`, status: 400},
		{name: "two objects", body: `{"kind": "echo"} {"kind": "echo"}`, status: 400},
		{name: "trailing garbage", body: `{"kind": "echo"}]`, status: 400},
		{name: "unknown field", body: `{"kind": "echo", "bogus": 1}`, status: 400, field: "bogus"},
		{name: "field in other case", body: `{"KIND": "echo"}`, status: 400, field: "KIND"},
		{name: "kind not a string", body: `{"kind": 7}`, status: 400, field: "kind"},
		{name: "max_attempts a string", body: `{"kind": "echo", "max_attempts": "3"}`, status: 400, field: "max_attempts"},
		{name: "priority a fraction", body: `{"kind": "echo", "priority": 1.5}`, status: 400, field: "priority"},
		{name: "concurrency_keys a string", body: `{"kind": "echo", "concurrency_keys": "model:x"}`, status: 400, field: "concurrency_keys"},
		{name: "concurrency_keys of numbers", body: `{"kind": "echo", "concurrency_keys": [1]}`, status: 400, field: "concurrency_keys"},
		{name: "timeout a number", body: `{"kind": "echo", "timeout": 30}`, status: 400, field: "timeout"},
		{name: "timeout not a duration", body: `{"kind": "echo", "timeout": "ten minutes"}`, status: 400, field: "timeout"},
		{name: "missing kind", body: `{"queue": "default"}`, status: 400, field: "kind"},
		{name: "kind upper case", body: `{"kind": "Echo"}`, status: 400, field: "kind"},
		{name: "kind with a slash", body: `{"kind": "../echo"}`, status: 400, field: "kind"},
		{name: "kind starts with a digit", body: `{"kind": "1echo"}`, status: 400, field: "kind"},
		{name: "kind unicode", body: `{"kind": "écho"}`, status: 400, field: "kind"},
		{name: "kind too long", body: `{"kind": "` + strings.Repeat("k", 65) + `"}`, status: 400, field: "kind"},
		{name: "queue with braces", body: `{"kind": "echo", "queue": "{q:default}"}`, status: 400, field: "queue"},
		{name: "negative timeout", body: `{"kind": "echo", "timeout": "-1s"}`, status: 400, field: "timeout"},
		{name: "timeout too long", body: `{"kind": "echo", "timeout": "25h"}`, status: 400, field: "timeout"},
		{name: "negative max_wait", body: `{"kind": "echo", "max_wait": "-5m"}`, status: 400, field: "max_wait"},
		{name: "negative delay", body: `{"kind": "echo", "delay": "-1ms"}`, status: 400, field: "delay"},
		{name: "negative max_attempts", body: `{"kind": "echo", "max_attempts": -1}`, status: 400, field: "max_attempts"},
		{name: "too many attempts", body: `{"kind": "echo", "max_attempts": 101}`, status: 400, field: "max_attempts"},
		{name: "priority too low", body: `{"kind": "echo", "priority": -101}`, status: 400, field: "priority"},
		// An explicit value is checked as written: only a field left out
		// takes its default.
		{name: "zero max_attempts", body: `{"kind": "echo", "max_attempts": 0}`, status: 400, field: "max_attempts"},
		{name: "zero timeout", body: `{"kind": "echo", "timeout": "0s"}`, status: 400, field: "timeout"},
		{name: "zero max_wait", body: `{"kind": "echo", "max_wait": "0s"}`, status: 400, field: "max_wait"},
		{name: "empty queue", body: `{"kind": "echo", "queue": ""}`, status: 400, field: "queue"},
		{name: "empty on_busy", body: `{"kind": "echo", "on_busy": ""}`, status: 400, field: "on_busy"},
		{name: "empty kind", body: `{"kind": ""}`, status: 400, field: "kind"},
		{name: "null kind", body: `{"kind": null}`, status: 400, field: "kind"},
		{name: "null queue", body: `{"kind": "echo", "queue": null}`, status: 400, field: "queue"},
		{name: "null max_attempts", body: `{"kind": "echo", "max_attempts": null}`, status: 400, field: "max_attempts"},
		{name: "null priority", body: `{"kind": "echo", "priority": null}`, status: 400, field: "priority"},
		{name: "null timeout", body: `{"kind": "echo", "timeout": null}`, status: 400, field: "timeout"},
		{name: "null max_wait", body: `{"kind": "echo", "max_wait": null}`, status: 400, field: "max_wait"},
		{name: "null delay", body: `{"kind": "echo", "delay": null}`, status: 400, field: "delay"},
		{name: "null on_busy", body: `{"kind": "echo", "on_busy": null}`, status: 400, field: "on_busy"},
		{name: "null concurrency_keys", body: `{"kind": "echo", "concurrency_keys": null}`, status: 400, field: "concurrency_keys"},
		{name: "on_busy unknown", body: `{"kind": "echo", "on_busy": "drop"}`, status: 400, field: "on_busy"},
		{name: "metadata not an object", body: `{"kind": "echo", "metadata": [1]}`, status: 400, field: "metadata"},
		{name: "another tenant's key", body: `{"kind": "echo", "concurrency_keys": ["tenant:globex"]}`, status: 400, field: "concurrency_keys[0]"},
		{name: "wildcard key", body: `{"kind": "echo", "concurrency_keys": ["model:*"]}`, status: 400, field: "concurrency_keys[0]"},
		{name: "empty Idempotency-Key", body: `{"kind": "echo"}`, header: http.Header{"Idempotency-Key": {""}}, status: 400, field: "Idempotency-Key"},
		{name: "repeated Idempotency-Key", body: `{"kind": "echo"}`, header: http.Header{"Idempotency-Key": {"a", "b"}}, status: 400, field: "Idempotency-Key"},
		{name: "long Idempotency-Key", body: `{"kind": "echo"}`, header: http.Header{"Idempotency-Key": {strings.Repeat("i", 256)}}, status: 400, field: "Idempotency-Key"},
		{name: "non-ASCII Idempotency-Key", body: `{"kind": "echo"}`, header: http.Header{"Idempotency-Key": {"ключ"}}, status: 400, field: "Idempotency-Key"},
		{name: "huge body", body: huge, status: 413},
		{name: "text/plain", body: `{"kind": "echo"}`, header: http.Header{"Content-Type": {"text/plain"}}, status: 415},
		{name: "form", body: `{"kind": "echo"}`, header: http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, status: 415},
		{name: "no content type", body: `{"kind": "echo"}`, header: http.Header{"Content-Type": {""}}, status: 415},
		{name: "other charset", body: `{"kind": "echo"}`, header: http.Header{"Content-Type": {"application/json; charset=latin1"}}, status: 415},
		{name: "broken content type", body: `{"kind": "echo"}`, header: http.Header{"Content-Type": {"application/json; ;"}}, status: 415},
		{name: "no key", body: `{"kind": "echo"}`, header: http.Header{"Authorization": {""}}, status: 401},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := request{method: http.MethodPost, path: "/v1/jobs", key: acmeKey, body: c.body, header: c.header}
			if c.body == "" {
				r.header = http.Header{"Content-Type": {"application/json"}}
			}
			resp := f.do(r)
			expectProblem(t, resp, c.status, c.field)
		})
	}
	if keys := f.written(); len(keys) > 0 {
		t.Fatalf("bad requests wrote %d keys: %v", len(keys), keys)
	}
}

// A bad request lists every field at fault, not only the first.
func TestSubmitNamesEveryBadField(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	resp := f.do(request{method: http.MethodPost, path: "/v1/jobs", key: acmeKey,
		body: `{"kind": "echo", "timeout": 5, "priority": "high", "extra": true}`})
	p := expectProblem(t, resp, 400, "timeout")
	var fields []string
	for _, e := range p.Errors {
		fields = append(fields, e.Field)
	}
	if !slices.Equal(fields, []string{"extra", "priority", "timeout"}) {
		t.Errorf("fields %v", fields)
	}
	resp = f.do(request{method: http.MethodPost, path: "/v1/jobs", key: acmeKey,
		body: `{"kind": "Bad", "max_attempts": 0, "timeout": "-1s", "delay": "-1s"}`})
	p = expectProblem(t, resp, 400, "kind")
	if len(p.Errors) != 4 {
		t.Errorf("want kind, max_attempts, timeout and delay named: %s", resp.body)
	}
}

// The body limit is configurable; a body just under it is read.
func TestSubmitBodyLimitIsConfigurable(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *httpapi.Config) { c.MaxBody = 64 })
	small := `{"kind": "echo", "input": "` + strings.Repeat("x", 30) + `"}`
	f.submit(acmeKey, small)
	large := `{"kind": "echo", "input": "` + strings.Repeat("x", 60) + `"}`
	expectProblem(t, f.do(request{method: http.MethodPost, path: "/v1/jobs", key: acmeKey, body: large}), 413, "")

	// A body sent without a length (chunked) is cut at the limit too.
	req := f.newRequest(request{method: http.MethodPost, path: "/v1/jobs", key: acmeKey})
	req.Header.Set("Content-Type", "application/json")
	req.Body = readCloser{bytes.NewReader([]byte(large))}
	req.ContentLength = -1
	resp, err := f.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked: %s", resp.Status)
	}
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

func TestUnknownRoutesAndMethods(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, path := range []string{"/v1", "/v1/", "/v1/jobs/", "/v2/jobs", "/v1/limit", "/v1/limits-x/model:x", "/v1/jobs/x/y/z", "/v1/queues/default", "/metrics"} {
		expectProblem(t, f.get(acmeKey, path), 404, "")
	}
	cases := []struct{ method, path, allow string }{
		{http.MethodDelete, "/v1/jobs", "GET, POST"},
		{http.MethodPut, "/v1/jobs", "GET, POST"},
		{http.MethodPost, "/v1/jobs/0192a000-0000-7000-8000-000000000000", "DELETE, GET"},
		{http.MethodPut, "/v1/jobs/0192a000-0000-7000-8000-000000000000", "DELETE, GET"},
		{http.MethodGet, "/v1/jobs/0192a000-0000-7000-8000-000000000000/cancel", "POST"},
		{http.MethodGet, "/v1/jobs/0192a000-0000-7000-8000-000000000000/retry", "POST"},
		{http.MethodGet, "/v1/jobs/retry", "POST"},
		{http.MethodGet, "/v1/queues/default/pause", "POST"},
		{http.MethodPost, "/v1/queues/default/stats", "GET"},
		{http.MethodPost, "/v1/jobs/0192a000-0000-7000-8000-000000000000/events", "GET"},
		{http.MethodPost, "/v1/queues", "GET"},
		{http.MethodPost, "/healthz", "GET"},
		{"BREW", "/openapi.yaml", "GET"},
	}
	for _, c := range cases {
		resp := f.do(request{method: c.method, path: c.path, key: acmeKey})
		expectProblem(t, resp, 405, "")
		if got := resp.Header.Get("Allow"); got != c.allow {
			t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, got, c.allow)
		}
	}
	if keys := f.written(); len(keys) > 0 {
		t.Fatalf("wrote %v", keys)
	}
}

func TestListJobs(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	empty := f.get(acmeKey, "/v1/jobs")
	if string(bytes.TrimSpace(empty.body)) != `{"jobs":[],"next_cursor":null}` {
		t.Errorf("empty list: %s", empty.body)
	}
	var ids []string // oldest first
	for i := range 5 {
		kind, queue := "echo", "default"
		if i%2 == 1 {
			kind = "sleep"
		}
		if i == 4 {
			queue = "other"
		}
		ids = append(ids, f.submit(acmeKey, fmt.Sprintf(`{"kind": %q, "queue": %q}`, kind, queue)).ID)
	}
	f.submit(globexKey, `{"kind": "echo"}`)

	// Paging, newest first, with no job twice and none missing.
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("too many pages")
		}
		path := "/v1/jobs?limit=2"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		resp := f.get(acmeKey, path)
		list := decode[listBody](t, resp)
		if len(list.Jobs) > 2 {
			t.Fatalf("page of %d", len(list.Jobs))
		}
		for _, j := range list.Jobs {
			got = append(got, j.ID)
		}
		if list.NextCursor == nil {
			break
		}
		cursor = *list.NextCursor
	}
	want := slices.Clone(ids)
	slices.Reverse(want)
	if !slices.Equal(got, want) {
		t.Errorf("paged %v, want %v", got, want)
	}

	filters := map[string][]string{
		"kind=sleep":                {ids[3], ids[1]},
		"queue=other":               {ids[4]},
		"state=queued&queue=other":  {ids[4]},
		"state=running":             nil,
		"kind=echo&queue=default":   {ids[2], ids[0]},
		"tenant=acme&kind=sleep":    {ids[3], ids[1]}, // naming oneself is allowed
		"state=succeeded&limit=500": nil,
	}
	for query, want := range filters {
		list := decode[listBody](t, f.get(acmeKey, "/v1/jobs?"+query))
		if got := list.ids(); !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", query, got, want)
		}
	}

	bad := map[string]string{
		"limit=0":           "limit",
		"limit=501":         "limit",
		"limit=ten":         "limit",
		"limit=-1":          "limit",
		"state=done":        "state",
		"kind=Bad":          "kind",
		"queue=%7Bq%7D":     "queue",
		"cursor=bogus":      "cursor",
		"cursor=MTox":       "cursor", // base64 of "1:1", not a cursor
		"cursor=%00":        "cursor",
		"tenant=globex":     "tenant",
		"tenant=":           "tenant",
		"limit=1&limit=600": "", // the first one counts; this one is fine
	}
	for query, field := range bad {
		resp := f.get(acmeKey, "/v1/jobs?"+query)
		if field == "" {
			if resp.StatusCode != 200 {
				t.Errorf("%s: %s", query, resp.Status)
			}
			continue
		}
		expectProblem(t, resp, 400, field)
	}
}

type listBody struct {
	Jobs       []job.Job `json:"jobs"`
	NextCursor *string   `json:"next_cursor"`
}

func (l listBody) ids() []string {
	var ids []string
	for _, j := range l.Jobs {
		ids = append(ids, j.ID)
	}
	return ids
}

// A refused concurrency key is named in the message, so that a client
// sending many keys learns which one to drop.
func TestSubmitRefusalNamesTheKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, key := range []string{"tenant:globex", "tenant:globex:batch"} {
		resp := f.do(request{method: http.MethodPost, path: "/v1/jobs", key: acmeKey,
			body: `{"kind": "echo", "concurrency_keys": ["tenant:acme", "` + key + `"]}`})
		p := expectProblem(t, resp, 400, "concurrency_keys[1]")
		if !slices.ContainsFunc(p.Errors, func(e job.FieldError) bool { return strings.Contains(e.Message, key) }) {
			t.Errorf("refusal of %s does not name it: %s", key, resp.body)
		}
	}
}
