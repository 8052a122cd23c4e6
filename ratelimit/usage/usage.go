package usage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/keys"
	"github.com/leasehold/leasehold/internal/scripts"
)

var addScript = scripts.Load("ratelimit_usage_add.lua")

// Defaults for Config.
const (
	// DefaultMarkTTL is how long an event id is remembered: longer than any
	// retry window a client or a queue keeps (a week, plus a day's slack).
	DefaultMarkTTL = 8 * 24 * time.Hour
	// DefaultRetention is how long a day's counts are kept after the day
	// ends: a year and a month, for billing and a year-on-year look.
	DefaultRetention = 400 * 24 * time.Hour
)

// MaxDays is the most days one Get returns.
const MaxDays = 366

// maxNameLen bounds tenants, counters and event ids, in bytes.
const maxNameLen = 256

// ErrInvalid is wrapped by every error about bad input.
var ErrInvalid = errors.New("usage: invalid argument")

// ErrConflict is returned by Add when an event id was counted already with
// a different n: a retry must repeat the first write, so this is a bug in
// the caller, and the first n stands.
var ErrConflict = errors.New("usage: event id already counted with a different n")

// Config configures Counters. The zero value is ready to use.
type Config struct {
	// Prefix starts every key; default keys.DefaultPrefix.
	Prefix string
	// MarkTTL is how long an event id is remembered after it was counted:
	// a retry later than that is counted again. Default DefaultMarkTTL (8 days).
	MarkTTL time.Duration
	// Retention is how long a day's counts are kept after the day ends;
	// default DefaultRetention (400 days).
	Retention time.Duration
}

// Counters counts usage exactly once per event id. It is safe for
// concurrent use.
type Counters struct {
	rdb       redis.UniversalClient
	keys      keys.Space
	markTTL   time.Duration
	retention time.Duration
}

// Day is one UTC day's counts of a tenant.
type Day struct {
	Date   time.Time        // midnight UTC
	Counts map[string]int64 // by counter; counters with no usage are absent
}

// New returns Counters on rdb, which may be a Redis Cluster client.
func New(rdb redis.UniversalClient, cfg Config) (*Counters, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalid)
	}
	if cfg.MarkTTL < 0 || cfg.Retention < 0 {
		return nil, fmt.Errorf("%w: negative MarkTTL or Retention", ErrInvalid)
	}
	if cfg.MarkTTL > 0 && cfg.MarkTTL < time.Millisecond {
		return nil, fmt.Errorf("%w: MarkTTL %v: must be at least 1ms", ErrInvalid, cfg.MarkTTL)
	}
	return &Counters{
		rdb:       rdb,
		keys:      keys.New(cfg.Prefix),
		markTTL:   cmp.Or(cfg.MarkTTL, DefaultMarkTTL),
		retention: cmp.Or(cfg.Retention, DefaultRetention),
	}, nil
}

// Add adds n (≥ 1) to tenant's counter for the UTC day of at, once per
// eventID: the mark that eventID was counted and the increment are one
// script, so a retried Add (the reply was lost, the job ran twice) adds
// nothing and returns added false. at is when the usage happened; a retry
// passes the same at and lands on the same day. The same eventID may count
// once in each of several counters. An eventID counted before with another
// n gets ErrConflict. A day whose counts are past Retention is refused.
func (c *Counters) Add(ctx context.Context, tenant, counter string, n int64, eventID string, at time.Time) (added bool, err error) {
	if err := c.check(tenant, counter, n, Event{ID: eventID, At: at}); err != nil {
		return false, err
	}
	keys, args := c.call(tenant, counter, n, Event{ID: eventID, At: at})
	return c.added(addScript.Run(ctx, c.rdb, keys, args...), tenant, counter, n, Event{ID: eventID, At: at})
}

// Event is one event that AddEach counts: its id and when it happened.
type Event struct {
	ID string
	At time.Time
}

// AddEach adds n to tenant's counter once for each of events, as Add does
// for each, in one round trip: what a batch of jobs submitted at once
// counts. It returns the first error; the events before it were counted.
func (c *Counters) AddEach(ctx context.Context, tenant, counter string, n int64, events []Event) error {
	for _, e := range events {
		if err := c.check(tenant, counter, n, e); err != nil {
			return err
		}
	}
	cmds := make([]*redis.Cmd, len(events))
	// A tenant's keys share one slot, so one node: one pipeline.
	if _, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, e := range events {
			keys, args := c.call(tenant, counter, n, e)
			cmds[i] = addScript.EvalSha(ctx, p, keys, args...)
		}
		return nil
	}); err != nil && !redis.HasErrorPrefix(err, "NOSCRIPT") {
		return fmt.Errorf("usage: add %d to %s/%s: %w", len(events), tenant, counter, err)
	}
	for i, e := range events {
		cmd := cmds[i]
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") { // Redis lost its script cache (a restart)
			keys, args := c.call(tenant, counter, n, e)
			cmd = addScript.Run(ctx, c.rdb, keys, args...)
		}
		if _, err := c.added(cmd, tenant, counter, n, e); err != nil {
			return err
		}
	}
	return nil
}

