// Command chatgate is a streaming chat endpoint behind a fleet-wide limit.
//
// GET /chat?prompt=... answers with server-sent events: one "token" event per
// token, then "done". Every replica shares one lease.Semaphore in Redis, so
// at most -limit answers stream at once across the fleet. A request that
// finds every slot taken does not fail and is not turned into a job: it
// holds its HTTP request open and waits in line with Semaphore.Wait, first
// come first served across replicas. It is answered 503 with a Retry-After
// if no slot frees up within -max-wait, and leaves the line at once if the
// client goes away or the server shuts down. A release wakes the line over
// NATS when -nats is given; without it, waiters poll.
//
// The permit's context is cancelled if its lease is lost (Redis unreachable
// for a whole TTL): the stream stops, because another request may have its
// slot by then. The answer here is numbered tokens at a steady pace; a real
// gate would proxy an LLM API in their place.
//
//	chatgate -redis localhost:6379 -nats nats://localhost:4222 -limit 2
//	curl -N 'localhost:8080/chat?prompt=hi'
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/lease"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(code(run(ctx, os.Args[1:], os.Stdout)))
}

func code(err error) int {
	if err != nil {
		fmt.Fprintln(os.Stderr, "chatgate:", err)
		return 1
	}
	return 0
}

// run serves until ctx is done, then shuts down: waiting requests leave the
// line, streaming ones stop, and every slot is released before it returns.
func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("chatgate", flag.ContinueOnError)
	addr := fs.String("addr", "localhost:8080", "listen address")
	redisAddr := fs.String("redis", "localhost:6379", "Redis address")
	natsURL := fs.String("nats", "", "NATS URL for wake-ups (default: poll only)")
	prefix := fs.String("prefix", "", "Redis key prefix (default leasehold:)")
	limit := fs.Int("limit", 2, "answers streaming at once, fleet-wide")
	maxWait := fs.Duration("max-wait", 10*time.Second, "how long a request waits for a slot")
	tokens := fs.Int("tokens", 20, "tokens per answer")
	pace := fs.Duration("pace", 50*time.Millisecond, "time between tokens")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: *redisAddr})
	defer rdb.Close()
	c, err := lease.New(rdb, lease.Config{Prefix: *prefix})
	if err != nil {
		return err
	}
	var nc *nats.Conn
	if *natsURL != "" {
		if nc, err = nats.Connect(*natsURL, nats.MaxReconnects(-1)); err != nil {
			return fmt.Errorf("connect to NATS: %w", err)
		}
		defer nc.Close()
	}
	g := &gate{
		sem:    c.Semaphore("chat", *limit, 10*time.Second),
		wait:   lease.WaitConfig{MaxWait: *maxWait, NATS: nc},
		tokens: *tokens,
		pace:   *pace,
		log:    slog.New(slog.NewTextHandler(out, nil)),
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "chatgate: listening on http://%s/chat\n", ln.Addr())
	mux := http.NewServeMux()
	mux.Handle("GET /chat", g)
	// Requests live in ctx, so a shutdown ends the waits and streams at once.
	srv := &http.Server{Handler: mux, BaseContext: func(net.Listener) context.Context { return ctx }}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, stop := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer stop()
	return srv.Shutdown(sctx)
}

// gate streams answers, at most the semaphore's limit at once.
type gate struct {
	sem    *lease.Semaphore
	wait   lease.WaitConfig
	tokens int
	pace   time.Duration
	log    *slog.Logger
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := uuid.NewString()
	queued := time.Now()
	p, err := g.sem.Wait(r.Context(), id, g.wait)
	switch {
	case err == nil:
		// Granted, even if the client went away meanwhile: the deferred
		// Release below must free the slot at once, not at its TTL.
	case errors.Is(err, lease.ErrTimedOut):
		retry := strconv.Itoa(int(math.Ceil(g.wait.MaxWait.Seconds())))
		w.Header().Set("Retry-After", retry)
		writeProblem(w, http.StatusServiceUnavailable, "every answer slot stayed taken for "+g.wait.MaxWait.String())
		return
	case r.Context().Err() != nil:
		return // the client went away, or the server is shutting down
	default:
		g.log.ErrorContext(r.Context(), "wait for a slot", "request_id", id, "err", err)
		writeProblem(w, http.StatusServiceUnavailable, "no answer slot: the limit store is unavailable")
		return
	}
	defer func() {
		if err := p.Release(); err != nil {
			g.log.ErrorContext(r.Context(), "release the slot", "request_id", id, "err", err)
		}
	}()
	g.log.InfoContext(r.Context(), "streaming", "request_id", id, "waited", time.Since(queued), "fencing_token", p.Token())

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	flusher, _ := w.(http.Flusher)
	ctx := p.Context() // ends if the client goes away or the lease is lost
	tick := time.NewTicker(g.pace)
	defer tick.Stop()
	for i := 1; i <= g.tokens; i++ {
		fmt.Fprintf(w, "event: token\ndata: %d\n\n", i)
		if flusher != nil {
			flusher.Flush()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
	fmt.Fprint(w, "event: done\ndata: {}\n\n")
}

// writeProblem answers with an RFC 9457 problem detail.
func writeProblem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"type": "about:blank", "title": http.StatusText(status), "status": status, "detail": detail,
	})
}
