package store

import (
	"context"
	"errors"
	"testing"

	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// A reader of a packed job that another client unpacks, or retries (an
// unpack, then an expand), between its read of the job's hash and its
// read of its folded key finds neither: it reads the job again in one
// step, and finds it. Get and Events read in one step from the first.
//
// Fails when a listing takes the job for a deleted one (it drops it from
// its tenant's index for good), or Get or Events answer ErrNotFound.
func TestAReaderOfAJobUnpackedBetweenItsReadsFindsIt(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		read      func(ctx context.Context, s *Store, id string) error
		meanwhile func(ctx context.Context, s *Store, id string) error
	}{
		{"List while retried", func(ctx context.Context, s *Store, id string) error {
			page, _, err := s.List(ctx, job.ListQuery{Tenant: "acme"})
			if err == nil && (len(page) != 1 || page[0].ID != id) {
				err = errors.New("not listed")
			}
			return err
		}, retried},
		{"Get while retried", func(ctx context.Context, s *Store, id string) error {
			_, err := s.Get(ctx, "acme", id, false)
			return err
		}, retried},
		{"Events while unpacked", func(ctx context.Context, s *Store, id string) error {
			_, err := s.Events(ctx, "acme", id, false, "", 0)
			return err
		}, func(ctx context.Context, s *Store, id string) error {
			_, _, err := s.Signal(ctx, "acme", id, false, "go", nil) // refused: it ended
			if errors.Is(err, job.ErrConflict) {
				err = nil
			}
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx, srv, prefix := t.Context(), testenv.Redis(t), testenv.Prefix(t)
			other := New(srv.Client(t), Config{Prefix: prefix})
			j := packedJob(t, other)
			hash, rdb := other.keys.Job(j.Queue, j.ID), srv.Client(t)
			fired := testenv.Between(rdb, func(args []any) bool {
				return len(args) > 1 && args[0] == "hmget" && args[1] == hash
			}, func() {
				if err := c.meanwhile(ctx, other, j.ID); err != nil {
					t.Errorf("meanwhile: %v", err)
				}
			})
			s := New(rdb, Config{Prefix: prefix})
			if err := c.read(ctx, s, j.ID); err != nil || !fired() {
				t.Fatalf("%v (another client came between: %v)", err, fired())
			}
			if err := other.rdb.ZScore(ctx, other.keys.QueueTenantJobs(j.Queue, "acme"), j.ID).Err(); err != nil {
				t.Fatalf("the job is out of its tenant's listing: %v", err)
			}
		})
	}
}

func retried(ctx context.Context, s *Store, id string) error {
	_, err := s.Retry(ctx, "acme", id, false)
	return err
}
