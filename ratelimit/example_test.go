package ratelimit_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/ratelimit"
)

func ExampleParseRate() {
	r, err := ratelimit.ParseRate("50/s:100")
	fmt.Println(r.Limit, r.Period, r.Burst, err)
	_, err = ratelimit.ParseRate("50/d")
	fmt.Println(err)
	// Output:
	// 50 1s 100 <nil>
	// ratelimit: invalid argument: rate "50/d": unit "d" is not s, m or h (want <limit>/<unit>[:<burst>], unit s, m or h, e.g. 50/s:100)
}

func ExampleHeaders() {
	rec := httptest.NewRecorder()
	ratelimit.Headers(rec.Header(), ratelimit.Decision{
		Limit: 100, Remaining: 0, Reset: 2 * time.Second, RetryAfter: 20 * time.Millisecond,
		Policy: `"default";q=50;w=1;burst=100`,
	})
	for _, h := range []string{"RateLimit", "RateLimit-Policy", "Retry-After"} {
		fmt.Printf("%s: %s\n", h, rec.Header().Get(h))
	}
	// Output:
	// RateLimit: "default";r=0;t=2
	// RateLimit-Policy: "default";q=50;w=1;burst=100
	// Retry-After: 1
}

// An API limits each tenant's submissions with a token bucket shared by all
// its replicas, falls back to a per-process share while Redis is down, and
// answers 429 for a refusal, 503 when no decision could be made.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	rate, err := ratelimit.ParseRate("50/s:100") // LEASEHOLD_RATE
	if err != nil {
		log.Fatal(err)
	}
	shared, err := ratelimit.NewTokenBucket(store.New(rdb, store.Config{}), ratelimit.Config{Rate: rate})
	if err != nil {
		log.Fatal(err)
	}
	const replicas = 4
	limiter, err := ratelimit.Fallback(shared, ratelimit.FallbackConfig{
		Rate: ratelimit.Rate{Limit: rate.Limit / replicas, Period: rate.Period, Burst: rate.Burst / replicas},
	})
	if err != nil {
		log.Fatal(err)
	}

	http.HandleFunc("POST /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		tenant := r.Header.Get("X-Tenant") // the authenticated tenant, in a real API
		d, err := limiter.Allow(r.Context(), tenant, 1)
		if err != nil {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "rate limit unavailable", http.StatusServiceUnavailable)
			return
		}
		ratelimit.Headers(w.Header(), d)
		if !d.Allowed {
			http.Error(w, "too many submissions", http.StatusTooManyRequests)
			return
		}
		// ... submit the job
	})
}
