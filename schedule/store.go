package schedule

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/store/scripts"
	"github.com/leasehold/leasehold/internal/telemetry"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/ratelimit"
)

// Errors callers branch on.
var (
	// ErrNotFound: no such schedule, or another tenant's (the two are
	// indistinguishable on purpose).
	ErrNotFound = errors.New("schedule: not found")
	// ErrExists: a schedule of that name exists with another spec. Create
	// returns it with the error.
	ErrExists = errors.New("schedule: a schedule of that name exists with another spec")
)

// DefaultTenantMax is how many schedules a tenant may have by default.
const DefaultTenantMax = 1000

// CapError: the tenant has as many schedules as it may (Config.TenantMax),
// so a schedule of a new name is refused until it deletes one.
type CapError struct {
	Schedules int64 // the tenant's schedules, as counted
	Max       int64
}

func (e *CapError) Error() string {
	return fmt.Sprintf("schedule: tenant has %d schedules, the most it may have is %d", e.Schedules, e.Max)
}

// Config configures a Store. Zero values mean the defaults.
type Config struct {
	// Prefix starts every key; default keys.DefaultPrefix.
	Prefix string
	// Jobs creates the fired jobs; default store.New(rdb, store.Config{Prefix: Prefix}).
	Jobs *store.Store
	// Waker wakes an idle worker of a fired job's queue; nil: workers
	// find the job when they poll.
	Waker *execution.Waker
	// TracerProvider makes the span of each fire, which starts the fired
	// job's trace; default the global one.
	TracerProvider trace.TracerProvider
	// TenantMax is how many schedules one tenant may have; default
	// DefaultTenantMax (1,000). Every schedule costs each scheduler work at
	// each of its due times, so it is bounded like every other thing a
	// tenant makes.
	TenantMax int
}

// Store keeps schedules in Redis and fires them.
type Store struct {
	rdb     redis.UniversalClient
	keys    keys.Space
	prefix  string
	jobs    *store.Store
	waker   *execution.Waker
	tracer  trace.Tracer
	max     int
	create  *scripts.Script
	tenants *scripts.Script
	due     *scripts.Script
	advance *scripts.Script
	pause   *scripts.Script
	update  *scripts.Script
	delete  *scripts.Script
}

// NewStore returns a Store on rdb.
func NewStore(rdb redis.UniversalClient, cfg Config) (*Store, error) {
	if rdb == nil {
		return nil, errors.New("schedule: nil redis client")
	}
	if cfg.TenantMax < 0 {
		return nil, errors.New("schedule: negative TenantMax")
	}
	jobs := cfg.Jobs
	if jobs == nil {
		jobs = store.New(rdb, store.Config{Prefix: cfg.Prefix})
	}
	lib := []string{"stats.lua", "finished.lua", "states.lua", "transition.lua"} // redis_now, int
	return &Store{
		rdb:     rdb,
		keys:    keys.New(cfg.Prefix),
		prefix:  cfg.Prefix,
		jobs:    jobs,
		waker:   cfg.Waker,
		tracer:  telemetry.Tracer(cfg.TracerProvider),
		max:     cmp.Or(cfg.TenantMax, DefaultTenantMax),
		create:  scripts.Load("schedule_create.lua", lib...),
		tenants: scripts.Load("schedule_due_tenants.lua", lib...),
		due:     scripts.Load("schedule_due.lua", lib...),
		advance: scripts.Load("schedule_advance.lua", lib...),
		pause:   scripts.Load("schedule_pause.lua"),
		update:  scripts.Load("schedule_update.lua"),
		delete:  scripts.Load("schedule_delete.lua"),
	}, nil
}

// Attribute keys of a fire's span.
const (
	ScheduleName = attribute.Key("leasehold.schedule.name")
	ScheduleDue  = attribute.Key("leasehold.schedule.due")
)

