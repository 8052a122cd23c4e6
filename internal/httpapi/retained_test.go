package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/httpapi"
)

// A tenant past its quota of retained bytes gets 429 with Retry-After;
// another tenant's submit succeeds; deleting the tenant's ended jobs frees
// its quota.
//
// Fails when the API gives the store no quota: every submit is 201.
func TestRetainedBytesQuota(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *httpapi.Config) { c.TenantMaxRetainedBytes = 12_000 })
	body := `{"kind": "echo", "input": {"prompt": "` + strings.Repeat("x", 3000) + `"}}`
	var ids []string
	for range 3 {
		ids = append(ids, f.submit(acmeKey, body).ID)
	}
	resp := f.do(request{method: http.MethodPost, path: "/v1/jobs", key: acmeKey, body: body})
	expectProblem(t, resp, http.StatusTooManyRequests, "")
	if resp.Header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	entries := f.batch(acmeKey, body)
	if entries[0].Status != http.StatusTooManyRequests {
		t.Errorf("a batch item past the quota: %d", entries[0].Status)
	}
	f.submit(globexKey, body) // another tenant's quota is its own

	for _, id := range ids {
		if resp := f.post(acmeKey, "/v1/jobs/"+id+"/cancel"); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("cancel: %s %s", resp.Status, resp.body)
		}
		if resp := f.do(request{method: http.MethodDelete, path: "/v1/jobs/" + id, key: acmeKey}); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("delete: %s %s", resp.Status, resp.body)
		}
	}
	f.submit(acmeKey, body) // 201 once its jobs are deleted
}
