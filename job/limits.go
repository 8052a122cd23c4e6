package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/scripts"
)

// MaxLimit is the largest concurrency limit.
const MaxLimit = 1_000_000

// Limit is one configured concurrency limit.
type Limit struct {
	// Key is a concurrency key ("model:gpt-4o") or a wildcard "<prefix>:*",
	// which gives every key of that prefix a limit of its own.
	Key string `json:"key"`
	// Limit is how many executions may hold Key at once; 0 means none runs.
	Limit int64 `json:"limit"`
	// InUse is how many live leases hold Key now: executions of jobs in
	// every queue and holders of the lease package's semaphore share one
	// lease set per key. For a wildcard it is 0: its limit applies to each
	// key of the prefix on its own, and those keys' leases are not summed.
	InUse int64 `json:"in_use"`
	// Waiting is how many jobs naming Key are ready to run but not started,
	// summed over every queue (delayed jobs and retries in backoff are not
	// ready yet). For a wildcard it is 0, as InUse is.
	Waiting int64 `json:"waiting"`
}

// limitsOf reads the limits that apply to keys, exact and wildcard, in one
// round trip: the slice of the limits hash that scripts.LimitOf needs for them.
func (s *Store) limitsOf(ctx context.Context, keys []string) (map[string]int64, error) {
	var fields []string
	for _, k := range keys {
		fields = append(fields, k)
		if i := strings.IndexByte(k, ':'); i >= 0 {
			fields = append(fields, k[:i+1]+"*")
		}
	}
	vals, err := s.rdb.HMGet(ctx, s.keys.Limits(), fields...).Result()
	if err != nil {
		return nil, fmt.Errorf("job: read limits: %w", err)
	}
	m := map[string]int64{}
	for i, v := range vals {
		if v, ok := v.(string); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
				m[fields[i]] = n
			}
		}
	}
	return m, nil
}

// ValidateLimitKey checks a key a limit may be set on: a concurrency key a
// job may name, or the wildcard "<prefix>:*", where prefix has no ':' (a
// worker matches a key's wildcard by the part before its first ':').
func ValidateLimitKey(key string) error {
	if !concurrencyKeyPattern.MatchString(key) {
		return fmt.Errorf("limit key %q must match %s", key, concurrencyKeyPattern)
	}
	prefix, wildcard := strings.CutSuffix(key, ":*")
	switch {
	case !wildcard && strings.Contains(key, "*"):
		return fmt.Errorf("limit key %q: '*' may only be the whole last part, as in tenant:*", key)
	case wildcard && prefix == "":
		return fmt.Errorf("limit key %q: a wildcard needs a prefix, as in tenant:*", key)
	case wildcard && strings.ContainsAny(prefix, ":*"):
		return fmt.Errorf("limit key %q: a wildcard's prefix has no ':' or '*', as in tenant:*", key)
	}
	return nil
}

// validateLimit checks a limit value.
func validateLimit(n int64) error {
	if n < 0 || n > MaxLimit {
		return fmt.Errorf("limit %d must be between 0 and %d", n, MaxLimit)
	}
	return nil
}

// ParseLimits reads limits in LEASEHOLD_LIMITS' form: comma-separated
// key=N pairs, such as "model:gpt-4o=200,tenant:*=10". White space around
// a pair is ignored; a key given twice is an error.
func ParseLimits(s string) (map[string]int64, error) {
	out := map[string]int64{}
	for i, pair := range strings.Split(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		key, value, ok := strings.Cut(pair, "=")
		if !ok {
			return nil, fmt.Errorf("limits: pair %d %q: want key=N", i+1, pair)
		}
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		if err := ValidateLimitKey(key); err != nil {
			return nil, fmt.Errorf("limits: pair %d: %w", i+1, err)
		}
		n, err := strconv.ParseInt(value, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("limits: pair %d (%s): %q is not a whole number", i+1, key, value)
		}
		if err := validateLimit(n); err != nil {
			return nil, fmt.Errorf("limits: pair %d (%s): %w", i+1, key, err)
		}
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("limits: pair %d: key %s given twice", i+1, key)
		}
		out[key] = n
	}
	return out, nil
}

// SetLimit sets key's concurrency limit to n. Workers apply it at their
// next refresh, within a few seconds; lowering it never stops a running
// execution, new claims wait until fewer than n hold the key.
func (s *Store) SetLimit(ctx context.Context, key string, n int64) error {
	if err := ValidateLimitKey(key); err != nil {
		return &ValidationError{Errors: []FieldError{{Field: "key", Message: err.Error()}}}
	}
	if err := validateLimit(n); err != nil {
		return &ValidationError{Errors: []FieldError{{Field: "limit", Message: err.Error()}}}
	}
	if err := s.rdb.HSet(ctx, s.keys.Limits(), key, n).Err(); err != nil {
		return fmt.Errorf("job: set limit %s: %w", key, err)
	}
	return nil
}

// DeleteLimit removes key's limit, so the key is unlimited (or falls back
// to its prefix's wildcard). It reports whether there was one.
func (s *Store) DeleteLimit(ctx context.Context, key string) (existed bool, err error) {
	n, err := s.rdb.HDel(ctx, s.keys.Limits(), key).Result()
	if err != nil {
		return false, fmt.Errorf("job: delete limit %s: %w", key, err)
	}
	return n > 0, nil
}

// Limits returns every configured limit, sorted by key, with how many live
// leases hold each exact key and how many ready jobs wait for it, across
// every queue (a wildcard's InUse and Waiting are 0).
// An entry whose value is not a limit (written by hand) is left out, as
// workers ignore it too.
func (s *Store) Limits(ctx context.Context) ([]Limit, error) {
	all, err := s.rdb.HGetAll(ctx, s.keys.Limits()).Result()
	if err != nil {
		return nil, fmt.Errorf("job: limits: %w", err)
	}
	limits := make([]Limit, 0, len(all))
	for k, v := range all {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			continue
		}
		limits = append(limits, Limit{Key: k, Limit: n})
	}
	slices.SortFunc(limits, func(a, b Limit) int { return strings.Compare(a.Key, b.Key) })
	if len(limits) == 0 {
		return limits, nil
	}
	queues, err := s.queues(ctx)
	if err != nil {
		return nil, err
	}
	now, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("job: limits: redis time: %w", err)
	}
	live := "(" + strconv.FormatInt(now.UnixMilli(), 10)
	counts := make([]*redis.IntCmd, len(limits))
	lanes := make([]*redis.MapStringStringCmd, len(queues))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, q := range queues {
			lanes[i] = p.HGetAll(ctx, s.keys.QueueFair(q))
		}
		for i, l := range limits {
			if !strings.HasSuffix(l.Key, ":*") {
				counts[i] = p.ZCount(ctx, s.keys.LeaseSet(l.Key), live, "+inf")
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("job: limits: count leases: %w", err)
	}
	waiting := waitingByKey(lanes)
	for i := range limits {
		if counts[i] != nil {
			limits[i].InUse = counts[i].Val()
			limits[i].Waiting = waiting[limits[i].Key]
		}
	}
	return limits, nil
}

// waitingByKey sums the ready jobs of each key over the queues' fair
// hashes: one read per queue, of its lanes with jobs waiting.
func waitingByKey(fairs []*redis.MapStringStringCmd) map[string]int64 {
	out := map[string]int64{}
	for _, f := range fairs {
		for lane, n := range scripts.LaneCounts(f.Val()) {
			var keys []string
			_ = json.Unmarshal([]byte(lane), &keys) // written by the submit script: always an array
			for _, k := range keys {
				out[k] += n
			}
		}
	}
	return out
}
