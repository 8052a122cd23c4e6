package httpapi

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leasehold/leasehold/docs"
)

// Ops returns the handler of the operations listener
// (LEASEHOLD_METRICS_ADDR): GET /metrics, /healthz and /readyz. /metrics
// is never on the public port: it names every tenant, queue and limit key,
// and each scrape costs Redis work. It uses cfg's Redis, NATS,
// RedisTimeout, Logger and Metrics.
func Ops(cfg Config) (http.Handler, error) {
	if cfg.Redis == nil {
		return nil, errors.New("httpapi: nil redis client")
	}
	s := &server{
		rdb:          cfg.Redis,
		nc:           cfg.NATS,
		redisTimeout: cmp.Or(cfg.RedisTimeout, DefaultRedisTimeout),
		log:          cmp.Or(cfg.Logger, slog.Default()),
	}
	metrics := cfg.Metrics
	if metrics == nil {
		metrics = promhttp.Handler()
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", methods{http.MethodGet: metrics.ServeHTTP})
	mux.Handle("/healthz", methods{http.MethodGet: s.healthz})
	mux.Handle("/readyz", methods{http.MethodGet: s.readyz})
	mux.HandleFunc("/", notFound)
	return mux, nil
}

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
		observe(q.Name, "waiting", q.Waiting)
	}
	return nil
}
