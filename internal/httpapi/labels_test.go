package httpapi_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// Rejections of keys a wildcard limits are counted under the wildcard: a
// tenant naming any number of models adds one series, not one per model.
//
// Fails when the counter is labelled by the key the job named.
func TestRejectionsAreLabelledByTheLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if resp := f.putLimit(adminKey, "model:*", `{"limit": 0}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("put limit: %s %s", resp.Status, resp.body)
	}
	const models = 20
	for i := range models {
		body := fmt.Sprintf(`{"kind": "echo", "concurrency_keys": ["model:m%d"], "on_busy": "reject"}`, i)
		if resp := f.postJob(acmeKey, body, ""); resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("model:m%d: %s %s", i, resp.Status, resp.body)
		}
	}
	f.expectMetrics(fmt.Sprintf(`leasehold_key_rejections_total\{[^}]*key="model:\*"[^}]*\} %d\n`, models))
	if body := f.scrape(); strings.Contains(body, `key="model:m`) {
		t.Errorf("a series per model:\n%s", body)
	}
}
