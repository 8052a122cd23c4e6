package main

import (
	"context"
	"encoding/json"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// health answers the worker's probes.
type health struct {
	rdb     redis.UniversalClient
	running atomic.Bool // Run is claiming: started and not shutting down
}

// handler serves GET /metrics (metrics), /healthz and /readyz.
func (h *health) handler(metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", h.readyz)
	return mux
}

// readyz: the worker claims, and Redis answers a PING within a second.
// NATS does not count: without it cancels and wake-ups wait for polls.
func (h *health) readyz(w http.ResponseWriter, r *http.Request) {
	if !h.running.Load() {
		notReady(w, "the worker is not running: starting or shutting down")
		return
	}
	ctx, stop := context.WithTimeout(r.Context(), time.Second)
	defer stop()
	if err := h.rdb.Ping(ctx).Err(); err != nil {
		notReady(w, "redis does not answer: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready", "redis": "ok"})
}

// notReady answers 503 with an RFC 9457 problem, as the API does.
func notReady(w http.ResponseWriter, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(http.StatusServiceUnavailable)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"type": "about:blank", "title": "Service Unavailable", "status": http.StatusServiceUnavailable, "detail": detail,
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
