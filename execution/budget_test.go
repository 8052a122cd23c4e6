package execution_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/keys"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/lease"
)

// TestBudgetAndLimitOnOneKeyAcrossQueues: one key with a concurrency limit
// of 3 and a tpm that fits 10 jobs' costs, named by jobs in three queues
// that two workers serve, on one Redis and on a Cluster (where the key's
// slot is apart from the queues'). Neither is ever exceeded: at every start
// at most 3 run, exactly 10 start within the minute, and the rest wait
// queued, not failed.
func TestBudgetAndLimitOnOneKeyAcrossQueues(t *testing.T) {
	t.Parallel()
	for _, b := range testenv.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			budgetAndLimit(t, b.Client)
		})
	}
}

func budgetAndLimit(t *testing.T, rdb redis.UniversalClient) {
	f := newFixtureOn(t, rdb, testenv.NATS(t).Conn(t))
	const key, limit, cost, fits = "model:shared", 3, 100, 10
	n := int64(limit)
	if err := f.store.SetKeyLimit(t.Context(), key, job.KeyLimit{Limit: &n, Budget: lease.Budget{TPM: cost * fits}}); err != nil {
		t.Fatal(err)
	}
	queues := []string{"q1", "q2", "q3"}
	var mu sync.Mutex
	running, peak, started := 0, 0, 0
	var over []string
	work := func(ctx context.Context, e *execution.Execution) (any, error) {
		mu.Lock()
		running++
		started++
		peak = max(peak, running)
		if running > limit || started > fits {
			over = append(over, fmt.Sprintf("%d running, %d started", running, started))
		}
		mu.Unlock()
		defer func() {
			mu.Lock()
			running--
			mu.Unlock()
		}()
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
		}
		return nil, nil
	}
	for range 2 {
		f.startWorker(t, execution.Config{Queues: queues, Concurrency: 4, LeaseTTL: 5 * time.Second},
			map[string]execution.Handler{"work": work})
	}
	var ids []string
	for i := range 18 {
		j := f.submit(t, job.Submission{Kind: "work", Queue: queues[i%3], ConcurrencyKeys: []string{key},
			Cost: &job.Cost{Tokens: cost}, MaxAttempts: 1})
		ids = append(ids, j.ID)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return started == fits && running == 0
	}, "fewer than %d jobs ran: %s", fits, lazy(func() string {
		mu.Lock()
		defer mu.Unlock()
		ks := keys.New(f.prefix)
		var js []string
		for _, id := range ids {
			j := f.get(t, id)
			e := ""
			if j.Execution != nil {
				e = j.Execution.ID
			}
			js = append(js, fmt.Sprintf("%s/%d/%s", j.State, j.Attempt, e))
		}
		return fmt.Sprintf("%d started, %d running, over %v; jobs %v; window %v spent %v", started, running, over, js,
			f.rdb.ZRangeWithScores(context.Background(), ks.LeaseWindow(key), 0, -1).Val(),
			f.rdb.HGetAll(context.Background(), ks.LeaseSpent(key)).Val())
	}))
	// Many claims and heartbeats pass, and nothing more starts.
	deadline := time.Now().Add(time.Second)
	testenv.Eventually(t, 5*time.Second, func() bool { return time.Now().After(deadline) }, "")
	done, queued := 0, 0
	for _, id := range ids {
		switch f.get(t, id).State {
		case job.StateSucceeded:
			done++
		case job.StateQueued:
			queued++
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(over) > 0 || done != fits || queued != len(ids)-fits || peak != limit {
		t.Fatalf("over the limit or budget %v; %d succeeded, %d queued, peak %d: want %d, %d, %d",
			over, done, queued, peak, fits, len(ids)-fits, limit)
	}
}
