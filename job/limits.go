package job

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
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
		if err := kl.Validate(); err != nil {
			return nil, fmt.Errorf("limits: pair %d (%s): %w", i+1, key, err)
		}
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("limits: pair %d: key %s given twice", i+1, key)
		}
		out[key] = kl
	}
	return out, nil
}

// Validate checks a key's configuration: something to configure, each
// number in range.
func (kl KeyLimit) Validate() error {
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
	return kl.CheckPerTenant()
}

// CheckPerTenant checks per_tenant: a share of the key's limit, so at
// most the limit, and only with one.
func (kl KeyLimit) CheckPerTenant() error {
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

// LimitPatch is a JSON merge patch of a key's configuration
// (PatchKeyLimit): a field left nil stays as it is, one not Set (null)
// is removed, one Set replaces the key's.
type LimitPatch struct {
	Limit, RPM, TPM, PerTenant *Optional
	Adaptive                   *bool // false removes it too
}

// Apply returns kl changed as p says.
func (p LimitPatch) Apply(kl KeyLimit) KeyLimit {
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

// LimitsQuery asks for a page of the configured keys (LimitsPage).
type LimitsQuery struct {
	Limit  int    // 1–500; 0 = 50
	Cursor string // next from the previous page; "" = from the first key
	// Keep, when not nil, leaves out the keys it is false for before the
	// page is cut, so that a page is full of keys the caller may see.
	Keep func(key string) bool
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
