package store

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/testenv"
)

var rateAlgorithms = map[string]RateAlgorithm{
	"token_bucket": RateTokenBucket, "fixed_window": RateFixedWindow,
	"sliding_log": RateSlidingLog, "sliding_window": RateSlidingWindow,
}

// Each algorithm allows a subject its limit of 2 an hour, refuses the
// third request with a time to retry (within two periods: the sliding
// window weighs the window before too), and counts subjects apart.
func TestAllowRate(t *testing.T) {
	eachBackend(t, func(t *testing.T, _ redis.UniversalClient, s *Store) {
		for name, alg := range rateAlgorithms {
			r := RateRequest{Algorithm: alg, Subject: "acme:" + name, Limit: 2, Period: time.Hour, Burst: 2, Cost: 1}
			for i, want := range []int{1, 0} {
				if d, err := s.AllowRate(t.Context(), r); err != nil || !d.Allowed || d.Remaining != want || d.RetryAfter != 0 {
					t.Fatalf("%s, request %d: %+v, %v; want allowed, %d remaining", name, i+1, d, err, want)
				}
			}
			d, err := s.AllowRate(t.Context(), r)
			if err != nil || d.Allowed || d.Remaining != 0 || d.RetryAfter <= 0 || d.RetryAfter > 2*time.Hour || d.Reset <= 0 {
				t.Errorf("%s, third request: %+v, %v; want refused with a time to retry", name, d, err)
			}
			r.Subject = "other:" + name
			if d, err := s.AllowRate(t.Context(), r); err != nil || !d.Allowed {
				t.Errorf("%s, another subject: %+v, %v; want allowed", name, d, err)
			}
		}
	})
}

// Every rate script runs after Redis lost its script cache.
func TestAllowRateAfterScriptFlush(t *testing.T) {
	t.Parallel()
	rdb := testenv.StartRedis(t).Client(t)
	s := New(rdb, Config{Prefix: testenv.Prefix(t)})
	for name, alg := range rateAlgorithms {
		if err := rdb.ScriptFlush(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		r := RateRequest{Algorithm: alg, Subject: name, Limit: 2, Period: time.Hour, Burst: 2, Cost: 2}
		if d, err := s.AllowRate(t.Context(), r); err != nil || !d.Allowed || d.Remaining != 0 {
			t.Errorf("%s after SCRIPT FLUSH: %+v, %v; want allowed, none remaining", name, d, err)
		}
	}
}