// Create creates tenant's schedule spec. created is false when a schedule
// of that name already exists with the same spec (it is returned); with
// another spec, Create returns that one with ErrExists. An invalid spec
// returns a *job.ValidationError naming the field, and a new name of a
// tenant that has Config.TenantMax schedules a *CapError; neither writes
// anything.
func (s *Store) Create(ctx context.Context, tenant string, spec Spec) (sch Schedule, created bool, err error) {
	spec, canon, next, err := s.prepare(ctx, tenant, spec)
	if err != nil {
		return Schedule{}, false, err
	}
	res, err := s.create.Run(ctx, s.rdb,
		[]string{s.keys.Schedule(tenant, spec.Name), s.keys.ScheduleTenantDue(tenant), s.keys.TenantSchedules(tenant), s.keys.ScheduleTenants()},
		tenant, spec.Name, canon, uuid.NewString(), next.UnixMilli(), s.max).Slice()
	if err != nil {
		return Schedule{}, false, fmt.Errorf("schedule: create %s: %w", spec.Name, err)
	}
	if len(res) != 2 {
		return Schedule{}, false, fmt.Errorf("schedule: create %s: %d values in the reply, want 2", spec.Name, len(res))
	}
	if res[0] == int64(-1) {
		n, _ := res[1].(int64)
		return Schedule{}, false, &CapError{Schedules: n, Max: int64(s.max)}
	}
	sch, err = parseReply(tenant, res[1])
	if err != nil {
		return Schedule{}, false, err
	}
	switch {
	case res[0] == int64(1):
		return sch, true, nil
	case sch.spec == canon:
		return sch, false, nil
	}
	return sch, false, ErrExists
}

// Update replaces the spec (cron, timezone, job, overlap) of tenant's
// existing schedule spec.Name and keeps its history: created_at, paused,
// last_run_at and last_job_id. Its next run is the new cron's first due
// time after now. An invalid spec returns a *job.ValidationError naming the
// field and writes nothing; a schedule that does not exist, ErrNotFound.
func (s *Store) Update(ctx context.Context, tenant string, spec Spec) (Schedule, error) {
	spec, canon, next, err := s.prepare(ctx, tenant, spec)
	if err != nil {
		return Schedule{}, err
	}
	res, err := s.update.Run(ctx, s.rdb,
		[]string{s.keys.Schedule(tenant, spec.Name), s.keys.ScheduleTenantDue(tenant), s.keys.ScheduleTenants()},
		tenant, spec.Name, canon, uuid.NewString(), next.UnixMilli()).Slice()
	if err != nil {
		return Schedule{}, fmt.Errorf("schedule: update %s: %w", spec.Name, err)
	}
	if len(res) == 0 {
		return Schedule{}, ErrNotFound
	}
	return parseReply(tenant, res)
}

// prepare checks tenant's spec for Create and Update and returns it with
// its defaults, its canonical JSON and its first due time after now.
func (s *Store) prepare(ctx context.Context, tenant string, spec Spec) (Spec, string, time.Time, error) {
	if err := job.ValidateTenant(tenant); err != nil {
		return spec, "", time.Time{}, err
	}
	spec, cr, canon, err := spec.normalize()
	if err != nil {
		return spec, "", time.Time{}, err
	}
	now, err := s.now(ctx)
	if err != nil {
		return spec, "", time.Time{}, err
	}
	next := cr.Next(now)
	if next.IsZero() {
		return spec, "", time.Time{}, neverDue()
	}
	return spec, canon, next, nil
}

// Get returns tenant's schedule name.
func (s *Store) Get(ctx context.Context, tenant, name string) (Schedule, error) {
	if !namePattern.MatchString(name) || job.ValidateTenant(tenant) != nil {
		return Schedule{}, ErrNotFound
	}
	h, err := s.rdb.HGetAll(ctx, s.keys.Schedule(tenant, name)).Result()
	if err != nil {
		return Schedule{}, fmt.Errorf("schedule: get %s: %w", name, err)
	}
	if len(h) == 0 {
		return Schedule{}, ErrNotFound
	}
	return parseRecord(tenant, h)
}

// Paging of List.
const (
	DefaultListLimit = 50
	MaxListLimit     = 500
)

// ErrBadCursor: a List cursor that this package did not hand out. It is a
// job.ErrBadCursor, as a bad cursor of a job listing is.
var ErrBadCursor = fmt.Errorf("schedule: %w", job.ErrBadCursor)

