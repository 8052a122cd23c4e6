package execution_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// Redis loses its script cache (SCRIPT FLUSH, as a restart or a failover
// leaves it) while a worker runs a job of a key with a budget, and again
// before the next job: the pipelined finish, settlement, peek and claim
// run their scripts again, and both jobs succeed, each once.
func TestWorkerRunsOnAfterScriptFlush(t *testing.T) {
	t.Parallel()
	rs := testenv.StartRedis(t)
	rdb := rs.Client(t)
	f := newFixtureOn(t, rdb, testenv.NATS(t).Conn(t))
	ctx := t.Context()
	const key = "model:flushed"
	limit := int64(2)
	if err := f.store.SetKeyLimit(ctx, key, job.KeyLimit{Limit: &limit, Budget: job.Budget{TPM: 1000}}); err != nil {
		t.Fatal(err)
	}
	flush := func() {
		t.Helper()
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	started, release := make(chan string, 2), make(chan struct{})
	runs := map[string]int{}
	f.startWorker(t, execution.Config{}, map[string]execution.Handler{
		"hold": func(ctx context.Context, e *execution.Execution) (any, error) {
			started <- e.JobID
			<-release
			return "done", nil
		},
	})
	sub := job.Submission{Kind: "hold", ConcurrencyKeys: []string{key}, Cost: &job.Cost{Tokens: 10}}
	for range 2 {
		j := f.submit(t, sub)
		select {
		case id := <-started:
			runs[id]++
		case <-time.After(10 * time.Second):
			t.Fatalf("job %s never started", j.ID)
		}
		flush()
		release <- struct{}{}
		f.waitState(t, j.ID, 10*time.Second, job.StateSucceeded)
		flush()
	}
	if len(runs) != 2 {
		t.Errorf("runs by job: %v, want two jobs once each", runs)
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		n, err := rdb.ZCard(ctx, keys.New(f.prefix).LeaseSet(key)).Result()
		return err == nil && n == 0
	}, "the key's slots were never given back")
}
