package usage_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/ratelimit/usage"
)

// A worker records the tokens a job used when it finishes. If the reply is
// lost and the worker retries, or the job's finish runs twice, the event id
// (here the execution id) keeps the tokens from counting twice.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	counters, err := usage.New(store.New(rdb, store.Config{}), usage.Config{})
	if err != nil {
		log.Fatal(err)
	}
	finished := time.Now()
	for range 2 { // the second is a retry
		added, err := counters.Add(ctx, "acme", "llm.tokens", 1234, "exec-42", finished)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("added:", added)
	}
	days, err := counters.Get(ctx, "acme", finished.AddDate(0, 0, -6), finished)
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range days {
		fmt.Println(d.Date.Format(time.DateOnly), d.Counts["llm.tokens"])
	}
}
