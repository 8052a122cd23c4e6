package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/job"
)

// Worker is a live worker as GET /v1/workers shows it.
type Worker struct {
	ID          string    `json:"id"`
	Host        string    `json:"host"`
	Queues      []string  `json:"queues"`
	Kinds       []string  `json:"kinds"`
	Running     int       `json:"running"`
	StartedAt   time.Time `json:"started_at"`
	HeartbeatAt time.Time `json:"heartbeat_at"`
}

// MarshalJSON writes the times as the API writes every time: RFC 3339,
// milliseconds, UTC.
func (w Worker) MarshalJSON() ([]byte, error) {
	type plain Worker // no methods, so no recursion; the fields below shadow its times
	return json.Marshal(struct {
		plain
		StartedAt   string `json:"started_at"`
		HeartbeatAt string `json:"heartbeat_at"`
	}{plain(w), timestamp(w.StartedAt), timestamp(w.HeartbeatAt)})
}

// WorkerList is the body of GET /v1/workers.
type WorkerList struct {
	Workers []Worker `json:"workers"`
}

// listWorkers answers GET /v1/workers: the live workers (the registry
// that each worker renews with its heartbeat). The admin sees every one
// as it names itself; a tenant sees only the workers running its jobs,
// each under the opaque name its jobs' executions show (shown), without
// its host, and running counts only the tenant's executions.
func (s *server) listWorkers(w http.ResponseWriter, r *http.Request, c caller) {
	ctx, stop := s.redisContext(r.Context(), 0)
	defer stop()
	live, err := execution.LiveWorkers(ctx, s.rdb, s.prefix)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := WorkerList{Workers: []Worker{}}
	for _, wk := range live {
		v := Worker{ID: wk.ID, Host: wk.Host, Queues: wk.Queues, Kinds: wk.Kinds, Running: wk.Running,
			StartedAt: wk.StartedAt, HeartbeatAt: wk.HeartbeatAt}
		if !c.admin {
			mine := wk.Tenants[c.tenant]
			if mine == 0 {
				continue
			}
			v.ID, v.Host, v.Running = job.OpaqueWorker(s.keys.names, c.tenant, wk.ID), "", mine
		}
		out.Workers = append(out.Workers, v)
	}
	writeJSON(w, http.StatusOK, out)
}

// timestamp is t as the API writes times: RFC 3339, milliseconds, UTC.
func timestamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// serving caches the kinds that live workers serve in each queue, read
// from the registry at most once per servingFor: a queued job's
// blocked_by is computed on each read, and the registry changes only as
// workers start and stop.
type serving struct {
	mu   sync.Mutex
	read time.Time
	by   map[string]map[string]bool // queue -> kind -> served
}

const servingFor = time.Second

// blockedBy returns why j waits in its queue, if no live worker serves
// its kind there; nil when one does, or j is not queued.
func (s *server) blockedBy(ctx context.Context, j job.Job) (*job.BlockedBy, error) {
	if j.State != job.StateQueued {
		return nil, nil
	}
	s.serving.mu.Lock()
	defer s.serving.mu.Unlock()
	if s.serving.by == nil || time.Since(s.serving.read) > servingFor {
		ctx, stop := s.redisContext(ctx, 0)
		defer stop()
		live, err := execution.LiveWorkers(ctx, s.rdb, s.prefix)
		if err != nil {
			return nil, err
		}
		by := map[string]map[string]bool{}
		for _, wk := range live {
			for _, q := range wk.Queues {
				if by[q] == nil {
					by[q] = map[string]bool{}
				}
				for _, k := range wk.Kinds {
					by[q][k] = true
				}
			}
		}
		s.serving.by, s.serving.read = by, time.Now()
	}
	if s.serving.by[j.Queue][j.Kind] {
		return nil, nil
	}
	return &job.BlockedBy{Kind: j.Kind, Reason: "no live worker serves it"}, nil
}
