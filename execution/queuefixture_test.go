package execution

import (
	"context"
	"testing"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// queueFixture is a worker that is not run, on a Redis of its own, for the
// tests that drive its first queue's steps (claim, reap, the scripts) by
// hand.
type queueFixture struct {
	t     *testing.T
	rdb   redis.UniversalClient
	store *store.Store
	w     *Worker
	q     *queue
}

// newQueueFixture returns a fixture whose worker has cfg, under a prefix
// of the test's own.
func newQueueFixture(t *testing.T, cfg Config) *queueFixture {
	rdb := testenv.Redis(t).Client(t)
	cfg.Prefix = testenv.Prefix(t)
	store := store.New(rdb, store.Config{Prefix: cfg.Prefix})
	w, err := NewWorker(rdb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("noop", func(context.Context, *Execution) (any, error) { return nil, nil })
	w.serveKinds()
	return &queueFixture{t: t, rdb: rdb, store: store, w: w, q: w.queues[0]}
}

// submit submits a noop job s of tenant and returns its id.
func (f *queueFixture) submit(tenant string, s job.Submission) string {
	f.t.Helper()
	s.Kind = "noop"
	j, _, err := f.store.Submit(f.t.Context(), tenant, s, "")
	if err != nil {
		f.t.Fatal(err)
	}
	return j.ID
}

// due moves id's score in the sorted set key (leases, scheduled,
// deadlines, retired) to the distant past: its time has come.
func (f *queueFixture) due(key, id string) {
	f.t.Helper()
	if err := f.rdb.ZAddXX(f.t.Context(), key, redis.Z{Score: 1, Member: id}).Err(); err != nil {
		f.t.Fatal(err)
	}
}
