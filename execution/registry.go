package execution

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/leasehold/leasehold/internal/store"
	"github.com/redis/go-redis/v9"
)

// WorkerInfo is a live worker as it publishes itself in the registry,
// with its heartbeat: who it is and what it serves.
type WorkerInfo struct {
	ID          string // Config.ID: the name executions, errors, logs and metrics give it
	Host        string
	Queues      []string
	Kinds       []string // sorted
	Running     int      // executions running now
	StartedAt   time.Time
	HeartbeatAt time.Time // on the Redis clock
	// Tenants counts, for each tenant, the executions it runs of the
	// tenant's jobs.
	Tenants map[string]int
}

// LiveWorkers reads the registry of live workers under prefix ("" for
// the default): the workers whose entries have not expired, sorted by id.
func LiveWorkers(ctx context.Context, rdb redis.UniversalClient, prefix string) ([]WorkerInfo, error) {
	live, err := store.New(rdb, store.Config{Prefix: prefix}).LiveWorkers(ctx)
	if err != nil {
		return nil, fmt.Errorf("workers: %w", err)
	}
	out := make([]WorkerInfo, len(live))
	for i, w := range live {
		out[i] = WorkerInfo(w)
	}
	return out, nil
}

// registry publishes the worker in the registry of live workers at once
// and then every heartbeat interval, for a lease TTL each time, until ctx
// is done; then it takes the entry out. An entry a worker fails to renew
// (it died, or lost Redis) expires with its TTL.
type registry struct {
	w       *Worker
	started time.Time
	host    string
}

func (w *Worker) publish(ctx context.Context) error {
	host, _ := os.Hostname()
	r := registry{w: w, started: time.Now(), host: cmp.Or(host, "unknown")}
	defer func() {
		// Written as the worker stops: ctx is done.
		ctx, stop := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer stop()
		_ = w.st.RemoveWorker(ctx, w.cfg.ID)
	}()
	ticker := time.NewTicker(w.cfg.Heartbeat)
	defer ticker.Stop()
	for {
		if err := r.beat(ctx); err != nil && ctx.Err() == nil {
			w.log.WarnContext(ctx, "cannot publish the worker in the registry", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// beat writes the worker's entry once.
func (r registry) beat(ctx context.Context) error {
	w := r.w
	tenants := map[string]int{}
	w.mu.Lock()
	running := len(w.running)
	for e := range w.running {
		tenants[e.Tenant]++
	}
	w.mu.Unlock()
	return w.st.BeatWorker(ctx, store.WorkerBeat{ID: w.cfg.ID, TTL: w.cfg.LeaseTTL, Host: r.host, Queues: w.cfg.Queues,
		Kinds: w.Kinds(), Running: running, Tenants: tenants, StartedAt: r.started})
}
