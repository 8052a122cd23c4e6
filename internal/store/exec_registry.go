package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store/scripts"
)

var workerBeatScript = scripts.Load("worker_beat.lua")

// WorkerEntry is a live worker's entry in the registry of live workers.
type WorkerEntry struct {
	ID          string
	Host        string
	Queues      []string
	Kinds       []string
	Running     int // executions running now
	StartedAt   time.Time
	HeartbeatAt time.Time // on the Redis clock
	// Tenants counts, for each tenant, the executions it runs of the
	// tenant's jobs.
	Tenants map[string]int
}

// WorkerBeat is what a worker writes of itself at each beat.
type WorkerBeat struct {
	ID        string
	TTL       time.Duration // the entry expires unless renewed within it
	Host      string
	Queues    []string
	Kinds     []string
	Running   int
	Tenants   map[string]int
	StartedAt time.Time
}

// LiveWorkers reads the registry of live workers: those whose entries have
// not expired, sorted by id. Two round trips.
func (s *Store) LiveWorkers(ctx context.Context) ([]WorkerEntry, error) {
	ids, err := s.rdb.ZRange(ctx, s.keys.Workers(), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("store: workers: %w", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	entries := make([]*redis.MapStringStringCmd, len(ids))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			entries[i] = p.HGetAll(ctx, s.keys.Worker(id))
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("store: workers: %w", err)
	}
	out := make([]WorkerEntry, 0, len(ids))
	for i, id := range ids {
		if w, ok := decodeWorker(id, entries[i].Val()); ok {
			out = append(out, w)
		}
	}
	return out, nil
}

// decodeWorker reads a registry entry; false for one expired (empty) or
// not readable.
func decodeWorker(id string, h map[string]string) (WorkerEntry, bool) {
	if len(h) == 0 {
		return WorkerEntry{}, false
	}
	w := WorkerEntry{ID: id, Host: h["host"]}
	running, err1 := strconv.Atoi(h["running"])
	started, err2 := strconv.ParseInt(h["started_at"], 10, 64)
	beat, err3 := strconv.ParseInt(h["heartbeat_at"], 10, 64)
	err4 := json.Unmarshal([]byte(h["queues"]), &w.Queues)
	err5 := json.Unmarshal([]byte(h["kinds"]), &w.Kinds)
	err6 := json.Unmarshal([]byte(h["tenants"]), &w.Tenants)
	if errors.Join(err1, err2, err3, err4, err5, err6) != nil {
		return WorkerEntry{}, false
	}
	w.Running, w.StartedAt, w.HeartbeatAt = running, time.UnixMilli(started), time.UnixMilli(beat)
	return w, true
}

// BeatWorker writes b's entry in the registry, for b.TTL, in one script.
func (s *Store) BeatWorker(ctx context.Context, b WorkerBeat) error {
	queues, _ := json.Marshal(b.Queues)                      // strings always marshal
	kinds, _ := json.Marshal(append([]string{}, b.Kinds...)) // [], not null, for none
	tenants, _ := json.Marshal(b.Tenants)
	err := workerBeatScript.Run(ctx, s.rdb, []string{s.keys.Workers(), s.keys.Worker(b.ID)}, b.ID, b.TTL.Milliseconds(),
		"host", b.Host, "queues", queues, "kinds", kinds, "running", b.Running, "tenants", tenants,
		"started_at", b.StartedAt.UnixMilli()).Err()
	if err != nil {
		return fmt.Errorf("store: beat worker %s: %w", b.ID, err)
	}
	return nil
}

// RemoveWorker takes worker id's entry out of the registry, in one
// transaction.
func (s *Store) RemoveWorker(ctx context.Context, id string) error {
	if _, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, s.keys.Worker(id))
		p.ZRem(ctx, s.keys.Workers(), id)
		return nil
	}); err != nil {
		return fmt.Errorf("store: remove worker %s: %w", id, err)
	}
	return nil
}
