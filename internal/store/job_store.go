package store

import (
	"github.com/leasehold/leasehold/job"

	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasehold/leasehold/internal/jobid"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/store/scripts"
	"github.com/leasehold/leasehold/internal/telemetry"
)

// The scripts of the job operations.
var (
	jobSubmitScript = scripts.Load("job_submit.lua", "fair.lua", "stats.lua", "finished.lua", "states.lua", "transition.lua")
	jobCancelScript = scripts.Load("job_cancel.lua", "fair.lua", "stats.lua", "finished.lua", "states.lua", "transition.lua")
	jobRetryScript  = scripts.Load("job_retry.lua", "fair.lua", "stats.lua", "finished.lua", "states.lua", "transition.lua")
	jobDeleteScript = scripts.Load("job_delete.lua", "stats.lua", "finished.lua", "states.lua", "transition.lua")
	jobSignalScript = scripts.Load("job_signal.lua", "fair.lua", "stats.lua", "finished.lua", "states.lua", "transition.lua", "signal.lua")
	jobFollowScript = scripts.Load("job_follow.lua", "states.lua")
	jobUnpackScript = scripts.Load("job_unpack.lua")
	unlockScript    = scripts.Load("unlock.lua")
)

// DefaultUsageRetention is the default of Config.UsageRetention: a year
// and a month, for billing and a year-on-year look.
const DefaultUsageRetention = 400 * 24 * time.Hour

// jobs is what the job operations keep besides the client: Config's job
// settings, with their defaults, and the queues known by tag.
type jobs struct {
	retention time.Duration
	idemTTL   time.Duration
	usageTTL  time.Duration // Config.UsageRetention
	limited   bool          // Config.OnlyLimitedKeys
	tracer    trace.Tracer
	queueSet  *queueSet
}

func newJobs(rdb redis.UniversalClient, ks keys.Space, cfg Config) jobs {
	return jobs{
		retention: cmp.Or(cfg.Retention, job.DefaultRetention),
		idemTTL:   cmp.Or(cfg.IdempotencyTTL, job.DefaultIdempotencyTTL),
		usageTTL:  cmp.Or(cfg.UsageRetention, DefaultUsageRetention),
		limited:   cfg.OnlyLimitedKeys,
		tracer:    telemetry.Tracer(cfg.TracerProvider),
		queueSet:  &queueSet{rdb: rdb, keys: ks},
	}
}

// Validate refuses a Config whose job settings contradict each other.
func (cfg Config) Validate() error {
	retention := cmp.Or(cfg.Retention, job.DefaultRetention)
	idemTTL := cmp.Or(cfg.IdempotencyTTL, job.DefaultIdempotencyTTL)
	usageTTL := cmp.Or(cfg.UsageRetention, DefaultUsageRetention)
	if retention < time.Millisecond || idemTTL < time.Millisecond || usageTTL < time.Millisecond {
		return fmt.Errorf("store: retention %v, idempotency TTL %v and usage retention %v must be positive", retention, idemTTL, usageTTL)
	}
	if retention < idemTTL {
		return fmt.Errorf("store: retention %v is shorter than the idempotency TTL %v", retention, idemTTL)
	}
	return nil
}

// idempotencyRecord is what an Idempotency-Key stands for.
type idempotencyRecord struct {
	Job   string `json:"job"`
	Queue string `json:"queue"`
	Body  string `json:"body"` // sha256 of the normalized submission
}

// Get returns the job id of tenant; admin reads any tenant's job.
func (s *Store) Get(ctx context.Context, tenant, id string, admin bool) (job.Job, error) {
	var h map[string]string
	queue, err := s.withQueue(ctx, id, func(queue string) (bool, error) {
		var err error
		h, err = s.shownOf(ctx, queue, id, jobFields)
		return h != nil, err
	})
	if err != nil {
		if errors.Is(err, job.ErrNotFound) {
			return job.Job{}, err
		}
		return job.Job{}, fmt.Errorf("job: get %s: %w", id, err)
	}
	if !admin && h["tenant"] != tenant {
		return job.Job{}, job.ErrNotFound
	}
	return job.ParseRecord(queue, id, h)
}

