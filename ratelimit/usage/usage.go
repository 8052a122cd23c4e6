package usage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/internal/store"
)

// Defaults for Config.
const (
	// DefaultMarkTTL is how long an event id is remembered: longer than any
	// retry window a client or a queue keeps (a week, plus a day's slack).
	DefaultMarkTTL = 8 * 24 * time.Hour
	// DefaultRetention is how long a day's counts are kept after the day
	// ends: a year and a month, for billing and a year-on-year look.
	DefaultRetention = store.DefaultUsageRetention
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
	// MarkTTL is how long an event id is remembered after it was counted:
	// a retry later than that is counted again. Default DefaultMarkTTL (8 days).
	MarkTTL time.Duration
	// Retention is how long a day's counts are kept after the day ends;
	// default DefaultRetention (400 days).
	Retention time.Duration
}

// Counters counts usage exactly once per event id. It is safe for
// concurrent use.
//
// Calls of Add and AddEach made while another's write is out wait for it,
// and are then written together: one script per tenant, counter and n for
// all of them, in one round trip. So a busy API, where every submission
// counts its job, pays one script for many submissions, not one each, and
// every caller still returns only once its events are counted.
type Counters struct {
	store     *store.Store
	markTTL   time.Duration
	retention time.Duration

	turn chan struct{} // held by the write that is out
	mu   sync.Mutex
	next *group // the calls waiting for the next write; nil: none yet
}

// group is calls of Add and AddEach written together.
type group struct {
	adds []Add
	errs []error
	done chan struct{} // closed once the group is written
}

// Day is one UTC day's counts of a tenant: Date is midnight UTC, Counts
// by counter (counters with no usage are absent).
type Day = store.UsageDay

// New returns Counters on st, which may be on a Redis Cluster.
func New(st *store.Store, cfg Config) (*Counters, error) {
	if st == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalid)
	}
	if cfg.MarkTTL < 0 || cfg.Retention < 0 {
		return nil, fmt.Errorf("%w: negative MarkTTL or Retention", ErrInvalid)
	}
	if cfg.MarkTTL > 0 && cfg.MarkTTL < time.Millisecond {
		return nil, fmt.Errorf("%w: MarkTTL %v: must be at least 1ms", ErrInvalid, cfg.MarkTTL)
	}
	return &Counters{
		store:     st,
		markTTL:   cmp.Or(cfg.MarkTTL, DefaultMarkTTL),
		retention: cmp.Or(cfg.Retention, DefaultRetention),
		turn:      make(chan struct{}, 1),
	}, nil
}

// Add adds n (≥ 1) to tenant's counter for the UTC day of at, once per
// eventID: the mark that eventID was counted and the increment are one
// script, so a retried Add (the reply was lost, the job ran twice) adds
// nothing and returns added false. at is when the usage happened; a retry
// passes the same at, or one at most a day away (a mark of the days either
// side of at's is found too), and the event is counted on the first at's
// day. The same eventID may count
// once in each of several counters. An eventID counted before with another
// n gets ErrConflict. A day whose counts are past Retention is refused.
func (c *Counters) Add(ctx context.Context, tenant, counter string, n int64, eventID string, at time.Time) (added bool, err error) {
	a := Add{Tenant: tenant, Counter: counter, N: n, Events: []Event{{ID: eventID, At: at}}, added: make([]bool, 1)}
	if err := c.join(ctx, &a); err != nil {
		return false, err
	}
	return a.added[0], nil
}

// Event is one event that AddEach counts: its ID and when it happened
// (At).
type Event = store.UsageEvent

// AddEach adds n to tenant's counter once for each of events, as Add does
// for each, in one script: what a batch of jobs submitted at once counts.
// It returns the first error; the events before it were counted.
func (c *Counters) AddEach(ctx context.Context, tenant, counter string, n int64, events []Event) error {
	return c.join(ctx, &Add{Tenant: tenant, Counter: counter, N: n, Events: events})
}

// Add is one AddEach of AddAll's.
type Add struct {
	Tenant, Counter string
	N               int64
	Events          []Event

	added []bool // which of Events were added; nil: not wanted
}

