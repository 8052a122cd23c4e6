package httpapi_test

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/httpapi"
	"github.com/leasehold/leasehold/internal/testenv"
)

// A batch whose body is still arriving holds a batch slot: past the
// tenant's share another batch of the tenant is 429, past the process's
// a batch of any tenant is 503, both with Retry-After: 1; once the batch
// is answered its slot is free again.
//
// Fails when either bound is not kept.
func TestBatchSlots(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *httpapi.Config) { c.MaxBatches, c.MaxTenantBatches = 1, 1 })
	const batch = `{"jobs": [{"kind": "echo"}]}`
	// The stalled batch goes on a connection of its own, never one a probe
	// left idle in the pool.
	stallClient := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

	// stall sends a batch of acme's whose body arrives only when the
	// returned writer is written and closed.
	type answer struct {
		resp *http.Response
		err  error
	}
	stall := func() (*io.PipeWriter, chan answer) {
		body, w := io.Pipe()
		req, err := http.NewRequest(http.MethodPost, f.url+"/v1/jobs/batch", body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+acmeKey)
		req.Header.Set("Content-Type", "application/json")
		done := make(chan answer, 1)
		go func() {
			resp, err := stallClient.Do(req)
			done <- answer{resp, err}
		}()
		// The body's first byte, at once: the client sends a request whose
		// body has not begun only once a probe of it times out.
		go io.WriteString(w, batch[:1])
		return w, done
	}
	w, done := stall()
	t.Cleanup(func() { w.Close() })
	testenv.Eventually(t, 10*time.Second, func() bool {
		select {
		case a := <-done:
			// Refused while a batch below held the slot: send it again.
			if a.err == nil {
				a.resp.Body.Close()
			}
			w.Close()
			w, done = stall()
			return false
		default:
		}
		return f.postBatch(globexKey, batch).StatusCode == http.StatusServiceUnavailable
	}, "another tenant's batch is not refused while acme's holds the process's one slot")

	for key, status := range map[string]int{acmeKey: http.StatusTooManyRequests, globexKey: http.StatusServiceUnavailable} {
		resp := f.postBatch(key, batch)
		expectProblem(t, resp, status, "")
		if got := resp.Header.Get("Retry-After"); got != "1" {
			t.Errorf("%d with Retry-After %q, want 1", status, got)
		}
	}

	if _, err := io.WriteString(w, batch[1:]); err != nil {
		t.Fatal(err)
	}
	w.Close()
	a := <-done
	if a.err != nil {
		t.Fatal(a.err)
	}
	a.resp.Body.Close()
	if a.resp.StatusCode != http.StatusOK {
		t.Fatalf("the held batch: %s", a.resp.Status)
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		return f.postBatch(globexKey, batch).StatusCode == http.StatusOK
	}, "the slot is not free once the batch is answered")
}
