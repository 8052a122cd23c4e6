package store

import (
	"github.com/leasehold/leasehold/job"

	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store/scripts"
)

// KeyLimits reads the limits and budgets that apply to keys, exact and
// wildcard (look a key up with scripts.LimitOf and scripts.Lookup).
func (s *Store) KeyLimits(ctx context.Context, keys []string) (map[string]int64, map[string]job.Budget, error) {
	return s.limitsOf(ctx, keys)
}

// limitsOf reads the limits and budgets that apply to keys, exact and
// wildcard, in one round trip: the slices of the two hashes that
// scripts.Lookup needs for them.
func (s *Store) limitsOf(ctx context.Context, keys []string) (map[string]int64, map[string]job.Budget, error) {
	var fields []string
	for _, k := range keys {
		fields = append(fields, k)
		if i := strings.IndexByte(k, ':'); i >= 0 {
			fields = append(fields, k[:i+1]+"*")
		}
	}
	var limits, budgets *redis.SliceCmd
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		limits = p.HMGet(ctx, s.keys.Limits(), fields...)
		budgets = p.HMGet(ctx, s.keys.Budgets(), fields...)
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("job: read limits: %w", err)
	}
	l, b := map[string]int64{}, map[string]job.Budget{}
	for i, v := range limits.Val() {
		if n, ok := parseLimitValue(v); ok {
			l[fields[i]] = n
		}
	}
	for i, v := range budgets.Val() {
		if v, ok := v.(string); ok {
			if budget, err := job.ParseBudget(v); err == nil && budget != (job.Budget{}) {
				b[fields[i]] = budget
			}
		}
	}
	return l, b, nil
}

// parseLimitValue reads one value of the limits hash; a value that is not a
// limit (written by hand) is none, as workers take it.
func parseLimitValue(v any) (int64, bool) {
	s, ok := v.(string)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n >= 0
}

var setLimitScript = scripts.Load("limit_set.lua")

// SetLimit sets key's concurrency limit to n, and no budget (SetKeyLimit).
func (s *Store) SetLimit(ctx context.Context, key string, n int64) error {
	return s.SetKeyLimit(ctx, key, job.KeyLimit{Limit: &n})
}

// SetKeyLimit sets what key allows: its concurrency limit and budgets, in
// place of what it had (a field kl leaves out is removed). Workers apply it
// at their next refresh, within a few seconds; lowering a limit never stops
// a running execution, new claims wait until fewer hold the key.
func (s *Store) SetKeyLimit(ctx context.Context, key string, kl job.KeyLimit) error {
	if err := checkLimit(key, kl); err != nil {
		return err
	}
	if _, _, err := s.setLimit(ctx, key, fieldsOf(kl), nil); err != nil {
		return fmt.Errorf("job: set limit %s: %w", key, err)
	}
	return nil
}

// limitFields are a key's values in the limits and budgets hashes, as
// limit_set.lua reads and writes them: "" for none.
type limitFields struct{ limit, budget string }

// fieldsOf returns kl as the hashes hold it.
func fieldsOf(kl job.KeyLimit) limitFields {
	var f limitFields
	if kl.Limit != nil {
		f.limit = strconv.FormatInt(*kl.Limit, 10)
	}
	if kl.Budget != (job.Budget{}) {
		f.budget = kl.Budget.String()
	}
	return f
}

// setLimit writes to as key's fields ("" removes each) in one script
// (limit_set.lua), and returns how many of the two it removed. Given was,
// it writes only if the key's fields are still was, and otherwise writes
// nothing and reports stale.
func (s *Store) setLimit(ctx context.Context, key string, to limitFields, was *limitFields) (removed int64, stale bool, err error) {
	args := []any{key, to.limit, to.budget}
	if was != nil {
		args = append(args, was.limit, was.budget)
	}
	n, err := setLimitScript.Run(ctx, s.rdb, []string{s.keys.Limits(), s.keys.Budgets()}, args...).Int64()
	if err != nil {
		return 0, false, err
	}
	return max(n, 0), n < 0, nil
}

// checkKey checks a key a limit is set on: a ValidationError naming key,
// or nil.
func checkKey(key string) error {
	if err := job.ValidateLimitKey(key); err != nil {
		return &job.ValidationError{Errors: []job.FieldError{{Field: "key", Message: err.Error()}}}
	}
	return nil
}

// checkLimit checks kl as the configuration of key: a ValidationError
// naming the field at fault, or nil.
func checkLimit(key string, kl job.KeyLimit) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := kl.CheckPerTenant(); err != nil {
		return &job.ValidationError{Errors: []job.FieldError{{Field: "per_tenant", Message: err.Error()}}}
	}
	if err := kl.Validate(); err != nil {
		return &job.ValidationError{Errors: []job.FieldError{{Field: "limit", Message: err.Error()}}}
	}
	return nil
}

