package store_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// fixture is a Store on its own key prefix, with the key space to inspect
// what it wrote.
type fixture struct {
	store  *store.Store
	rdb    redis.UniversalClient
	keys   keys.Space
	prefix string
}

func newFixture(t testing.TB, rdb redis.UniversalClient, cfg store.Config) fixture {
	t.Helper()
	cfg.Prefix = testenv.Prefix(t)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return fixture{store: store.New(rdb, cfg), rdb: rdb, keys: keys.New(cfg.Prefix), prefix: cfg.Prefix}
}

// eachBackend runs f in parallel subtests on the single Redis and on the
// Redis Cluster, each with a fresh fixture.
func eachBackend(t *testing.T, cfg store.Config, f func(t *testing.T, fx fixture)) {
	t.Helper()
	for _, b := range testenv.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			f(t, newFixture(t, b.Client, cfg))
		})
	}
}

// onEveryMaster runs f on the single Redis, or on each master of a cluster.
func (fx fixture) onEveryMaster(t testing.TB, f func(context.Context, *redis.Client) error) {
	t.Helper()
	var err error
	switch c := fx.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(context.Background(), f)
	case *redis.Client:
		err = f(context.Background(), c)
	default:
		t.Fatalf("unexpected client %T", fx.rdb)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// written returns every key under the fixture's prefix.
func (fx fixture) written(t testing.TB) []string {
	t.Helper()
	var mu sync.Mutex
	var found []string
	fx.onEveryMaster(t, func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, fx.prefix+"*", 1000).Iterator()
		for it.Next(ctx) {
			mu.Lock()
			found = append(found, it.Val())
			mu.Unlock()
		}
		return it.Err()
	})
	slices.Sort(found)
	return found
}

// blockedClients counts the clients blocked in a command (XREAD BLOCK).
func (fx fixture) blockedClients(t testing.TB) int {
	t.Helper()
	var total atomic.Int64
	fx.onEveryMaster(t, func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "clients").Result()
		if err != nil {
			return err
		}
		for line := range strings.Lines(info) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "blocked_clients:"); ok {
				n, err := strconv.Atoi(v)
				total.Add(int64(n))
				return err
			}
		}
		return errors.New("no blocked_clients in INFO clients")
	})
	return int(total.Load())
}

func (fx fixture) submit(t testing.TB, tenant string, s job.Submission) job.Job {
	t.Helper()
	j, created, err := fx.store.Submit(context.Background(), tenant, s, "")
	if err != nil {
		t.Fatal(err)
	}
	if !created {
		t.Fatalf("job %s not created", j.ID)
	}
	return j
}

// events returns all the events of job id (fewer than a page), read as the
// API reads them.
func (fx fixture) events(t testing.TB, id string) []job.Event {
	t.Helper()
	evs, err := fx.store.Events(context.Background(), "", id, true, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// stats returns the queue's per-state counts as stored (the hash also
// holds the ring of finishes per minute, which is left out).
func (fx fixture) stats(t testing.TB, queue string) map[string]string {
	t.Helper()
	h, err := fx.rdb.HGetAll(context.Background(), fx.keys.QueueStats(queue)).Result()
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		if v == "0" || (k[0] == 'm' && k[1] >= '0' && k[1] <= '9') {
			delete(h, k)
		}
	}
	return h
}

func dur(d time.Duration) job.Duration { return job.Duration(d) }