// check refuses what Add refuses before any Redis work.
func (c *Counters) check(tenant, counter string, n int64, e Event) error {
	if err := validName("tenant", tenant); err != nil {
		return err
	}
	if err := validName("counter", counter); err != nil {
		return err
	}
	if strings.Contains(counter, ":") {
		// The mark is "seen:<counter>:<event id>": a colon in the counter
		// would let two pairs share a mark.
		return fmt.Errorf("%w: counter %q: colons are not allowed", ErrInvalid, counter)
	}
	if err := validName("event id", e.ID); err != nil {
		return err
	}
	if n < 1 {
		return fmt.Errorf("%w: n %d: must be at least 1", ErrInvalid, n)
	}
	if e.At.IsZero() {
		return fmt.Errorf("%w: no time: at picks the day, so a retry must repeat it", ErrInvalid)
	}
	return nil
}

// call is the KEYS and ARGV of the add script for one event.
func (c *Counters) call(tenant, counter string, n int64, e Event) ([]string, []any) {
	day := utcDay(e.At)
	dropAt := day.Add(24 * time.Hour).Add(c.retention)
	return []string{c.keys.UsageMark(tenant, counter, e.ID), c.keys.UsageDay(tenant, day)},
		[]any{counter, n, c.markTTL.Milliseconds(), dropAt.UnixMilli()}
}

// added reads the add script's answer for one event.
func (c *Counters) added(cmd *redis.Cmd, tenant, counter string, n int64, e Event) (bool, error) {
	res, err := cmd.Slice()
	if err == nil && len(res) == 0 {
		err = errors.New("an empty reply")
	}
	if err != nil {
		return false, fmt.Errorf("usage: add %s/%s %q: %w", tenant, counter, e.ID, err)
	}
	switch res[0] {
	case int64(1):
		return true, nil
	case int64(0):
		var first any
		if len(res) > 1 {
			first = res[1]
		}
		if first, _ := first.(string); first != strconv.FormatInt(n, 10) {
			return false, fmt.Errorf("%w: %s/%s %q was counted with n %s, now %d", ErrConflict, tenant, counter, e.ID, first, n)
		}
		return false, nil
	default:
		return false, fmt.Errorf("%w: %s is past the %v retention", ErrInvalid, utcDay(e.At).Format(time.DateOnly), c.retention)
	}
}

// Get returns tenant's counts for every UTC day from the day of from to the
// day of to, both included, in order; at most MaxDays days.
func (c *Counters) Get(ctx context.Context, tenant string, from, to time.Time) ([]Day, error) {
	if err := validName("tenant", tenant); err != nil {
		return nil, err
	}
	first, last := utcDay(from), utcDay(to)
	n := int(last.Sub(first)/(24*time.Hour)) + 1
	if n < 1 || n > MaxDays {
		return nil, fmt.Errorf("%w: %s to %s: want 1 to %d days", ErrInvalid,
			first.Format(time.DateOnly), last.Format(time.DateOnly), MaxDays)
	}
	// One round trip: a tenant's days share one slot, so one node.
	pipe := c.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, n)
	for i := range cmds {
		cmds[i] = pipe.HGetAll(ctx, c.keys.UsageDay(tenant, first.AddDate(0, 0, i)))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("usage: get %s: %w", tenant, err)
	}
	days := make([]Day, n)
	for i, cmd := range cmds {
		days[i] = Day{Date: first.AddDate(0, 0, i), Counts: make(map[string]int64, len(cmd.Val()))}
		for counter, v := range cmd.Val() {
			count, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("usage: get %s: %s/%s holds %q: %w", tenant, days[i].Date.Format(time.DateOnly), counter, v, err)
			}
			days[i].Counts[counter] = count
		}
	}
	return days, nil
}

// utcDay is midnight UTC of t's UTC date.
func utcDay(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// validName refuses empty and long names, and braces, which would change a
// key's Redis Cluster hash tag.
func validName(what, s string) error {
	if s == "" || len(s) > maxNameLen {
		return fmt.Errorf("%w: %s must be 1 to %d bytes, got %d", ErrInvalid, what, maxNameLen, len(s))
	}
	if strings.ContainsAny(s, "{}") {
		return fmt.Errorf("%w: %s %q: braces are not allowed", ErrInvalid, what, s)
	}
	return nil
}

// The counters Leasehold keeps. They are what GET /v1/usage shows.
const (
	// JobsSubmitted counts new jobs; the event id is the job id.
	JobsSubmitted = "jobs_submitted"
	// ExecutionsStarted counts executions claimed by a worker; the event
	// id is the execution id.
	ExecutionsStarted = "executions_started"
	// LLMPromptTokens and LLMCompletionTokens count the tokens llm.chat
	// executions used, as the upstream reported them; the event id is the
	// execution id.
	LLMPromptTokens     = "llm_prompt_tokens"
	LLMCompletionTokens = "llm_completion_tokens"
)

// ExecutionsEnded is the counter of executions that ended with outcome:
// succeeded, failed, timed_out, cancelled, handed_off (recorded by their
// worker) or lost (found by a claim after its lease expired). The event id
// is the execution id.
func ExecutionsEnded(outcome string) string { return "executions_" + outcome }
