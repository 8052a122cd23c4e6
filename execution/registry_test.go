package execution_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// A worker publishes itself in the registry of live workers with its
// heartbeat, under the name its executions carry: its host, queues,
// kinds, running executions (by tenant) and times, in an entry that
// expires within a lease TTL unless renewed; it takes the entry out as it
// stops.
//
// Fails when the entry is missing, wrong, without a TTL, or outlives its
// worker.
func TestWorkerPublishesItselfInTheRegistry(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	w, stop := f.startWorker(t, execution.Config{ID: "reg-1", Queues: []string{"default", "other"}},
		map[string]execution.Handler{"slow": block, "echo": echo})
	j := f.submit(t, job.Submission{Kind: "slow"})
	running := f.waitState(t, j.ID, 10*time.Second, job.StateRunning)
	if running.Execution.Worker != w.ID() {
		t.Fatalf("the execution names worker %q, want %q", running.Execution.Worker, w.ID())
	}

	var live []execution.WorkerInfo
	testenv.Eventually(t, 10*time.Second, func() bool {
		var err error
		live, err = execution.LiveWorkers(ctx, f.rdb, f.prefix)
		return err == nil && len(live) == 1 && live[0].Running == 1
	}, "the worker running a job is not in the registry: %v", live)
	got := live[0]
	if got.ID != "reg-1" || got.Host == "" || len(got.Queues) != 2 || len(got.Kinds) != 2 || got.Kinds[0] != "echo" ||
		got.Tenants["acme"] != 1 || got.StartedAt.IsZero() || got.HeartbeatAt.IsZero() {
		t.Fatalf("registry entry %+v", got)
	}
	ks := keys.New(f.prefix)
	if ttl := f.rdb.PTTL(ctx, ks.Worker("reg-1")).Val(); ttl <= 0 || ttl > 5*time.Second {
		t.Fatalf("the entry expires in %v, want within the lease TTL of 5s", ttl)
	}
	if ttl := f.rdb.PTTL(ctx, ks.Workers()).Val(); ttl <= 0 {
		t.Fatalf("the registry expires in %v, want a TTL", ttl)
	}

	f.cancelJob(t, j.ID)
	stop()
	if live, err := execution.LiveWorkers(ctx, f.rdb, f.prefix); err != nil || len(live) != 0 {
		t.Fatalf("after the worker stopped: %+v, %v", live, err)
	}
}