// List returns a page of tenant's schedules, by name: up to limit of them
// (1 to MaxListLimit; 0: DefaultListLimit) after cursor ("" = from the
// first), and the cursor of the next page ("" after the last). Each page
// reads its names from where the last ended, so paging lists every
// schedule that exists throughout exactly once.
func (s *Store) List(ctx context.Context, tenant string, limit int, cursor string) ([]Schedule, string, error) {
	if err := job.ValidateTenant(tenant); err != nil {
		return nil, "", err
	}
	if limit < 0 || limit > MaxListLimit {
		return nil, "", &job.ValidationError{Errors: []job.FieldError{{Field: "limit", Message: fmt.Sprintf("must be an integer from 1 to %d", MaxListLimit)}}}
	}
	limit = cmp.Or(limit, DefaultListLimit)
	from := "-"
	if cursor != "" {
		after, err := base64.RawURLEncoding.DecodeString(cursor)
		if err != nil || !namePattern.Match(after) {
			return nil, "", ErrBadCursor
		}
		from = "(" + string(after)
	}
	// One name more than the page tells whether another page follows.
	names, err := s.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{Key: s.keys.TenantSchedules(tenant),
		Start: from, Stop: "+", ByLex: true, Count: int64(limit + 1)}).Result()
	if err != nil {
		return nil, "", fmt.Errorf("schedule: list: %w", err)
	}
	next := ""
	if len(names) > limit {
		names = names[:limit]
		next = base64.RawURLEncoding.EncodeToString([]byte(names[limit-1]))
	}
	cmds := make([]*redis.MapStringStringCmd, len(names))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, n := range names {
			cmds[i] = p.HGetAll(ctx, s.keys.Schedule(tenant, n))
		}
		return nil
	}); err != nil {
		return nil, "", fmt.Errorf("schedule: list: %w", err)
	}
	out := make([]Schedule, 0, len(names))
	for _, c := range cmds {
		if len(c.Val()) == 0 {
			continue // deleted since the names were read
		}
		sch, err := parseRecord(tenant, c.Val())
		if err != nil {
			return nil, "", err
		}
		out = append(out, sch)
	}
	return out, next, nil
}

