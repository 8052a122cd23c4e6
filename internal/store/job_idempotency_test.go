package store

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"

	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// A request that won the idempotency key and crashed before creating its job
// leaves only the record; the next request with the same body creates the
// job under the recorded id. (An internal test: it writes the record as the
// crashed request would, with the body hash only this package computes.)
func TestCrashedWinnerIsCompletedByTheNextRequest(t *testing.T) {
	t.Parallel()
	for _, b := range testenv.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			s := New(b.Client, Config{Prefix: testenv.Prefix(t)})
			sub := job.Submission{Kind: "echo", Input: json.RawMessage(`{"x":1}`)}
			n, err := sub.Normalize("acme")
			if err != nil {
				t.Fatal(err)
			}
			body, err := n.Hash()
			if err != nil {
				t.Fatal(err)
			}
			id := uuid.Must(uuid.NewV7()).String()
			rec, _ := json.Marshal(idempotencyRecord{Job: id, Queue: n.Queue, Body: body})
			if err := b.Client.Set(ctx, s.keys.Idempotency("acme", "k"), rec, s.jobs.idemTTL).Err(); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Get(ctx, "acme", id, false); err != job.ErrNotFound {
				t.Fatalf("the crashed request's job is visible: %v", err)
			}

			j, created, err := s.Submit(ctx, "acme", sub, "k")
			if err != nil || !created || j.ID != id {
				t.Fatalf("retry: id %s created %v err %v; want %s created", j.ID, created, err, id)
			}
			j, created, err = s.Submit(ctx, "acme", sub, "k")
			if err != nil || created || j.ID != id {
				t.Fatalf("second retry: id %s created %v err %v; want %s not created", j.ID, created, err, id)
			}
			if got, err := s.Get(ctx, "acme", id, false); err != nil || got.State != job.StateQueued {
				t.Fatalf("Get: %+v, %v", got, err)
			}
		})
	}
}

// Replays finds the idempotency keys a tenant used, on a Redis and on a
// Cluster, and no other tenant's.
func TestReplaysFindsTheKeysATenantUsed(t *testing.T) {
	t.Parallel()
	for _, b := range testenv.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			s := New(b.Client, Config{Prefix: testenv.Prefix(t)})
			if _, _, err := s.Submit(ctx, "acme", job.Submission{Kind: "echo"}, "used"); err != nil {
				t.Fatal(err)
			}
			for tenant, want := range map[string][]bool{"acme": {true, false, false}, "beta": {false, false, false}} {
				got, err := s.Replays(ctx, tenant, []string{"used", "", "fresh"})
				if err != nil || len(got) != 3 || got[0] != want[0] || got[1] || got[2] {
					t.Errorf("Replays of %s = %v, %v; want %v", tenant, got, err, want)
				}
			}
		})
	}
}
