package httpapi_test

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"testing"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/job"
)

// on_busy "reject": a full key answers 429 with Retry-After and stores
// nothing; a key with room, or the same job once the key frees up, is
// accepted.
func TestOnBusyRejectWhileAKeyIsFull(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	// Set before the worker starts, which reads limits before it claims.
	for key, body := range map[string]string{"model:x": `{"limit": 1}`, "model:paused": `{"limit": 0}`} {
		if resp := f.putLimit(adminKey, key, body); resp.StatusCode != http.StatusOK {
			t.Fatalf("put limit: %s %s", resp.Status, resp.body)
		}
	}
	f.startWorker(map[string]execution.Handler{
		"block": func(ctx context.Context, _ *execution.Execution) (any, error) {
			<-ctx.Done()
			return nil, context.Cause(ctx)
		},
	})
	holder := f.submit(acmeKey, `{"kind": "block", "concurrency_keys": ["model:x"]}`)
	f.awaitState(holder.ID, job.StateRunning)

	before := f.written()
	const rejecting = `{"kind": "echo", "concurrency_keys": ["model:x"], "on_busy": "reject"}`
	resp := f.postJob(acmeKey, rejecting, "")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a job for a full key with on_busy reject: %s %s", resp.Status, resp.body)
	}
	// The holder's lease lives 3s (the fixture's TTL) past its last heartbeat.
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || s < 1 || s > 3 {
		t.Errorf("Retry-After %q, want 1 to 3 seconds (the earliest lease expiry)", resp.Header.Get("Retry-After"))
	}
	if p := decode[problemBody](t, resp); len(p.Errors) != 1 || p.Errors[0].Field != "concurrency_keys" {
		t.Errorf("problem %+v, want one error naming concurrency_keys", p)
	}
	if after := f.written(); !slices.Equal(before, after) {
		t.Errorf("a refused job wrote to Redis:\nbefore %v\nafter  %v", before, after)
	}

	// The same idempotent request is refused while the key is full, with
	// no record or lookup left behind, then creates the job once it has
	// room.
	if resp := f.postJob(acmeKey, rejecting, "once"); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("idempotent, key full: %s %s", resp.Status, resp.body)
	}
	if after := f.written(); !slices.Equal(before, after) {
		t.Errorf("a refused idempotent job wrote to Redis:\nbefore %v\nafter  %v", before, after)
	}
	if resp := f.postJob(acmeKey, `{"kind": "echo", "concurrency_keys": ["tenant:acme:y"], "on_busy": "reject"}`, ""); resp.StatusCode != http.StatusCreated {
		t.Errorf("a key with room: %s %s", resp.Status, resp.body)
	}
	// A limit of 0 holds every job: queue waits, reject is refused.
	if resp := f.postJob(acmeKey, `{"kind": "echo", "concurrency_keys": ["model:paused"]}`, ""); resp.StatusCode != http.StatusCreated {
		t.Errorf("on_busy queue, key full: %s %s", resp.Status, resp.body)
	}
	if resp := f.postJob(acmeKey, `{"kind": "echo", "concurrency_keys": ["model:paused"], "on_busy": "reject"}`, ""); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("on_busy reject, limit 0: %s %s", resp.Status, resp.body)
	}

	f.expectMetrics(
		`leasehold_key_rejections_total\{[^}]*key="model:x"[^}]*\} 2\n`,
		`leasehold_key_rejections_total\{[^}]*key="model:paused"[^}]*\} 1\n`,
		`leasehold_key_limit\{[^}]*key="model:x"[^}]*\} 1\n`,
		`leasehold_key_in_use\{[^}]*key="model:x"[^}]*\} 1\n`,
		`leasehold_key_waiting\{[^}]*key="model:paused"[^}]*\} 1\n`,
		`leasehold_key_waiting\{[^}]*key="model:x"[^}]*\} 0\n`,
	)

	if resp := f.cancel(acmeKey, holder.ID); resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted {
		t.Fatalf("cancel the holder: %s %s", resp.Status, resp.body)
	}
	f.awaitState(holder.ID, job.StateCancelled)
	resp = f.postJob(acmeKey, rejecting, "once")
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("idempotent, key free: %s %s", resp.Status, resp.body)
	}
	if replay := f.postJob(acmeKey, rejecting, "once"); replay.StatusCode != http.StatusOK ||
		decode[job.Job](t, replay).ID != decode[job.Job](t, resp).ID {
		t.Errorf("the replay: %s %s", replay.Status, replay.body)
	}
}