// Delete deletes tenant's schedule name. Jobs it fired stay.
func (s *Store) Delete(ctx context.Context, tenant, name string) error {
	if !namePattern.MatchString(name) || job.ValidateTenant(tenant) != nil {
		return ErrNotFound
	}
	n, err := s.delete.Run(ctx, s.rdb,
		[]string{s.keys.Schedule(tenant, name), s.keys.ScheduleTenantDue(tenant), s.keys.TenantSchedules(tenant)},
		name).Int()
	if err != nil {
		return fmt.Errorf("schedule: delete %s: %w", name, err)
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}

// Pause stops tenant's schedule name from firing until Resume. Pausing a
// paused schedule changes nothing.
func (s *Store) Pause(ctx context.Context, tenant, name string) (Schedule, error) {
	return s.setPaused(ctx, tenant, name, true)
}

// Resume makes a paused schedule fire again from its next due time after
// now: due times that passed while it was paused are not fired.
func (s *Store) Resume(ctx context.Context, tenant, name string) (Schedule, error) {
	return s.setPaused(ctx, tenant, name, false)
}

func (s *Store) setPaused(ctx context.Context, tenant, name string, paused bool) (Schedule, error) {
	sch, err := s.Get(ctx, tenant, name)
	if err != nil {
		return Schedule{}, err
	}
	flag, next := "1", int64(0)
	if !paused {
		flag = "0"
		now, err := s.now(ctx)
		if err != nil {
			return Schedule{}, err
		}
		cr, err := sch.cron()
		if err != nil {
			return Schedule{}, err
		}
		next = cr.Next(now).UnixMilli()
	}
	res, err := s.pause.Run(ctx, s.rdb, []string{s.keys.Schedule(tenant, name), s.keys.ScheduleTenantDue(tenant), s.keys.ScheduleTenants()},
		name, flag, next, tenant).Slice()
	if err != nil {
		return Schedule{}, fmt.Errorf("schedule: pause %s: %w", name, err)
	}
	if len(res) == 0 {
		return Schedule{}, ErrNotFound
	}
	return parseReply(tenant, res)
}

// Trigger fires tenant's schedule name once now, paused or not and
// whatever its overlap, and returns the job: it counts against limit as a
// submission does (job.CapError). It does not move the next due time.
func (s *Store) Trigger(ctx context.Context, tenant, name string, limit job.Cap) (job.Job, error) {
	sch, err := s.Get(ctx, tenant, name)
	if err != nil {
		return job.Job{}, err
	}
	now, err := s.now(ctx)
	if err != nil {
		return job.Job{}, err
	}
	// A fresh key: every trigger is a fire of its own; go-redis resending
	// the submit is still answered with its one job (the script's nonce).
	j, _, err := s.submit(ctx, sch, now, "schedule-trigger:"+uuid.NewString(), limit)
	if err != nil {
		return job.Job{}, err
	}
	if _, err := s.moveOn(ctx, sch, now.UnixMilli(), sch.next, sch.next, j, Idle); err != nil {
		return j, err
	}
	return j, nil
}

// Limits are what a fire counts against, like a submission: the tenant's
// submission rate and its cap of jobs not ended.
type Limits struct {
	// Rate spends one unit of the tenant's rate per fired job (the tenant
	// is the subject, as for POST /v1/jobs); nil: unlimited.
	Rate ratelimit.Limiter
	// Cap bounds the tenant's jobs not ended; zero: no cap.
	Cap job.Cap
}

// Outcome says what a Fire did.
type Outcome string

const (
	// Fired: the job of the due time exists (created by this fire or by
	// another that fired the same due time) and the schedule moved on.
	Fired Outcome = "fired"
	// Skipped: overlap "skip", and the last job has not ended; the
	// schedule moved on without a job.
	Skipped Outcome = "skipped"
	// Deferred: over the tenant's rate or cap; the due time is tried again
	// later (RetryAfter). When it fires, the due times that passed
	// meanwhile collapse into it.
	Deferred Outcome = "deferred"
	// Idle: nothing to fire (not due, paused, deleted or already moved on).
	Idle Outcome = "idle"
)

// Result is what Fire did for one schedule.
type Result struct {
	Tenant, Name string
	Outcome      Outcome
	Due          time.Time // the due time fired, skipped or deferred
	Job          *job.Job  // Outcome Fired
	Created      bool      // Outcome Fired: this call created the job
	RetryAfter   time.Duration
	// Changed: the due time before came to another outcome (or this is the
	// schedule's first), so a run of skipped or deferred due times is
	// logged once, by the one fire that moved the schedule into it.
	Changed bool
}

// capRetry is how soon a fire refused by the tenant's cap is tried again.
const capRetry = time.Second

// Fire fires tenant's schedule name if it is due at now (the Redis clock):
// it creates the job of its due time and moves next_run_at to the first
// due time after now, so the due times missed while nothing fired collapse
// into this one fire.
//
// It is two steps in two Cluster slots (the job's queue's and the
// schedules'), each idempotent, so any number of schedulers may fire the
// same due time and any may die between them: the job is created under an
// idempotency key derived from the schedule and the due time, which makes
// every fire of that due time one job; then a compare-and-set on
// next_run_at moves the schedule on, once. A fire that dies before the
// second step leaves next_run_at where it was, and the next fire of it
// finds the job already there.
func (s *Store) Fire(ctx context.Context, tenant, name string, now time.Time, limits Limits) (Result, error) {
	f := Result{Tenant: tenant, Name: name, Outcome: Idle}
	sch, err := s.Get(ctx, tenant, name)
	if errors.Is(err, ErrNotFound) {
		return f, nil
	}
	if err != nil {
		return f, err
	}
	f.Due = time.UnixMilli(sch.next).UTC()
	if sch.Paused || sch.next > now.UnixMilli() {
		// The index ran ahead of the record; put it back at its due time.
		_, err := s.moveOn(ctx, sch, sch.next, sch.next, sch.next, job.Job{}, Idle)
		return f, err
	}
	cr, err := sch.cron()
	if err != nil {
		return f, err
	}
	next := cr.Next(now).UnixMilli()
	if sch.Overlap == OverlapSkip && sch.LastJobID != nil {
		last, err := s.jobs.Get(ctx, tenant, *sch.LastJobID, false)
		switch {
		case errors.Is(err, job.ErrNotFound): // deleted: it has ended
		case err != nil:
			return f, err
		case !last.State.Terminal():
			f.Outcome = Skipped
			f.Changed, err = s.moveOn(ctx, sch, sch.next, next, next, job.Job{}, Skipped)
			return f, err
		}
	}
	key := fireKey(sch)
	if limits.Rate != nil {
		wait, err := s.spend(ctx, tenant, key, limits.Rate)
		if err != nil {
			return f, err
		}
		if wait > 0 {
			return s.deferFire(ctx, f, sch, now, wait)
		}
	}
	j, created, err := s.submit(ctx, sch, f.Due, key, limits.Cap)
	if errors.Is(err, job.ErrOverCap) {
		return s.deferFire(ctx, f, sch, now, capRetry)
	}
	if err != nil {
		return f, err
	}
	f.Outcome, f.Job, f.Created = Fired, &j, created
	f.Changed, err = s.moveOn(ctx, sch, sch.next, next, next, j, Fired)
	return f, err
}

// fireKey is the idempotency key of sch's fire at its due time: every
// fire of one due time of one creation of a schedule is one job. (The
// generation tells a schedule re-created under the same name from the old.)
func fireKey(sch Schedule) string {
	return fmt.Sprintf("schedule:%s:%s:%d", sch.Name, sch.gen, sch.next)
}

// deferFire leaves the due time where it is, to be fired after wait.
func (s *Store) deferFire(ctx context.Context, f Result, sch Schedule, now time.Time, wait time.Duration) (Result, error) {
	f.Outcome, f.RetryAfter = Deferred, wait
	var err error
	f.Changed, err = s.moveOn(ctx, sch, sch.next, sch.next, now.Add(wait).UnixMilli(), job.Job{}, Deferred)
	return f, err
}

// spend spends one unit of tenant's rate for the fire with idempotency key
// key, and returns how long to wait when the rate refuses it. A fire whose
// job exists already (a second scheduler, or a retry after a crash) spends
// nothing, as a replayed submission does not.
func (s *Store) spend(ctx context.Context, tenant, key string, rate ratelimit.Limiter) (time.Duration, error) {
	n, err := s.rdb.Exists(ctx, s.keys.Idempotency(tenant, key)).Result()
	if err != nil {
		return 0, fmt.Errorf("schedule: read idempotency record: %w", err)
	}
	if n > 0 {
		return 0, nil
	}
	d, err := rate.Allow(ctx, tenant, 1)
	if err != nil {
		return 0, fmt.Errorf("schedule: rate: %w", err)
	}
	if !d.Allowed {
		return max(d.RetryAfter, 100*time.Millisecond), nil
	}
	return 0, nil
}

// submit creates the job of sch's fire for due time due through the one
// submission path (store.Store.SubmitWithin) with idempotency key key.
func (s *Store) submit(ctx context.Context, sch Schedule, due time.Time, key string, limit job.Cap) (j job.Job, created bool, err error) {
	// The fire's span is the root of the fired job's trace (a trigger's,
	// the child of its request's): the job's submit span is its child.
	ctx, span := s.tracer.Start(ctx, "fire "+sch.Name, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
		telemetry.Tenant.String(sch.Tenant), ScheduleName.String(sch.Name), ScheduleDue.String(format(due))))
	defer func() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()
	sub, err := fireSubmission(sch.Job, sch.Name, due)
	if err != nil {
		return job.Job{}, false, err
	}
	j, created, err = s.jobs.SubmitWithin(ctx, sch.Tenant, sub, key, limit)
	if err != nil {
		return j, false, fmt.Errorf("schedule: fire %s: %w", sch.Name, err)
	}
	if !created {
		return j, false, nil
	}
	s.waker.Wake(ctx, j.Queue)
	return j, true, nil
}

