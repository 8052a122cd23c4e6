package job

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/store/scripts"
)

// MaxLimit is the largest concurrency limit.
const MaxLimit = 1_000_000

// KeyLimit is what is configured on a concurrency key: a limit on the
// executions holding it at once, budgets of the upstream behind it, or both.
type KeyLimit struct {
	Limit  *int64 // nil: no concurrency limit; 0: nothing runs
	Budget Budget
}

// Optional is a number a key may not use: null in JSON when not Set.
type Optional struct {
	Value int64
	Set   bool
}

// Some returns the Optional that holds n.
func Some(n int64) Optional { return Optional{Value: n, Set: true} }

func (o Optional) MarshalJSON() ([]byte, error) {
	if !o.Set {
		return []byte("null"), nil
	}
	return strconv.AppendInt(nil, o.Value, 10), nil
}

func (o *Optional) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*o = Optional{}
		return nil
	}
	if err := json.Unmarshal(b, &o.Value); err != nil {
		return err
	}
	o.Set = true
	return nil
}

// Limit is one configured key as GET /v1/limits shows it: its configuration
// and what it holds now. Fields a key does not use are nil (null).
type Limit struct {
	// Key is a concurrency key ("model:gpt-4o") or a wildcard "<prefix>:*",
	// which gives every key of that prefix a limit of its own.
	Key string `json:"key"`
	// Limit is how many executions may hold Key at once; 0 means none runs.
	Limit Optional `json:"limit"`
	// InUse is how many live leases hold Key now: executions of jobs in
	// every queue and holders of the lease package's semaphore share one
	// lease set per key. For a wildcard it is 0: its limit applies to each
	// key of the prefix on its own, and those keys' leases are not summed.
	InUse int64 `json:"in_use"`
	// EffectiveLimit is an adaptive key's concurrency now, learned from
	// the upstream's pushback: never above Limit.
	EffectiveLimit Optional `json:"effective_limit"`
	// RPM and TPM are the key's budgets per rolling minute, and
	// RequestsLastMinute and TokensLastMinute what that minute holds
	// (tokens: estimates, replaced by actual usage as executions end).
	RPM                Optional `json:"rpm"`
	RequestsLastMinute Optional `json:"requests_last_minute"`
	TPM                Optional `json:"tpm"`
	TokensLastMinute   Optional `json:"tokens_last_minute"`
	Adaptive           bool     `json:"adaptive"`
	// PerTenant is the most slots one tenant may hold of Key, and the same
	// share of its RPM and TPM (PerTenant/Limit of each).
	PerTenant Optional `json:"per_tenant"`
	// ThrottledUntil is when the upstream's last Retry-After ends, while it
	// holds the key's claims; zero (null) when it does not.
	ThrottledUntil time.Time `json:"throttled_until"`
	// Waiting is how many jobs naming Key are ready to run but not started,
	// summed over every queue (delayed jobs and retries in backoff are not
	// ready yet). For a wildcard it is 0, as InUse is.
	Waiting int64 `json:"waiting"`
}

