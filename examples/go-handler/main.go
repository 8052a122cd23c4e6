// Command go-handler is a Go program with a job kind of its own,
// "word.count", that runs the Leasehold worker in its own process through
// package leasehold: no fork of cmd/worker. It serves the built-in kinds
// too, and shares queues, limits and cancels with every other worker on
// the same Redis.
//
//	LEASEHOLD_REDIS_URL=redis://127.0.0.1:6379/0 LEASEHOLD_NATS_URL=nats://127.0.0.1:4222 go run ./examples/go-handler
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/execution"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "go-handler:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	opts, err := redis.ParseURL(cmp.Or(os.Getenv("LEASEHOLD_REDIS_URL"), "redis://127.0.0.1:6379/0"))
	if err != nil {
		return fmt.Errorf("LEASEHOLD_REDIS_URL: %w", err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	nc, err := nats.Connect(cmp.Or(os.Getenv("LEASEHOLD_NATS_URL"), nats.DefaultURL), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true))
	if err != nil {
		return err
	}
	defer nc.Close()

	c, err := leasehold.NewClient(rdb, leasehold.Config{Worker: execution.Config{Prefix: os.Getenv("LEASEHOLD_PREFIX"), NATS: nc}})
	if err != nil {
		return err
	}
	c.Handle("word.count", countWords)
	slog.Info("serving word.count", "worker", c.WorkerID())
	return c.Run(ctx) // until SIGTERM; running jobs get the shutdown grace
}

// countWords counts the words of {"text": "..."}, one progress event per
// line.
func countWords(ctx context.Context, e *execution.Execution) (any, error) {
	var in struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(e.Input, &in); err != nil {
		return nil, execution.Permanent(fmt.Errorf("input: %w", err)) // retrying cannot fix it
	}
	words := 0
	for i, line := range strings.Split(in.Text, "\n") {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx) // cancelled, lease lost, timed out or handed back
		}
		words += len(strings.Fields(line))
		if err := e.Emit(ctx, execution.EventProgress, map[string]int{"line": i + 1, "words": words}); err != nil {
			return nil, err // a newer execution owns the job: stop
		}
	}
	return map[string]int{"words": words}, nil
}