// moveOn is the second step of a fire (schedule_advance.lua): from due
// time fired (ms) to next, indexed at score; j is the fired job, if any,
// and o what the due time came to (Idle: nothing to record). changed says
// that o differs from what the due time before came to.
func (s *Store) moveOn(ctx context.Context, sch Schedule, fired, next, score int64, j job.Job, o Outcome) (changed bool, err error) {
	if o == Idle {
		o = ""
	}
	n, err := s.advance.Run(ctx, s.rdb, []string{s.keys.Schedule(sch.Tenant, sch.Name), s.keys.ScheduleTenantDue(sch.Tenant), s.keys.ScheduleTenants()},
		sch.Name, sch.gen, fired, next, score, j.ID, j.Queue, string(o), sch.Tenant).Int()
	if err != nil {
		return false, fmt.Errorf("schedule: advance %s: %w", sch.Name, err)
	}
	return n == 2, nil
}

// taken is a schedule the due index handed to one scheduler.
type taken struct{ tenant, name string }

// take takes up to n schedules due now, holding them for hold, and
// returns them with the Redis clock's now; more says that more may be due
// than it took: some tenant had more due than its share, or n tenants were
// due, as many as one read reads. Fair across tenants: it reads up to n tenants
// with schedules due, those looked at longest ago first, and takes an even
// share of n from each (at least one), so one tenant's many due schedules
// delay another's by at most a read while fewer than n tenants are due.
// Two round trips when anything is due, one when nothing is.
func (s *Store) take(ctx context.Context, n int, hold time.Duration) (now time.Time, out []taken, more bool, err error) {
	res, err := replyStrings(s.tenants.Run(ctx, s.rdb, []string{s.keys.ScheduleTenants()}, n))
	if err != nil || len(res) == 0 {
		return time.Time{}, nil, false, fmt.Errorf("schedule: due tenants: %d values, %w", len(res), err)
	}
	if now, err = parseMillis(res[0]); err != nil || len(res) == 1 {
		return now, nil, false, err
	}
	tenants := res[1:]
	keys := make([]string, 1, 1+len(tenants))
	keys[0] = s.keys.ScheduleTenants()
	args := make([]any, 2, 2+len(tenants))
	args[0], args[1] = max(1, n/len(tenants)), hold.Milliseconds()
	for _, t := range tenants {
		keys = append(keys, s.keys.ScheduleTenantDue(t))
		args = append(args, t)
	}
	res, err = replyStrings(s.due.Run(ctx, s.rdb, keys, args...))
	if err != nil {
		return time.Time{}, nil, false, fmt.Errorf("schedule: due: %w", err)
	}
	if len(res) < 2 || len(res)%2 != 0 {
		return time.Time{}, nil, false, fmt.Errorf("schedule: due: %d values in the reply, want an even number from 2", len(res))
	}
	if now, err = parseMillis(res[0]); err != nil {
		return time.Time{}, nil, false, err
	}
	out = make([]taken, 0, len(res)/2-1)
	for i := 2; i < len(res); i += 2 {
		out = append(out, taken{tenant: res[i], name: res[i+1]})
	}
	return now, out, res[1] == "1" || len(tenants) == n, nil
}

