package execution_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
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
	if err := f.store.SetKeyLimit(t.Context(), key, job.KeyLimit{Limit: &n, Budget: job.Budget{TPM: cost * fits}}); err != nil {
		t.Fatal(err)
	}
	queues := []string{"q1", "q2", "q3"}
	var mu sync.Mutex
	running, peak, started := 0, 0, 0
	var over []string
	// The first jobs hold until the limit is full, so that the peak shows
	// the limit is reached however slowly a loaded machine claims.
	full := make(chan struct{})
	work := func(ctx context.Context, e *execution.Execution) (any, error) {
		mu.Lock()
		running++
		started++
		first := started <= limit
		peak = max(peak, running)
		if running == limit && first {
			close(full)
		}
		if running > limit || started > fits {
			over = append(over, fmt.Sprintf("%d running, %d started", running, started))
		}
		mu.Unlock()
		defer func() {
			mu.Lock()
			running--
			mu.Unlock()
		}()
		var held <-chan struct{}
		var ran <-chan time.Time
		if first {
			held = full
		} else {
			ran = time.After(50 * time.Millisecond)
		}
		select {
		case <-held:
		case <-ran:
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

// TestNoKeyATenantNamesOutlivesItsUse: a tenant floods the engine with 10 000
// keys of its own (tenant:acme:...: a tenant may name any of them), 16 a
// job, half of them under a wildcard budget. Once the jobs have run and
// their leases' TTL has passed, no key built from them is left but the
// budgets' own, each expiring: a rolling minute's window a minute after its
// last entry, an adaptive key's learned limit and its history within the hour.
func TestNoKeyATenantNamesOutlivesItsUse(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	// A wildcard budget gives every key of the flood a window, a spent
	// hash and an adaptive state too.
	if err := f.store.SetKeyLimit(t.Context(), "flood:*", job.KeyLimit{Budget: job.Budget{RPM: 1000, TPM: 1_000_000, Adaptive: true}}); err != nil {
		t.Fatal(err)
	}
	f.startWorker(t, execution.Config{Concurrency: 32, LeaseTTL: time.Second}, map[string]execution.Handler{"echo": echo})
	const jobs, perJob = 625, 16
	var ids []string
	for i := range jobs {
		var ks []string
		for k := range perJob {
			if k%2 == 0 {
				ks = append(ks, fmt.Sprintf("tenant:acme:r%d-%d", i, k))
			} else {
				ks = append(ks, fmt.Sprintf("flood:r%d-%d", i, k))
			}
		}
		ids = append(ids, f.submit(t, job.Submission{Kind: "echo", ConcurrencyKeys: ks[:perJob-1], Cost: &job.Cost{Tokens: 10}}).ID)
	}
	for _, id := range ids {
		f.waitState(t, id, 60*time.Second, job.StateSucceeded)
	}
	// Each key that may stay, and the longest it may live.
	stays := map[string]time.Duration{":window": time.Minute + time.Second, ":spent": time.Minute + time.Second,
		":adapt": time.Hour, ":history": time.Hour}
	left := func() []string {
		var out []string
		for _, pattern := range []string{"*{lease:tenant:acme:r*", "*{lease:flood:r*", "*lane:*tenant:acme:r*"} {
			keys, err := scanAll(f.rdb, f.prefix+pattern)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				most, ok := stays[k[strings.LastIndexByte(k, ':'):]]
				if ttl := f.rdb.PTTL(t.Context(), k).Val(); !ok || ttl <= 0 || ttl > most {
					out = append(out, fmt.Sprintf("%s (ttl %v)", k, ttl))
				}
			}
		}
		return out
	}
	testenv.Eventually(t, 30*time.Second, func() bool { return len(left()) == 0 }, "keys left behind: %s", lazy(func() string {
		l := left()
		return fmt.Sprintf("%d, such as %v", len(l), l[:min(len(l), 5)])
	}))
}

// scanAll returns every key matching pattern, on every master of a Cluster.
func scanAll(rdb redis.UniversalClient, pattern string) ([]string, error) {
	var out []string
	scan := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			out = append(out, iter.Val())
		}
		return iter.Err()
	}
	ctx := context.Background()
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		return out, cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return scan(ctx, c)
		})
	}
	return out, scan(ctx, rdb.(*redis.Client))
}

