package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/leasehold/leasehold/docs"
)

func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, base := range []string{f.url, f.opsURL} { // the public port and the operations listener
		if code, body := plainGet(t, base+"/healthz"); code != 200 || !strings.Contains(body, `"ok"`) {
			t.Errorf("%s/healthz: %d %s", base, code, body)
		}
		if code, body := plainGet(t, base+"/readyz"); code != 200 || !strings.Contains(body, `"nats":"connected"`) {
			t.Errorf("%s/readyz: %d %s", base, code, body)
		}
	}
}

func plainGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.submit(acmeKey, `{"kind": "echo"}`)
	f.submit(acmeKey, `{"kind": "echo", "queue": "batch"}`)
	f.get(acmeKey, "/v1/jobs/0192a000-0000-7000-8000-000000000000")
	f.get(acmeKey, "/no/such/path")

	// Not on the public port: it names every tenant, queue and limit key.
	expectProblem(t, f.get("", "/metrics"), http.StatusNotFound, "")
	expectProblem(t, f.get(adminKey, "/metrics"), http.StatusNotFound, "")
	body := f.scrape()
	for _, want := range []string{
		`http_server_request_duration_seconds_bucket\{[^}]*http_request_method="POST",http_response_status_code="201",http_route="/v1/jobs"`,
		`http_server_request_duration_seconds_count\{[^}]*http_request_method="GET",http_response_status_code="404",http_route="/v1/jobs/\{id\}"[^}]*\} 1`,
		`leasehold_api_requests_total\{[^}]*http_request_method="POST",http_response_status_code="201",http_route="/v1/jobs"[^}]*\} 2`,
		`leasehold_api_requests_total\{[^}]*http_route="unmatched"[^}]*\} 3`,
		`leasehold_jobs\{[^}]*queue="default",state="queued"[^}]*\} 1`,
		`leasehold_jobs\{[^}]*queue="batch",state="queued"[^}]*\} 1`,
		`leasehold_jobs\{[^}]*queue="batch",state="running"[^}]*\} 0`,
	} {
		if !regexp.MustCompile(want).MatchString(body) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if t.Failed() {
		t.Log(body)
	}
}

func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	resp := f.get("", "/openapi.yaml")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/yaml" {
		t.Fatalf("%s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	if string(resp.body) != docs.OpenAPI() {
		t.Error("served document differs from docs/openapi.yaml")
	}
	doc, err := openapi3.NewLoader().LoadFromData(resp.body)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(t.Context()); err != nil {
		t.Fatal(err)
	}
	if doc.Paths.Find("/v1/limits") == nil || doc.Paths.Find("/v1/limits/{key}") == nil {
		t.Error("the document does not describe /v1/limits")
	}
}

// The document's Submission schema accepts exactly the bodies the server
// accepts, for the patterns a client checks before it sends.
func TestOpenAPISubmissionAgreesWithTheServer(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	doc, err := openapi3.NewLoader().LoadFromData([]byte(docs.OpenAPI()))
	if err != nil {
		t.Fatal(err)
	}
	schema := doc.Components.Schemas["Submission"].Value
	for _, body := range []string{
		// Keys under the tenant's own prefix need no limit (see
		// TestKeysATenantMayName).
		`{"kind": "echo", "concurrency_keys": ["tenant:acme:org/gpt-4o"]}`,
		`{"kind": "echo", "concurrency_keys": ["tenant:acme:a.b_c-d:e"]}`,
		`{"kind": "echo", "concurrency_keys": ["tenant:acme:a b"]}`,
		`{"kind": "echo", "concurrency_keys": ["tenant:acme:*"]}`,
		`{"kind": "echo", "concurrency_keys": ["tenant:acme:ü"]}`,
		`{"kind": "echo", "concurrency_keys": ["tenant:acme:` + strings.Repeat("k", 129-len("tenant:acme:")) + `"]}`,
		`{"kind": "echo.v2"}`,
		`{"kind": "Echo"}`,
		`{"kind": "echo", "queue": "a/b"}`,
	} {
		var value any
		if err := json.Unmarshal([]byte(body), &value); err != nil {
			t.Fatal(err)
		}
		documented := schema.VisitJSON(value) == nil
		resp := f.do(request{method: http.MethodPost, path: "/v1/jobs", key: acmeKey, body: body})
		if served := resp.StatusCode == http.StatusCreated; served != documented {
			t.Errorf("%s: the server answers %s, the document accepts it: %v", body, resp.Status, documented)
		}
	}
}