// maxSwaps is how many times PatchKeyLimit reads a key again that others
// changed between its read and its write.
const maxSwaps = 10

// PatchKeyLimit changes what key allows as p says and keeps what p leaves
// out (SetKeyLimit replaces it whole; a key with nothing configured is
// patched from nothing), and returns the configuration it set. The result
// is checked as SetKeyLimit's, and one that would leave nothing is a
// ValidationError naming limit. The merge is written only if the key is
// still as read (limit_set.lua's compare-and-set), else read again: a concurrent change of
// another field is kept.
func (s *Store) PatchKeyLimit(ctx context.Context, key string, p job.LimitPatch) (job.KeyLimit, error) {
	if err := checkKey(key); err != nil {
		return job.KeyLimit{}, err
	}
	for range maxSwaps {
		var limit, budget *redis.StringCmd
		if _, err := s.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
			limit = pl.HGet(ctx, s.keys.Limits(), key)
			budget = pl.HGet(ctx, s.keys.Budgets(), key)
			return nil
		}); err != nil && !errors.Is(err, redis.Nil) {
			return job.KeyLimit{}, fmt.Errorf("job: patch limit %s: %w", key, err)
		}
		var was job.KeyLimit
		if n, ok := parseLimitValue(limit.Val()); ok {
			was.Limit = &n
		}
		was.Budget, _ = job.ParseBudget(budget.Val()) // one written by hand is none, as workers take it
		kl := p.Apply(was)
		if kl.Limit == nil && kl.Budget == (job.Budget{}) {
			return job.KeyLimit{}, &job.ValidationError{Errors: []job.FieldError{{Field: "limit",
				Message: "the patch would leave no limit and no budget: delete the key's limit instead"}}}
		}
		if err := checkLimit(key, kl); err != nil {
			return job.KeyLimit{}, err
		}
		_, stale, err := s.setLimit(ctx, key, fieldsOf(kl), &limitFields{limit.Val(), budget.Val()})
		if err != nil {
			return job.KeyLimit{}, fmt.Errorf("job: patch limit %s: %w", key, err)
		}
		if !stale {
			return kl, nil
		}
	}
	return job.KeyLimit{}, fmt.Errorf("job: patch limit %s: changed by others %d times while it was patched", key, maxSwaps)
}

// DeleteLimit removes key's limit and budgets, so the key is unlimited (or
// falls back to its prefix's wildcard). It reports whether there was one.
func (s *Store) DeleteLimit(ctx context.Context, key string) (existed bool, err error) {
	removed, _, err := s.setLimit(ctx, key, limitFields{}, nil)
	if err != nil {
		return false, fmt.Errorf("job: delete limit %s: %w", key, err)
	}
	return removed > 0, nil
}

// Limits returns every configured key, sorted, with how many live leases
// hold each exact key, how many ready jobs wait for it across every queue,
// and what its budgets hold now (a wildcard's counts are 0 and its budget
// state nil). An entry whose value cannot be read (written by hand) is left
// out, as workers ignore it too.
func (s *Store) Limits(ctx context.Context) ([]job.Limit, error) {
	limits, budgets, err := s.configured(ctx)
	if err != nil {
		return nil, err
	}
	return s.measure(ctx, limits, budgets)
}

// LimitsPage returns a page of the configured keys, sorted, each as Limits
// shows it, and the cursor of the next page ("" after the last). Only the
// page's keys are counted (their leases and budgets), so however many
// keys are set, one answer stays bounded. A cursor that is not one this
// package handed out is ErrBadCursor.
func (s *Store) LimitsPage(ctx context.Context, q job.LimitsQuery) ([]job.Limit, string, error) {
	if q.Limit < 0 || q.Limit > job.MaxListLimit {
		return nil, "", &job.ValidationError{Errors: []job.FieldError{{Field: "limit", Message: fmt.Sprintf("must be between 1 and %d", job.MaxListLimit)}}}
	}
	n := cmp.Or(q.Limit, job.DefaultListLimit)
	var after string
	if q.Cursor != "" {
		b, err := base64.RawURLEncoding.DecodeString(q.Cursor)
		if err != nil || job.ValidateLimitKey(string(b)) != nil {
			return nil, "", job.ErrBadCursor
		}
		after = string(b)
	}
	all, budgets, err := s.configured(ctx)
	if err != nil {
		return nil, "", err
	}
	start, _ := slices.BinarySearchFunc(all, after, func(l job.Limit, key string) int { return strings.Compare(l.Key, key) })
	var page []job.Limit
	next := ""
	for _, l := range all[start:] {
		if l.Key == after || q.Keep != nil && !q.Keep(l.Key) {
			continue
		}
		if len(page) == n {
			next = base64.RawURLEncoding.EncodeToString([]byte(page[n-1].Key))
			break
		}
		page = append(page, l)
	}
	limits, err := s.measure(ctx, page, budgets)
	return limits, next, err
}

