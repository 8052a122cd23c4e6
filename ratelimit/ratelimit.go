package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/store"
)

// ErrInvalid is wrapped by every error about bad input: a subject, a cost, a
// rate or a config. It is never an outage, so Fallback passes it through.
var ErrInvalid = errors.New("ratelimit: invalid argument")

// MaxSubjectLen is the longest subject, in bytes, that Allow accepts.
const MaxSubjectLen = 256

// Limiter decides whether subject may make a request that costs n (n ≥ 1;
// most requests cost 1). An error means no decision was made: an API answers
// it with 503, never with a 429.
type Limiter interface {
	Allow(ctx context.Context, subject string, n int) (Decision, error)
}

// Decision is a limiter's answer, with what the RateLimit headers need.
type Decision struct {
	// Allowed says whether the request may go ahead. Shadow sets it even when
	// the limit said no.
	Allowed bool
	// Limit is the most Remaining can be: a window's limit, a bucket's burst.
	Limit int
	// Remaining is how much more, in cost units, would be allowed right now.
	Remaining int
	// Reset is the time until the subject's full quota is back.
	Reset time.Duration
	// RetryAfter is, when the limit said no, the time until the same request
	// would be allowed (if nothing else is admitted meanwhile); otherwise 0.
	RetryAfter time.Duration
	// Policy is the RateLimit-Policy header value, e.g.
	// `"default";q=50;w=1;burst=100` for a 50/s bucket with a burst of 100.
	Policy string
	// Shadowed is set by Shadow when it allowed a request the limit refused.
	Shadowed bool
	// Fallback is set by Fallback when Redis did not answer and the
	// per-process limit decided instead.
	Fallback bool
}

// Config configures a limiter.
type Config struct {
	// Rate is the limit: Rate.Limit requests per Rate.Period. Rate.Burst is
	// the token bucket's capacity (0 means Rate.Limit) and must be 0 for the
	// window algorithms. Required.
	Rate Rate
}

// maxExact is 2^53: past it Lua numbers (doubles) no longer hold every
// integer, so the scripts' integer arithmetic would round.
const maxExact = 1 << 53

// core is what the four Redis limiters share: the store, the algorithm
// and how their answers read.
type core struct {
	store  *store.Store
	alg    store.RateAlgorithm
	rate   Rate
	limit  int // Decision.Limit, and the most one request may cost
	policy string
}

func newCore(st *store.Store, cfg Config, alg store.RateAlgorithm) (core, error) {
	if st == nil {
		return core{}, fmt.Errorf("%w: nil store", ErrInvalid)
	}
	bucket := alg == store.RateTokenBucket
	r := cfg.Rate
	if err := r.validate(); err != nil {
		return core{}, err
	}
	limit := r.Limit
	if bucket {
		limit = r.burst()
	} else if r.Burst != 0 {
		return core{}, fmt.Errorf("%w: rate %v: a burst applies to the token bucket only", ErrInvalid, r)
	}
	return core{store: st, alg: alg, rate: r, limit: limit, policy: r.policy(bucket)}, nil
}

// exact refuses rates whose scripts would compute past 2^53.
func (c core) exact() error {
	if float64(c.limit)*float64(c.rate.Period.Microseconds()) >= maxExact {
		return fmt.Errorf("%w: rate %v: %d × %d µs is past 2^53, where the script's arithmetic stops being exact; use a shorter period",
			ErrInvalid, c.rate, c.limit, c.rate.Period.Microseconds())
	}
	return nil
}

// allow validates a request, then counts it in Redis.
func (c core) allow(ctx context.Context, subject string, n int) (Decision, error) {
	if err := c.check(subject, n); err != nil {
		return Decision{}, err
	}
	d, err := c.store.AllowRate(ctx, store.RateRequest{Algorithm: c.alg, Subject: subject, Limit: c.rate.Limit,
		Period: c.rate.Period, Burst: c.limit, Cost: n})
	if err != nil {
		return Decision{}, fmt.Errorf("ratelimit: %w", err)
	}
	return Decision{Allowed: d.Allowed, Limit: c.limit, Remaining: d.Remaining, Reset: d.Reset, RetryAfter: d.RetryAfter,
		Policy: c.policy}, nil
}

// check validates a request before any Redis work.
func (c core) check(subject string, n int) error {
	if subject == "" || len(subject) > MaxSubjectLen {
		return fmt.Errorf("%w: subject must be 1 to %d bytes, got %d", ErrInvalid, MaxSubjectLen, len(subject))
	}
	if strings.ContainsAny(subject, "{}") {
		// A brace would change the key's Redis Cluster hash tag.
		return fmt.Errorf("%w: subject %q: braces are not allowed", ErrInvalid, subject)
	}
	if n < 1 {
		return fmt.Errorf("%w: cost %d: must be at least 1", ErrInvalid, n)
	}
	if n > c.limit {
		return fmt.Errorf("%w: cost %d is more than the %d the policy %s ever allows at once", ErrInvalid, n, c.limit, c.policy)
	}
	return nil
}