// Cancel cancels the job id of tenant (admin: of any tenant). A job waiting
// in its queue becomes cancelled at once; a running one gets
// CancelRequested and is finished by its owner, or by the reaper if the
// owner is gone. Cancelling again changes nothing and succeeds. A job that
// ended otherwise is returned with ErrConflict.
//
// Cancel writes the job record only: the caller also sets the cancel flag
// and publishes the cancel message, which are the cancel package's.
func (s *Store) Cancel(ctx context.Context, tenant, id string, admin bool) (job.Job, error) {
	queue, owner, lane, err := s.laneOf(ctx, tenant, id, admin)
	if err != nil {
		return job.Job{}, err
	}
	start := time.Now()
	res, err := s.run(ctx, jobCancelScript, cancelCall{queue: queue, id: id, lane: lane, owner: owner, retention: s.jobs.retention}).Slice()
	if err != nil {
		return job.Job{}, fmt.Errorf("job: cancel %s: %w", id, err)
	}
	r, err := decodeVerdict(res)
	if err != nil {
		return job.Job{}, fmt.Errorf("job: cancel %s: %w", id, err)
	}
	if r.outcome == "missing" {
		return job.Job{}, job.ErrNotFound
	}
	j, err := r.job(queue, id)
	if err != nil {
		return job.Job{}, err
	}
	if r.outcome == "finished" {
		return j, job.ErrConflict
	}
	s.traceCancel(ctx, j, r.outcome, start)
	return j, nil
}

// Stats returns every queue's counts, by queue name. Each is one read of
// the queue's stats hash, which every state transition keeps exact.
func (s *Store) Stats(ctx context.Context) ([]job.QueueStats, error) {
	queues, err := s.queues(ctx)
	if err != nil {
		return nil, err
	}
	return s.stats(ctx, queues, "")
}

// TenantStats is Stats of tenant's jobs alone: every queue, with the
// counts of tenant's jobs in it. The scripts that move a job count it in
// its queue's stats hash for its tenant too, in the same step.
func (s *Store) TenantStats(ctx context.Context, tenant string) ([]job.QueueStats, error) {
	if err := job.ValidateTenant(tenant); err != nil {
		return nil, err
	}
	queues, err := s.queues(ctx)
	if err != nil {
		return nil, err
	}
	return s.stats(ctx, queues, tenant)
}

// stats reads the counts of queues, of tenant's jobs ("" = of all jobs),
// and whether each is paused, in one round trip. The counts of all jobs
// are the sums of every tenant's (internal/store/scripts/stats.lua).
func (s *Store) stats(ctx context.Context, queues []string, tenant string) ([]job.QueueStats, error) {
	fields := countedFields(tenant)
	cmds := make([]*redis.SliceCmd, len(queues))
	hashes := make([]*redis.MapStringStringCmd, len(queues))
	var paused *redis.StringSliceCmd
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		paused = p.SMembers(ctx, s.keys.PausedQueues())
		for i, q := range queues {
			if tenant == "" {
				hashes[i] = p.HGetAll(ctx, s.keys.QueueStats(q))
			} else {
				cmds[i] = p.HMGet(ctx, s.keys.QueueStats(q), fields...)
			}
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("job: stats: %w", err)
	}
	stats := make([]job.QueueStats, len(queues))
	for i, q := range queues {
		var n [4]int64
		var err error
		if tenant == "" {
			n, err = sumCounts(hashes[i].Val())
		} else {
			n, err = parseCounts(cmds[i])
			for k := range n {
				n[k] = max(n[k], 0) // see sumCounts
			}
		}
		if err != nil {
			return nil, fmt.Errorf("job: stats of %s: %w", q, err)
		}
		stats[i] = job.QueueStats{Name: q, Queued: n[0], Running: n[1], Retrying: n[2], Waiting: n[3],
			Paused: slices.Contains(paused.Val(), q)}
	}
	return stats, nil
}

// countedStates are the states whose jobs a stats hash counts per tenant,
// in the order of QueueStats's counts.
var countedStates = [4]job.State{job.StateQueued, job.StateRunning, job.StateRetrying, job.StateWaiting}