// replyStrings reads a script's array reply of strings and integers (a
// time in ms) as strings.
func replyStrings(cmd *redis.Cmd) ([]string, error) {
	vals, err := cmd.Slice()
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = fmt.Sprint(v)
	}
	return out, err
}

func parseMillis(v string) (time.Time, error) {
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("schedule: due: now %q: %w", v, err)
	}
	return time.UnixMilli(ms).UTC(), nil
}

// now reads the Redis clock, the one every fire is timed by.
func (s *Store) now(ctx context.Context) (time.Time, error) {
	t, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return time.Time{}, fmt.Errorf("schedule: redis time: %w", err)
	}
	return t.UTC().Truncate(time.Millisecond), nil
}

// cron parses the schedule's stored expression in its time zone.
func (s Schedule) cron() (located, error) {
	loc, err := time.LoadLocation(s.Timezone)
	if err != nil {
		return located{}, fmt.Errorf("schedule %s: %w", s.Name, err)
	}
	cr, err := parseCron(s.Cron)
	if err != nil {
		return located{}, fmt.Errorf("schedule %s: %w", s.Name, err)
	}
	return located{cr, loc}, nil
}

// parseReply parses a record that a script returned as HGETALL's flat list.
func parseReply(tenant string, v any) (Schedule, error) {
	flat, ok := v.([]any)
	if !ok || len(flat)%2 != 0 {
		return Schedule{}, fmt.Errorf("schedule: unexpected script reply %T", v)
	}
	h := make(map[string]string, len(flat)/2)
	for i := 0; i < len(flat); i += 2 {
		k, _ := flat[i].(string)
		h[k], _ = flat[i+1].(string)
	}
	return parseRecord(tenant, h)
}

// parseRecord builds a Schedule from its hash: the one place that knows
// how its fields are encoded (written by schedule_create.lua and
// schedule_advance.lua).
func parseRecord(tenant string, h map[string]string) (Schedule, error) {
	var spec Spec
	if err := json.Unmarshal([]byte(h["spec"]), &spec); err != nil {
		return Schedule{}, fmt.Errorf("schedule: record %s: spec: %w", h["name"], err)
	}
	sch := Schedule{
		Name: spec.Name, Cron: spec.Cron, Timezone: spec.Timezone, Job: spec.Job, Overlap: spec.Overlap,
		Paused: h["paused"] == "1", Tenant: tenant, gen: h["gen"], spec: h["spec"], lastQueue: h["last_queue"],
	}
	var err error
	ms := func(field string) int64 {
		n, perr := strconv.ParseInt(h[field], 10, 64)
		if perr != nil && err == nil {
			err = fmt.Errorf("schedule: record %s: %s: %w", sch.Name, field, perr)
		}
		return n
	}
	sch.next = ms("next")
	sch.CreatedAt = time.UnixMilli(ms("created")).UTC()
	if !sch.Paused {
		t := time.UnixMilli(sch.next).UTC()
		sch.NextRunAt = &t
	}
	if h["last_run"] != "" {
		t := time.UnixMilli(ms("last_run")).UTC()
		sch.LastRunAt = &t
	}
	if id := h["last_job"]; id != "" {
		sch.LastJobID = &id
	}
	return sch, err
}
