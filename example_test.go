package leasehold_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os/signal"
	"strings"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/job"
)

// A Go program with a job kind of its own: it runs a worker for it (and for
// the built-in kinds), submits a job, and stops cleanly on SIGTERM, handing
// back what still runs after the grace period.
func ExampleClient() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	nc, err := nats.Connect(nats.DefaultURL, nats.MaxReconnects(-1))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()

	c, err := leasehold.NewClient(rdb, leasehold.Config{Worker: execution.Config{NATS: nc, Concurrency: 8}})
	if err != nil {
		log.Fatal(err)
	}
	c.Handle("word.count", func(ctx context.Context, e *execution.Execution) (any, error) {
		var in struct{ Text string }
		if err := json.Unmarshal(e.Input, &in); err != nil {
			return nil, execution.Permanent(err) // retrying cannot fix bad input
		}
		if err := e.Emit(ctx, execution.EventProgress, map[string]string{"step": "counting"}); err != nil {
			return nil, err // a newer execution owns the job: stop
		}
		return map[string]int{"words": len(strings.Fields(in.Text))}, nil
	})

	j, err := c.Submit(ctx, "acme", job.Submission{Kind: "word.count", Input: json.RawMessage(`{"text":"to be or not"}`)})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("submitted", j.Kind)
	if err := c.Run(ctx); err != nil { // until SIGTERM
		log.Fatal(err)
	}
}