// TestClaimReservesAtLeastEachJobsCost: a claim reserves a lane's jobs'
// tokens before it reads them, at the cost of the lane's last job; the
// claim script leaves a job that costs more, and the next claim reserves
// its cost. Jobs of one lane, one at a time, cost 100, 100, 900 and 50:
// each execution's reservation (which stands, as none reports tokens) is
// at least its cost, and the last one's is its lane's last cost, 900.
func TestClaimReservesAtLeastEachJobsCost(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if err := f.store.SetKeyLimit(t.Context(), "model:t", job.KeyLimit{Budget: job.Budget{TPM: 100_000}}); err != nil {
		t.Fatal(err)
	}
	costs := []int64{100, 100, 900, 50}
	var ids []string
	for _, c := range costs {
		ids = append(ids, f.submit(t, job.Submission{Kind: "quick", ConcurrencyKeys: []string{"model:t"}, Cost: &job.Cost{Tokens: c}}).ID)
	}
	f.startWorker(t, execution.Config{Concurrency: 1}, map[string]execution.Handler{
		"quick": func(context.Context, *execution.Execution) (any, error) { return "ok", nil },
	})
	spent := keys.New(f.prefix).LeaseSpent("model:t")
	var reserved []int64
	for i, id := range ids {
		j := f.waitState(t, id, 10*time.Second, job.StateSucceeded)
		n, err := f.rdb.HGet(t.Context(), spent, j.Execution.ID).Int64()
		if err != nil {
			t.Fatalf("job %d: its execution's tokens: %v", i, err)
		}
		reserved = append(reserved, n)
	}
	t.Logf("costs %v, reserved %v", costs, reserved)
	for i, c := range costs {
		if reserved[i] < c {
			t.Errorf("job %d of cost %d reserved %d", i, c, reserved[i])
		}
	}
	if reserved[3] != 900 {
		t.Errorf("the last job reserved %d, want its lane's last cost, 900 (asked for before it was read)", reserved[3])
	}
}

// The 50th pushback in a row fails a job with upstream_limited; a retry
// then gives it a fresh row of 50, not one try.
func TestPushbacksInARowFailTheJobAndARetryStartsAFreshRow(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var refuse atomic.Int32 // how many calls the upstream still refuses
	refuse.Store(50)
	f.startWorker(t, execution.Config{}, map[string]execution.Handler{
		"llm": func(context.Context, *execution.Execution) (any, error) {
			if refuse.Add(-1) >= 0 {
				return nil, execution.Pushback(errors.New("429 Too Many Requests"), time.Millisecond)
			}
			return "ok", nil
		},
	})
	j := f.submit(t, job.Submission{Kind: "llm", MaxAttempts: 1})
	failed := f.waitState(t, j.ID, 30*time.Second, job.StateFailed, job.StateSucceeded)
	if errCode(failed) != job.CodeUpstreamLimited {
		t.Fatalf("after 50 pushbacks: %s, error %+v; want failed, upstream_limited", failed.State, failed.Error)
	}
	refuse.Store(3)
	if _, err := f.store.Retry(t.Context(), "acme", j.ID, false); err != nil {
		t.Fatal(err)
	}
	if got := f.waitState(t, j.ID, 30*time.Second, job.StateSucceeded, job.StateFailed); got.State != job.StateSucceeded {
		t.Fatalf("retried after upstream_limited, then 3 pushbacks: %s, error %+v; want succeeded", got.State, got.Error)
	}
}