// configured reads every configured key, sorted, with its limit and
// budgets but nothing measured, and the budgets by key.
func (s *Store) configured(ctx context.Context) ([]job.Limit, map[string]job.Budget, error) {
	var limitsCmd, budgetsCmd *redis.MapStringStringCmd
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		limitsCmd = p.HGetAll(ctx, s.keys.Limits())
		budgetsCmd = p.HGetAll(ctx, s.keys.Budgets())
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("job: limits: %w", err)
	}
	byKey := map[string]*job.Limit{}
	for k, v := range limitsCmd.Val() {
		if n, ok := parseLimitValue(v); ok {
			byKey[k] = &job.Limit{Key: k, Limit: job.Some(n)}
		}
	}
	budgets := map[string]job.Budget{}
	for k, v := range budgetsCmd.Val() {
		b, err := job.ParseBudget(v)
		if err != nil || b == (job.Budget{}) {
			continue
		}
		budgets[k] = b
		l := byKey[k]
		if l == nil {
			l = &job.Limit{Key: k}
			byKey[k] = l
		}
		l.Adaptive = b.Adaptive
		if b.PerTenant > 0 {
			l.PerTenant = job.Some(b.PerTenant)
		}
		if b.RPM > 0 {
			l.RPM = job.Some(b.RPM)
		}
		if b.TPM > 0 {
			l.TPM = job.Some(b.TPM)
		}
	}
	limits := make([]job.Limit, 0, len(byKey))
	for _, k := range slices.Sorted(maps.Keys(byKey)) {
		limits = append(limits, *byKey[k])
	}
	return limits, budgets, nil
}

// measure fills in what limits' keys hold now: live leases, ready jobs
// waiting, and budget state (budgets by key, from configured).
func (s *Store) measure(ctx context.Context, limits []job.Limit, budgets map[string]job.Budget) ([]job.Limit, error) {
	if len(limits) == 0 {
		return []job.Limit{}, nil
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
	states := make([]*BudgetReading, len(limits))
	lanes := make([]*redis.MapStringStringCmd, len(queues))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, q := range queues {
			lanes[i] = p.HGetAll(ctx, s.keys.QueueFair(q))
		}
		for i, l := range limits {
			if strings.HasSuffix(l.Key, ":*") {
				continue
			}
			counts[i] = p.ZCount(ctx, s.keys.LeaseSet(l.Key), live, "+inf")
			if _, ok := budgets[l.Key]; ok {
				r := s.BudgetIn(ctx, p, l.Key)
				states[i] = &r
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("job: limits: count leases: %w", err)
	}
	waiting := waitingByKey(lanes)
	for i := range limits {
		l := &limits[i]
		if counts[i] == nil {
			continue
		}
		l.InUse = counts[i].Val()
		l.Waiting = waiting[l.Key]
		if states[i] == nil {
			continue
		}
		st, err := states[i].State()
		if err != nil {
			return nil, fmt.Errorf("job: limits: %w", err)
		}
		b := budgets[l.Key]
		if b.RPM > 0 || b.Adaptive {
			l.RequestsLastMinute = job.Some(st.Requests)
		}
		if b.TPM > 0 {
			l.TokensLastMinute = job.Some(st.Tokens)
		}
		if b.Adaptive {
			l.EffectiveLimit = job.Some(effectiveLimit(st.Effective, l.Limit))
		}
		l.ThrottledUntil = st.ThrottledUntil
	}
	return limits, nil
}

// effectiveLimit is what an adaptive key's claims use: its learned
// concurrency (the slow start's first value before any is learned, as
// internal/store/scripts/budget.lua starts it) and never above its limit.
func effectiveLimit(learned float64, limit job.Optional) int64 {
	most := int64(job.MaxLimit)
	if limit.Set {
		most = limit.Value
	}
	if learned == 0 {
		learned = max(1, min(float64(most)/8, 4))
	}
	return min(most, int64(learned))
}

// waitingByKey sums the ready jobs of each key over the queues' fair
// hashes: one read per queue, of its lanes with jobs waiting.
func waitingByKey(fairs []*redis.MapStringStringCmd) map[string]int64 {
	out := map[string]int64{}
	for _, f := range fairs {
		for lane, n := range scripts.LaneCounts(f.Val()) {
			for _, k := range scripts.LaneKeys(lane) {
				out[k] += n
			}
		}
	}
	return out
}

// LimitHistory returns the minutes of the last hour in which key adapted
// (its settlements), oldest first: none for a key that does not adapt, or a
// wildcard, whose keys adapt each on its own.
func (s *Store) LimitHistory(ctx context.Context, key string) ([]job.LimitMinute, error) {
	minutes, err := s.History(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("job: %w", err)
	}
	out := make([]job.LimitMinute, len(minutes))
	for i, m := range minutes {
		out[i] = job.LimitMinute{At: m.At, EffectiveLimit: m.Effective, Pushbacks: m.Pushbacks}
	}
	return out, nil
}
