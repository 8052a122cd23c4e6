package execution

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/replicas"
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/store/scripts"
)

var (
	peekScript  = scripts.Load("execution_peek.lua", "fair.lua")
	claimScript = scripts.Load("execution_claim.lua", "fence.lua", "fair.lua", "batch.lua", "stats.lua", "finished.lua", "states.lua", "transition.lua", "signal.lua", "due.lua")
)

// dueBatch bounds how much due work (expired leases, due retries, passed
// deadlines) one claim does, as it bounds the reaper's.
const dueBatch = store.DueBatch

// queue runs one queue's execution scripts. All its keys share the queue's
// hash tag, so each script is atomic on a Redis Cluster too.
type queue struct {
	name string
	// st sends the queue's commands; the slots of concurrency keys are
	// its lease sets, one per key for the whole fleet, each in the key's
	// own hash slot.
	st        *store.Store
	rdb       redis.UniversalClient
	keys      keys.Space
	ttl       time.Duration
	retention time.Duration
	backoff   func(attempt int) time.Duration
	maxEvents int // per execution
	limits    *limits
	// back is how soon this worker comes back to a lane whose keys were
	// full: how long a refusal marks the jobs as waiting (store.AcquireLeases).
	back time.Duration
	// usageTTL is how long a day's usage counts are kept (0: executions
	// are not counted).
	usageTTL time.Duration
	metrics  *metrics
	// hints is what the last claim left for the next (see hints); never
	// nil.
	hints atomic.Pointer[hints]
	// waits holds when this worker's claims first saw each job refused by
	// a key's budget, for the trace of its execution (budgetWaits).
	waits budgetWaits
	// folds is where the reaper's next fold starts (fold.go); the reaper
	// alone uses it.
	folds store.FoldCursor
	// alongFor is how long the peek read along with a fused claim stands
	// in for the next claim's own (hints.along).
	alongFor time.Duration
	// acked is whether its client waits for replicas (see confirmation):
	// 0 not known yet, 1 it does, 2 it does not.
	acked atomic.Int32
	// kinds are the kinds the worker serves, as the peek script takes
	// them, and serves the same as a set: a claim looks at no lane of
	// another kind and takes no job of one (see serves). Set before the
	// worker claims.
	kinds  []any
	served map[string]bool
}

// serves says whether the worker serves the jobs of lane: those of its
// kinds.
func (q *queue) serves(lane string) bool { return q.served[scripts.LaneKind(lane)] }

// waiting says whether q's client waits for replicas, asking once.
func (q *queue) waiting(ctx context.Context) bool {
	switch q.acked.Load() {
	case 1:
		return true
	case 2:
		return false
	}
	waits, err := replicas.Waiting(ctx, q.rdb)
	if err != nil {
		return true // asked again next time; this claim waits as if it did
	}
	if waits {
		q.acked.Store(1)
	} else {
		q.acked.Store(2)
	}
	return waits
}

// tenantsOf reads the tenant of each retired job, whose listing entry
// (the tenant's index) the claim removes with the record, in one step
// (scripts.ReadTenant, in a transaction); "" for a record already gone.
func (q *queue) tenantsOf(ctx context.Context, retired []string) ([]string, error) {
	if len(retired) == 0 {
		return nil, nil
	}
	reads := make([]scripts.TenantRead, len(retired))
	if _, err := q.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for k, id := range retired {
			reads[k] = scripts.ReadTenant(ctx, p, q.keys.Job(q.name, id), q.keys.JobFolded(q.name, id))
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("claim %s: tenants of retired jobs: %w", q.name, err)
	}
	tenants := make([]string, len(retired))
	for k, r := range reads {
		tenants[k] = r.Tenant()
	}
	return tenants, nil
}

// confirmation is the WAIT for replicas (LEASEHOLD_REDIS_MIN_REPLICAS)
// that a claim's handlers wait for. On one primary (a single Redis, or
// Sentinel's) the claim script runs on a connection of its own, without
// its WAIT, and the worker sends the WAIT on that connection once the
// claim has returned (Worker.confirmer): the next claim need not wait for
// the replica, and one WAIT after several claims confirms them all (the
// primary's offset after the last one's writes covers the earlier ones').
// On a Cluster each round trip carries its WAIT, as before: the claim's
// slots are on other shards.
type confirmation struct {
	owed replicas.Owed
	conn *redis.Conn // the claim script's
}

func (c *confirmation) close() { _ = c.conn.Close() }
