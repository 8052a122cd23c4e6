package lease_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/lease"
)

// A program that calls an LLM API itself, outside any job, holds one of the
// fleet's 200 slots of model:gpt-4o while its request runs. Every process
// that shares the Redis counts against the same 200, and a slot of a
// process that crashes comes back when its lease expires.
func ExampleSemaphore() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	leases, err := lease.New(store.New(rdb, store.Config{}), lease.Config{})
	if err != nil {
		log.Fatal(err)
	}
	sem := leases.Semaphore("model:gpt-4o", 200, 10*time.Second)

	// Wait in line for a slot, for at most a minute.
	permit, err := sem.Wait(ctx, "request-7", lease.WaitConfig{MaxWait: time.Minute})
	if err != nil {
		log.Fatal(err) // the line did not move in time, or Redis failed
	}
	defer permit.Release()
	// permit.Context() ends if the lease is lost: pass it to the request,
	// and permit.Token() to any store that must refuse a stale holder.
	fmt.Println("calling the model with fencing token", permit.Token())
}