// MarshalJSON writes throttled_until as the API writes times, null when zero.
func (l Limit) MarshalJSON() ([]byte, error) {
	type plain Limit
	var until *time.Time
	if !l.ThrottledUntil.IsZero() {
		until = &l.ThrottledUntil
	}
	return json.Marshal(struct {
		plain
		ThrottledUntil *stamp `json:"throttled_until"`
	}{plain(l), stampOf(until)})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (l *Limit) UnmarshalJSON(b []byte) error {
	type plain Limit
	var v struct {
		plain
		ThrottledUntil *time.Time `json:"throttled_until"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*l = Limit(v.plain)
	if v.ThrottledUntil != nil {
		l.ThrottledUntil = *v.ThrottledUntil
	}
	return nil
}

// KeyLimits reads the limits and budgets that apply to keys, exact and
// wildcard (look a key up with scripts.LimitOf and scripts.Lookup).
func (s *Store) KeyLimits(ctx context.Context, keys []string) (map[string]int64, map[string]Budget, error) {
	return s.limitsOf(ctx, keys)
}

// limitsOf reads the limits and budgets that apply to keys, exact and
// wildcard, in one round trip: the slices of the two hashes that
// scripts.Lookup needs for them.
func (s *Store) limitsOf(ctx context.Context, keys []string) (map[string]int64, map[string]Budget, error) {
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
	l, b := map[string]int64{}, map[string]Budget{}
	for i, v := range limits.Val() {
		if n, ok := parseLimitValue(v); ok {
			l[fields[i]] = n
		}
	}
	for i, v := range budgets.Val() {
		if v, ok := v.(string); ok {
			if budget, err := ParseBudget(v); err == nil && budget != (Budget{}) {
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
// key=N entries, such as "model:gpt-4o=200,tenant:*=10", where N may be
// followed by ;-separated budget options (ParseBudget), or left out
// for a budget alone: "model:gpt-4o=200;rpm=3000;tpm=400000;adaptive",
// "model:mini=;tpm=400000". White space around an entry is ignored; a key
// given twice is an error.
func ParseLimits(s string) (map[string]KeyLimit, error) {
	out := map[string]KeyLimit{}
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
		value, options, _ := strings.Cut(value, ";")
		var kl KeyLimit
		if value = strings.TrimSpace(value); value != "" {
			n, err := strconv.ParseInt(value, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("limits: pair %d (%s): %q is not a whole number", i+1, key, value)
			}
			if err := validateLimit(n); err != nil {
				return nil, fmt.Errorf("limits: pair %d (%s): %w", i+1, key, err)
			}
			kl.Limit = &n
		}
		b, err := ParseBudget(options)
		if err != nil {
			return nil, fmt.Errorf("limits: pair %d (%s): %w", i+1, key, err)
		}
		kl.Budget = b
		if err := kl.validate(); err != nil {
			return nil, fmt.Errorf("limits: pair %d (%s): %w", i+1, key, err)
		}
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("limits: pair %d: key %s given twice", i+1, key)
		}
		out[key] = kl
	}
	return out, nil
}

// validate checks a key's configuration: something to configure, each
// number in range.
func (kl KeyLimit) validate() error {
	if kl.Limit == nil && kl.Budget == (Budget{}) {
		return errors.New("give a limit, rpm, tpm, adaptive or per_tenant")
	}
	if kl.Limit != nil {
		if err := validateLimit(*kl.Limit); err != nil {
			return err
		}
	}
	for name, n := range map[string]int64{"rpm": kl.Budget.RPM, "tpm": kl.Budget.TPM} {
		if n < 0 || n > MaxBudget {
			return fmt.Errorf("%s %d must be between 1 and %d", name, n, int64(MaxBudget))
		}
	}
	return kl.checkPerTenant()
}

// checkPerTenant checks per_tenant: a share of the key's limit, so at
// most the limit, and only with one.
func (kl KeyLimit) checkPerTenant() error {
	switch p := kl.Budget.PerTenant; {
	case p == 0:
		return nil
	case kl.Limit == nil:
		return fmt.Errorf("per_tenant %d needs a limit: it is a share of the limit", p)
	case p < 1 || p > *kl.Limit:
		return fmt.Errorf("per_tenant %d must be between 1 and the limit (%d)", p, *kl.Limit)
	}
	return nil
}

var setLimitScript = scripts.Load("limit_set.lua")

// SetLimit sets key's concurrency limit to n, and no budget (SetKeyLimit).
func (s *Store) SetLimit(ctx context.Context, key string, n int64) error {
	return s.SetKeyLimit(ctx, key, KeyLimit{Limit: &n})
}

// SetKeyLimit sets what key allows: its concurrency limit and budgets, in
// place of what it had (a field kl leaves out is removed). Workers apply it
// at their next refresh, within a few seconds; lowering a limit never stops
// a running execution, new claims wait until fewer hold the key.
func (s *Store) SetKeyLimit(ctx context.Context, key string, kl KeyLimit) error {
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
func fieldsOf(kl KeyLimit) limitFields {
	var f limitFields
	if kl.Limit != nil {
		f.limit = strconv.FormatInt(*kl.Limit, 10)
	}
	if kl.Budget != (Budget{}) {
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
	if err := ValidateLimitKey(key); err != nil {
		return &ValidationError{Errors: []FieldError{{Field: "key", Message: err.Error()}}}
	}
	return nil
}

// checkLimit checks kl as the configuration of key: a ValidationError
// naming the field at fault, or nil.
func checkLimit(key string, kl KeyLimit) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := kl.checkPerTenant(); err != nil {
		return &ValidationError{Errors: []FieldError{{Field: "per_tenant", Message: err.Error()}}}
	}
	if err := kl.validate(); err != nil {
		return &ValidationError{Errors: []FieldError{{Field: "limit", Message: err.Error()}}}
	}
	return nil
}

// LimitPatch is a JSON merge patch of a key's configuration
// (PatchKeyLimit): a field left nil stays as it is, one not Set (null)
// is removed, one Set replaces the key's.
type LimitPatch struct {
	Limit, RPM, TPM, PerTenant *Optional
	Adaptive                   *bool // false removes it too
}

// apply returns kl changed as p says.
func (p LimitPatch) apply(kl KeyLimit) KeyLimit {
	if p.Limit != nil {
		kl.Limit = nil
		if p.Limit.Set {
			n := p.Limit.Value
			kl.Limit = &n
		}
	}
	for _, f := range []struct {
		to *int64
		o  *Optional
	}{{&kl.Budget.RPM, p.RPM}, {&kl.Budget.TPM, p.TPM}, {&kl.Budget.PerTenant, p.PerTenant}} {
		if f.o != nil {
			*f.to = f.o.Value // 0 when not Set: a budget of 0 is none
		}
	}
	if p.Adaptive != nil {
		kl.Budget.Adaptive = *p.Adaptive
	}
	return kl
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
func (s *Store) PatchKeyLimit(ctx context.Context, key string, p LimitPatch) (KeyLimit, error) {
	if err := checkKey(key); err != nil {
		return KeyLimit{}, err
	}
	for range maxSwaps {
		var limit, budget *redis.StringCmd
		if _, err := s.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
			limit = pl.HGet(ctx, s.keys.Limits(), key)
			budget = pl.HGet(ctx, s.keys.Budgets(), key)
			return nil
		}); err != nil && !errors.Is(err, redis.Nil) {
			return KeyLimit{}, fmt.Errorf("job: patch limit %s: %w", key, err)
		}
		var was KeyLimit
		if n, ok := parseLimitValue(limit.Val()); ok {
			was.Limit = &n
		}
		was.Budget, _ = ParseBudget(budget.Val()) // one written by hand is none, as workers take it
		kl := p.apply(was)
		if kl.Limit == nil && kl.Budget == (Budget{}) {
			return KeyLimit{}, &ValidationError{Errors: []FieldError{{Field: "limit",
				Message: "the patch would leave no limit and no budget: delete the key's limit instead"}}}
		}
		if err := checkLimit(key, kl); err != nil {
			return KeyLimit{}, err
		}
		_, stale, err := s.setLimit(ctx, key, fieldsOf(kl), &limitFields{limit.Val(), budget.Val()})
		if err != nil {
			return KeyLimit{}, fmt.Errorf("job: patch limit %s: %w", key, err)
		}
		if !stale {
			return kl, nil
		}
	}
	return KeyLimit{}, fmt.Errorf("job: patch limit %s: changed by others %d times while it was patched", key, maxSwaps)
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
func (s *Store) Limits(ctx context.Context) ([]Limit, error) {
	limits, budgets, err := s.configured(ctx)
	if err != nil {
		return nil, err
	}
	return s.measure(ctx, limits, budgets)
}

// LimitsQuery asks for a page of the configured keys (LimitsPage).
type LimitsQuery struct {
	Limit  int    // 1–500; 0 = 50
	Cursor string // next from the previous page; "" = from the first key
	// Keep, when not nil, leaves out the keys it is false for before the
	// page is cut, so that a page is full of keys the caller may see.
	Keep func(key string) bool
}

// LimitsPage returns a page of the configured keys, sorted, each as Limits
// shows it, and the cursor of the next page ("" after the last). Only the
// page's keys are counted (their leases and budgets), so however many
// keys are set, one answer stays bounded. A cursor that is not one this
// package handed out is ErrBadCursor.
func (s *Store) LimitsPage(ctx context.Context, q LimitsQuery) ([]Limit, string, error) {
	if q.Limit < 0 || q.Limit > maxListLimit {
		return nil, "", &ValidationError{Errors: []FieldError{{Field: "limit", Message: fmt.Sprintf("must be between 1 and %d", maxListLimit)}}}
	}
	n := cmp.Or(q.Limit, defaultListLimit)
	var after string
	if q.Cursor != "" {
		b, err := base64.RawURLEncoding.DecodeString(q.Cursor)
		if err != nil || ValidateLimitKey(string(b)) != nil {
			return nil, "", ErrBadCursor
		}
		after = string(b)
	}
	all, budgets, err := s.configured(ctx)
	if err != nil {
		return nil, "", err
	}
	start, _ := slices.BinarySearchFunc(all, after, func(l Limit, key string) int { return strings.Compare(l.Key, key) })
	var page []Limit
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
func (s *Store) configured(ctx context.Context) ([]Limit, map[string]Budget, error) {
	var limitsCmd, budgetsCmd *redis.MapStringStringCmd
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		limitsCmd = p.HGetAll(ctx, s.keys.Limits())
		budgetsCmd = p.HGetAll(ctx, s.keys.Budgets())
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("job: limits: %w", err)
	}
	byKey := map[string]*Limit{}
	for k, v := range limitsCmd.Val() {
		if n, ok := parseLimitValue(v); ok {
			byKey[k] = &Limit{Key: k, Limit: Some(n)}
		}
	}
	budgets := map[string]Budget{}
	for k, v := range budgetsCmd.Val() {
		b, err := ParseBudget(v)
		if err != nil || b == (Budget{}) {
			continue
		}
		budgets[k] = b
		l := byKey[k]
		if l == nil {
			l = &Limit{Key: k}
			byKey[k] = l
		}
		l.Adaptive = b.Adaptive
		if b.PerTenant > 0 {
			l.PerTenant = Some(b.PerTenant)
		}
		if b.RPM > 0 {
			l.RPM = Some(b.RPM)
		}
		if b.TPM > 0 {
			l.TPM = Some(b.TPM)
		}
	}
	limits := make([]Limit, 0, len(byKey))
	for _, k := range slices.Sorted(maps.Keys(byKey)) {
		limits = append(limits, *byKey[k])
	}
	return limits, budgets, nil
}

// measure fills in what limits' keys hold now: live leases, ready jobs
// waiting, and budget state (budgets by key, from configured).
func (s *Store) measure(ctx context.Context, limits []Limit, budgets map[string]Budget) ([]Limit, error) {
	if len(limits) == 0 {
		return []Limit{}, nil
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
	states := make([]*store.BudgetReading, len(limits))
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
				r := s.data.BudgetIn(ctx, p, l.Key)
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
			l.RequestsLastMinute = Some(st.Requests)
		}
		if b.TPM > 0 {
			l.TokensLastMinute = Some(st.Tokens)
		}
		if b.Adaptive {
			l.EffectiveLimit = Some(effectiveLimit(st.Effective, l.Limit))
		}
		l.ThrottledUntil = st.ThrottledUntil
	}
	return limits, nil
}

// effectiveLimit is what an adaptive key's claims use: its learned
// concurrency (the slow start's first value before any is learned, as
// internal/store/scripts/budget.lua starts it) and never above its limit.
func effectiveLimit(learned float64, limit Optional) int64 {
	most := int64(MaxLimit)
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

// LimitMinute is one minute of an adaptive key's history.
type LimitMinute struct {
	At             time.Time // the minute's start, UTC
	EffectiveLimit int64     // at the minute's last settlement
	Pushbacks      int64     // the upstream's refusals for capacity (429s) settled in it
}

// MarshalJSON writes the API's minute object.
func (m LimitMinute) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		At             stamp `json:"at"`
		EffectiveLimit int64 `json:"effective_limit"`
		Pushbacks      int64 `json:"pushbacks"`
	}{stamp(m.At), m.EffectiveLimit, m.Pushbacks})
}

// LimitHistory returns the minutes of the last hour in which key adapted
// (its settlements), oldest first: none for a key that does not adapt, or a
// wildcard, whose keys adapt each on its own.
func (s *Store) LimitHistory(ctx context.Context, key string) ([]LimitMinute, error) {
	minutes, err := s.data.History(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("job: %w", err)
	}
	out := make([]LimitMinute, len(minutes))
	for i, m := range minutes {
		out[i] = LimitMinute{At: m.At, EffectiveLimit: m.Effective, Pushbacks: m.Pushbacks}
	}
	return out, nil
}
