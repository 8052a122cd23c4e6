package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/leasehold/leasehold/docs"
)

// GET /healthz: the process is up.
func (s *server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// GET /readyz: Redis answers a PING within RedisTimeout. NATS is reported
// but does not count: without it wake-ups and cancel messages wait for
// the workers' polls, and nothing is lost.
func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, stop := s.redisContext(r.Context(), 0)
	defer stop()
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		s.log.WarnContext(ctx, "not ready: redis does not answer", attrErr, err)
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
		writeProblem(w, http.StatusServiceUnavailable, "redis does not answer")
		return
	}
	nats := "none"
	if s.nc != nil {
		nats = strings.ToLower(s.nc.Status().String())
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready", "redis": "ok", "nats": nats})
}

// GET /openapi.yaml: the description of this API.
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	body := docs.OpenAPI()
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write([]byte(body))
}

// jobCounts reports the jobs of every queue in the states that still move,
// for the metrics.
func (s *server) jobCounts(ctx context.Context, observe func(queue string, state string, n int64)) error {
	ctx, stop := s.redisContext(ctx, 0)
	defer stop()
	stats, err := s.store.Stats(ctx)
	if err != nil {
		return err
	}
	for _, q := range stats {
		observe(q.Name, "queued", q.Queued)
		observe(q.Name, "running", q.Running)
		observe(q.Name, "retrying", q.Retrying)
	}
	return nil
}