// countedFields names the stats hash fields that count the jobs queued,
// running, retrying and waiting of tenant, as internal/store/scripts/stats.lua
// writes them: <state>/<tenant> (a tenant name has no '/').
func countedFields(tenant string) []string {
	fields := make([]string, len(countedStates))
	for i, state := range countedStates {
		fields[i] = string(state) + "/" + tenant
	}
	return fields
}

// counted returns which of countedStates a stats hash field counts and of
// which tenant; ok is false for a field that counts none (a count of all
// tenants an older version wrote, the finishes per minute).
func counted(field string) (state int, tenant string, ok bool) {
	name, tenant, ok := strings.Cut(field, "/")
	if !ok {
		return 0, "", false
	}
	state = slices.Index(countedStates[:], job.State(name))
	return state, tenant, state >= 0
}

// sumCounts adds up every tenant's counts in a stats hash h. A job
// submitted before tenants were counted takes one off its tenant's count
// when it moves: below 0 means none left.
func sumCounts(h map[string]string) ([4]int64, error) {
	var n [4]int64
	for field, v := range h {
		if state, _, ok := counted(field); ok {
			c, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return n, fmt.Errorf("stats field %s: %w", field, err)
			}
			n[state] += max(c, 0)
		}
	}
	return n, nil
}