// join writes a with the other calls waiting for the next write (see
// Counters). The first to join a group waits for the write that is out,
// then writes the group; the others wait for it, or for their ctx. The
// group is written without the first's cancellation (go-redis's timeouts
// bound it): the others' counts are in it, and a caller that gave up must
// not fail them. Bad input is refused before joining, so it fails its own
// call only.
func (c *Counters) join(ctx context.Context, a *Add) error {
	if len(a.Events) == 0 {
		return nil
	}
	if err := c.checkAdd(*a); err != nil {
		return err
	}
	c.mu.Lock()
	g, first := c.next, c.next == nil
	if first {
		g = &group{done: make(chan struct{})}
		c.next = g
	}
	i := len(g.adds)
	g.adds = append(g.adds, *a)
	c.mu.Unlock()
	if first {
		c.turn <- struct{}{}
		c.mu.Lock()
		c.next = nil // the calls from now on make the next group
		c.mu.Unlock()
		g.errs = make([]error, len(g.adds))
		c.write(context.WithoutCancel(ctx), g.adds, g.errs) // join checked each
		<-c.turn
		close(g.done)
		return g.errs[i]
	}
	select {
	case <-g.done: // a.added shares its array with g.adds[i].added
		return g.errs[i]
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// AddAll does each of adds as AddEach does, all in one round trip (a
// pipeline, split per node on a Cluster): what a worker's batch of
// executions counts. Adds of one tenant, counter and n are one script. It
// returns each one's error.
func (c *Counters) AddAll(ctx context.Context, adds []Add) []error {
	errs := make([]error, len(adds))
	for i, a := range adds {
		errs[i] = c.checkAdd(a) // bad input fails its own add only
	}
	c.write(ctx, adds, errs)
	return errs
}

// write writes adds, checked, but those errs holds an error for, in one
// round trip, and puts each one's outcome in errs.
func (c *Counters) write(ctx context.Context, adds []Add, errs []error) {
	counts, of := make([]store.UsageCount, 0, len(adds)), make([]int, 0, len(adds))
	for i, a := range adds {
		if errs[i] == nil {
			counts = append(counts, store.UsageCount{Tenant: a.Tenant, Counter: a.Counter, N: a.N, Events: a.Events})
			of = append(of, i)
		}
	}
	marks, serrs := c.store.CountUsage(ctx, store.UsageRetention{MarkTTL: c.markTTL, Days: c.retention}, counts)
	for j, i := range of {
		if serrs[j] != nil {
			errs[i] = fmt.Errorf("usage: %w", serrs[j])
		} else {
			errs[i] = c.added(&adds[i], marks[j])
		}
	}
}

// added reads what counting a's events found into a.added when wanted,
// and returns a's error.
func (c *Counters) added(a *Add, marks []store.UsageMark) error {
	for i, e := range a.Events {
		switch m := marks[i]; {
		case m.Added:
			if a.added != nil {
				a.added[i] = true
			}
		case m.Expired:
			return fmt.Errorf("%w: %s is past the %v retention", ErrInvalid, utcDay(e.At).Format(time.DateOnly), c.retention)
		case m.Was != strconv.FormatInt(a.N, 10):
			return fmt.Errorf("%w: %s/%s %q was counted with n %s, now %d", ErrConflict, a.Tenant, a.Counter, e.ID, m.Was, a.N)
		}
	}
	return nil
}

// checkAdd refuses what AddEach refuses before any Redis work.
func (c *Counters) checkAdd(a Add) error {
	for _, e := range a.Events {
		if err := c.check(a.Tenant, a.Counter, a.N, e); err != nil {
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
		// A mark is of "<counter>:<event id>": a colon in the counter
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
	days, err := c.store.UsageDays(ctx, tenant, first, n)
	if err != nil {
		return nil, fmt.Errorf("usage: %w", err)
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
	// JobsSubmitted counts new jobs.
	JobsSubmitted = "jobs_submitted"
	// ExecutionsStarted counts executions claimed by a worker.
	ExecutionsStarted = "executions_started"
	// LLMPromptTokens and LLMCompletionTokens count the tokens llm.chat
	// executions used, as the upstream reported them; the event id is the
	// execution id.
	LLMPromptTokens     = "llm_prompt_tokens"
	LLMCompletionTokens = "llm_completion_tokens"
)

// ExecutionsEnded is the counter of executions that ended with outcome:
// succeeded, failed, timed_out, cancelled, handed_off, pushback, waiting
// (recorded by their worker) or lost (found by a claim after its lease expired).
func ExecutionsEnded(outcome string) string { return "executions_" + outcome }

// Lifecycle returns the counters of a job's life: jobs submitted and
// executions started and ended. Leasehold's queues count these themselves,
// in the step that creates, starts or ends each (store.Store.AddUsage reads
// them), not through Counters: exactly once, with no mark per event.
func Lifecycle() []string {
	out := []string{JobsSubmitted, ExecutionsStarted}
	for _, o := range []string{"succeeded", "failed", "timed_out", "cancelled", "handed_off", "pushback", "waiting", "lost"} {
		out = append(out, ExecutionsEnded(o))
	}
	return out
}

// DropAt is when the counts of the UTC day of at are dropped, kept for
// retention after the day ends: what a queue's day of lifecycle counts
// expires at.
func DropAt(at time.Time, retention time.Duration) time.Time {
	return store.UsageDropAt(at, retention)
}

// Retention is how long c keeps a day's counts after the day ends.
func (c *Counters) Retention() time.Duration { return c.retention }
