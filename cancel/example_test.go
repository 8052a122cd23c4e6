package cancel_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/cancel"
	"github.com/leasehold/leasehold/internal/store"
)

// A worker watches the job it runs; an API process asks for it to stop. The
// two sides only share Redis, NATS and the config's Prefix and Subject.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	nc, err := nats.Connect(nats.DefaultURL, nats.MaxReconnects(-1))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()

	// Worker side: one Watcher per process, running for the process's life.
	w, err := cancel.NewWatcher(store.New(rdb, store.Config{}), nc, cancel.WatcherConfig{})
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stopRun := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(runCtx) }()
	defer func() { stopRun(); <-ran }()

	jobCtx, stop := w.Watch(ctx, "job-42")
	defer stop()

	// API side: the flag first, then the message.
	flags, err := cancel.New(store.New(rdb, store.Config{}), nc, cancel.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := flags.Request(ctx, "job-42", time.Hour); err != nil {
		log.Fatal(err) // Redis failed: nothing was promised
	}

	<-jobCtx.Done()
	fmt.Println(context.Cause(jobCtx) == cancel.ErrRequested)
}
