package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/internal/store/scripts"
)

// RateAlgorithm is how a rate limit counts a subject's requests.
type RateAlgorithm int

// The algorithms, each one script (see package ratelimit).
const (
	RateTokenBucket RateAlgorithm = iota
	RateFixedWindow
	RateSlidingLog
	RateSlidingWindow
)

var rateScripts = [...]*scripts.Script{
	RateTokenBucket:   scripts.Load("ratelimit_token_bucket.lua"),
	RateFixedWindow:   scripts.Load("ratelimit_fixed_window.lua"),
	RateSlidingLog:    scripts.Load("ratelimit_sliding_log.lua"),
	RateSlidingWindow: scripts.Load("ratelimit_sliding_window.lua"),
}

// RateRequest is one request of a subject against a rate limit: Limit
// requests per Period, Burst the token bucket's capacity.
type RateRequest struct {
	Algorithm RateAlgorithm
	Subject   string
	Limit     int
	Period    time.Duration
	Burst     int // the token bucket's alone
	Cost      int
}

// RateDecision is what the limit said of a RateRequest.
type RateDecision struct {
	Allowed bool
	// Remaining is how much more, in cost units, would be allowed now.
	Remaining int
	// Reset is the time until the subject's full quota is back.
	Reset time.Duration
	// RetryAfter is, when not Allowed, the time until the same request
	// would be.
	RetryAfter time.Duration
}

// AllowRate counts r against its subject's limit, if the limit has room
// for it, in one script on the subject's slot.
func (s *Store) AllowRate(ctx context.Context, r RateRequest) (RateDecision, error) {
	period := r.Period.Microseconds()
	var key string
	args := []any{r.Limit, period, r.Cost}
	switch r.Algorithm {
	case RateTokenBucket:
		key, args = s.keys.RateBucket(r.Subject), []any{r.Limit, period, r.Burst, r.Cost}
	case RateFixedWindow:
		key = s.keys.RateFixed(r.Subject, r.Period)
	case RateSlidingLog:
		// The log's members must be unique: a random 64-bit id per call
		// (the script appends 1..n) makes two calls collide with odds of
		// 2^-64.
		key, args = s.keys.RateLog(r.Subject, r.Period), append(args, strconv.FormatUint(rand.Uint64(), 36))
	case RateSlidingWindow:
		key = s.keys.RateWindow(r.Subject, r.Period)
	default:
		return RateDecision{}, fmt.Errorf("store: rate limit algorithm %d", r.Algorithm)
	}
	res, err := rateScripts[r.Algorithm].Run(ctx, s.rdb, []string{key}, args...).Int64Slice()
	if err == nil && len(res) != 4 {
		err = fmt.Errorf("%d values in the reply, want 4", len(res))
	}
	if err != nil {
		return RateDecision{}, fmt.Errorf("store: rate limit of %q: %w", r.Subject, err)
	}
	return RateDecision{
		Allowed:    res[0] == 1,
		Remaining:  int(res[1]),
		Reset:      time.Duration(res[2]) * time.Microsecond,
		RetryAfter: time.Duration(res[3]) * time.Microsecond,
	}, nil
}