// parseCounts reads the reply of an HMGET of countedFields; a field never
// written counts 0.
func parseCounts(cmd *redis.SliceCmd) ([4]int64, error) {
	var n [4]int64
	vals, err := cmd.Result()
	if err != nil {
		return n, err
	}
	for k, v := range vals {
		if v != nil {
			if n[k], err = strconv.ParseInt(v.(string), 10, 64); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// queues returns the names of every queue that has received a job, sorted.
func (s *Store) queues(ctx context.Context) ([]string, error) {
	queues, err := s.rdb.SMembers(ctx, s.keys.Queues()).Result()
	if err != nil {
		return nil, fmt.Errorf("job: queues: %w", err)
	}
	slices.Sort(queues)
	return queues, nil
}

// locate returns the queue of job id. The queues whose tag is the id's
// (internal/jobid) are asked whether they hold it, in one round trip;
// when none does, the set of queues is read again, for a queue new since.
// An id of version 7 (made before ids had tags) has a lookup key written
// before its job, living Retention + 30 days; for such a job still waiting
// after that, each queue is asked in turn. A malformed id is ErrNotFound
// before any Redis call, so hostile input never reaches a key name.
func (s *Store) locate(ctx context.Context, id string) (string, error) {
	tag, tagged, _, ok := jobid.Parse(id)
	if !ok {
		return "", job.ErrNotFound
	}
	if tagged {
		known := s.jobs.queueSet.cached(tag)
		if q, err := s.holder(ctx, id, known); err == nil || !errors.Is(err, job.ErrNotFound) {
			return q, err
		}
		queues, err := s.jobs.queueSet.tagged(ctx, tag)
		if err != nil {
			return "", err
		}
		return s.holder(ctx, id, slices.DeleteFunc(queues, func(q string) bool { return slices.Contains(known, q) }))
	}
	queue, err := s.rdb.Get(ctx, s.keys.JobQueue(id)).Result()
	if err == nil {
		return queue, nil
	}
	if !errors.Is(err, redis.Nil) {
		return "", fmt.Errorf("job: locate %s: %w", id, err)
	}
	queues, err := s.queues(ctx)
	if err != nil {
		return "", err
	}
	return s.holder(ctx, id, queues)
}

// withQueue runs read on the queue of job id and returns that queue. It
// tries the one queue this Store knows of the id's tag first, with no
// search: a job read by id costs the read alone. When read finds no job
// there (found false), or the tag has no one known queue, it reads where
// locate finds the job; ErrNotFound when read finds none there either.
func (s *Store) withQueue(ctx context.Context, id string, read func(queue string) (found bool, err error)) (string, error) {
	if tag, tagged, _, ok := jobid.Parse(id); ok && tagged {
		if known := s.jobs.queueSet.cached(tag); len(known) == 1 {
			if found, err := read(known[0]); found || err != nil {
				return known[0], err
			}
		}
	}
	queue, err := s.locate(ctx, id)
	if err != nil {
		return "", err
	}
	found, err := read(queue)
	if err == nil && !found {
		err = job.ErrNotFound
	}
	return queue, err
}

// laneOf returns the queue of job id, the owner the scripts match the
// job's tenant against (ownerOf) and the job's lane (scripts.Lane), which a
// script on the job takes through KEYS. A job's kind and keys never
// change, so reading them first races with nothing.
func (s *Store) laneOf(ctx context.Context, tenant, id string, admin bool) (queue, owner, lane string, err error) {
	if owner, err = ownerOf(tenant, admin); err != nil {
		return "", "", "", err
	}
	queue, err = s.withQueue(ctx, id, func(queue string) (bool, error) {
		f, err := s.hashFields(ctx, owner, queue, id, "concurrency_keys", "kind")
		if err != nil {
			return false, fmt.Errorf("job: %s: %w", id, err)
		}
		keys, _ := f[0].(string)
		kind, _ := f[1].(string)
		lane = scripts.Lane(kind, keys)
		return f[0] != nil, nil
	})
	return queue, owner, lane, err
}

// holder returns the one of queues that holds job id, asking them all in
// one round trip; ErrNotFound when none does. A packed job (scripts.Pack)
// has its folded key alone.
func (s *Store) holder(ctx context.Context, id string, queues []string) (string, error) {
	if len(queues) == 0 {
		return "", job.ErrNotFound
	}
	exists := make([]*redis.IntCmd, len(queues))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, q := range queues {
			exists[i] = p.Exists(ctx, s.keys.Job(q, id), s.keys.JobFolded(q, id))
		}
		return nil
	}); err != nil {
		return "", fmt.Errorf("job: locate %s: %w", id, err)
	}
	for i, q := range queues {
		if exists[i].Val() > 0 {
			return q, nil
		}
	}
	return "", job.ErrNotFound
}

// verdict is the reply of a script that acts on one job: {outcome} or
// {outcome, value}, value the job's record (HGETALL) or a count.
type verdict struct {
	outcome string
	value   any // nil when the reply has none
}

// decodeVerdict reads such a reply, checking its length and types: a
// script and its caller that disagree return an error, never a panic.
func decodeVerdict(v any) (verdict, error) {
	list, ok := v.([]any)
	if !ok || len(list) < 1 || len(list) > 2 {
		return verdict{}, fmt.Errorf("job: script reply %v: want {outcome} or {outcome, value}", v)
	}
	outcome, ok := list[0].(string)
	if !ok {
		return verdict{}, fmt.Errorf("job: script reply's outcome is a %T", list[0])
	}
	r := verdict{outcome: outcome}
	if len(list) == 2 {
		r.value = list[1]
	}
	return r, nil
}

// job parses the record of job id of queue that r carries.
func (r verdict) job(queue, id string) (job.Job, error) { return parseReply(queue, id, r.value) }

// count returns the count that r carries.
func (r verdict) count() (int64, error) {
	n, ok := r.value.(int64)
	if !ok {
		return 0, fmt.Errorf("job: script reply %q carries %T, want a count", r.outcome, r.value)
	}
	return n, nil
}

// parseReply parses the hash of job id of queue that a script returned as
// HGETALL's flat field, value list.
func parseReply(queue, id string, v any) (job.Job, error) {
	flat, ok := v.([]any)
	if !ok || len(flat)%2 != 0 {
		return job.Job{}, fmt.Errorf("job: unexpected script reply %T", v)
	}
	h := make(map[string]string, len(flat)/2)
	for i := 0; i < len(flat); i += 2 {
		k, _ := flat[i].(string)
		h[k], _ = flat[i+1].(string)
	}
	return job.ParseRecord(queue, id, h)
}

// millis converts d to whole milliseconds, rounding up so that no positive
// duration becomes 0 (which would mean "none" or "unlimited").
func millis(d job.Duration) int64 {
	return int64((time.Duration(d) + time.Millisecond - 1) / time.Millisecond)
}
