package httpapi_test

import (
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/replicas"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// With LEASEHOLD_REDIS_MIN_REPLICAS=1 a write the replica does not confirm
// in time is a 503 with Retry-After, never a 2xx (a failover could lose it)
// and never a 500; the client's retry with the same Idempotency-Key, once
// the replica follows again, returns the job the first try wrote on the
// primary, not a second one. Reads do not wait.
//
// Fails when the API does not mark its writes (replicas.Ack): the submit
// is acknowledged while the replica has not got it.
func TestWriteNotOnTheReplicaIs503AndItsRetryReturnsTheJob(t *testing.T) {
	t.Parallel()
	primary := testenv.StartRedis(t)
	replica := testenv.StartReplica(t, primary)
	f := newFixtureOn(t, primary.Addr(), testenv.NATS(t).Conn(t))
	if err := replicas.Require(f.rdb, 1, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	before := f.submit(acmeKey, `{"kind": "echo"}`)

	if err := replica.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = replica.Resume() })
	submit := request{method: http.MethodPost, path: "/v1/jobs", key: acmeKey, body: `{"kind": "echo", "input": {"n": 2}}`,
		header: http.Header{"Idempotency-Key": {"failover-1"}}}
	resp := f.do(submit)
	expectProblem(t, resp, http.StatusServiceUnavailable, "")
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || s < 1 {
		t.Errorf("Retry-After %q on a 503", resp.Header.Get("Retry-After"))
	}
	for _, r := range []request{
		{method: http.MethodPut, path: "/v1/limits/model:replicated", key: adminKey, body: `{"limit": 3}`},
		{method: http.MethodDelete, path: "/v1/limits/model:replicated", key: adminKey},
		{method: http.MethodPost, path: "/v1/jobs/" + before.ID + "/signal", key: acmeKey, body: `{"name": "approval"}`},
		{method: http.MethodPost, path: "/v1/jobs/" + before.ID + "/cancel", key: acmeKey},
		{method: http.MethodDelete, path: "/v1/jobs/" + before.ID, key: acmeKey},
	} {
		expectProblem(t, f.do(r), http.StatusServiceUnavailable, "")
	}
	if got := f.job(before.ID); got.ID != before.ID {
		t.Fatalf("a read with the replica paused: %+v", got)
	}

	if err := replica.Resume(); err != nil {
		t.Fatal(err)
	}
	var again response
	testenv.Eventually(t, 10*time.Second, func() bool {
		again = f.do(submit)
		return again.StatusCode != http.StatusServiceUnavailable
	}, "the submit's retry is still refused once the replica follows again")
	if again.StatusCode/100 != 2 {
		t.Fatalf("the retry: %s %s", again.Status, again.body)
	}
	retried := decode[job.Job](t, again)
	if ids := f.list(acmeKey); len(ids) != 2 || !slices.Contains(ids, retried.ID) || !slices.Contains(ids, before.ID) {
		t.Fatalf("jobs %v after the retry, want %s and %s: the retry made a second job", ids, before.ID, retried.ID)
	}
}
