package execution

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/store/scripts"
)

var beatScript = scripts.Load("worker_beat.lua")

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
	ks := keys.New(prefix)
	ids, err := rdb.ZRange(ctx, ks.Workers(), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("workers: %w", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	entries := make([]*redis.MapStringStringCmd, len(ids))
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			entries[i] = p.HGetAll(ctx, ks.Worker(id))
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("workers: %w", err)
	}
	out := make([]WorkerInfo, 0, len(ids))
	for i, id := range ids {
		if w, ok := decodeWorker(id, entries[i].Val()); ok {
			out = append(out, w)
		}
	}
	return out, nil
}

// decodeWorker reads a registry entry; false for one expired (empty) or
// not readable.
func decodeWorker(id string, h map[string]string) (WorkerInfo, bool) {
	if len(h) == 0 {
		return WorkerInfo{}, false
	}
	w := WorkerInfo{ID: id, Host: h["host"]}
	running, err1 := strconv.Atoi(h["running"])
	started, err2 := strconv.ParseInt(h["started_at"], 10, 64)
	beat, err3 := strconv.ParseInt(h["heartbeat_at"], 10, 64)
	err4 := json.Unmarshal([]byte(h["queues"]), &w.Queues)
	err5 := json.Unmarshal([]byte(h["kinds"]), &w.Kinds)
	err6 := json.Unmarshal([]byte(h["tenants"]), &w.Tenants)
	if errors.Join(err1, err2, err3, err4, err5, err6) != nil {
		return WorkerInfo{}, false
	}
	w.Running, w.StartedAt, w.HeartbeatAt = running, time.UnixMilli(started), time.UnixMilli(beat)
	return w, true
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
	ks := keys.New(w.cfg.Prefix)
	defer func() {
		// Written as the worker stops: ctx is done.
		ctx, stop := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer stop()
		_, _ = w.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Del(ctx, ks.Worker(w.cfg.ID))
			p.ZRem(ctx, ks.Workers(), w.cfg.ID)
			return nil
		})
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
	queues, _ := json.Marshal(w.cfg.Queues)                    // strings always marshal
	kinds, _ := json.Marshal(append([]string{}, w.Kinds()...)) // [], not null, for none
	counts, _ := json.Marshal(tenants)
	ks := keys.New(w.cfg.Prefix)
	return beatScript.Run(ctx, w.rdb, []string{ks.Workers(), ks.Worker(w.cfg.ID)}, w.cfg.ID, w.cfg.LeaseTTL.Milliseconds(),
		"host", r.host, "queues", queues, "kinds", kinds, "running", running, "tenants", counts,
		"started_at", r.started.UnixMilli()).Err()
}
