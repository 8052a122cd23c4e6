package job

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/scripts"
)

// retryChunk is how many jobs one run of the retry script moves at most,
// so a bulk retry never holds Redis for long.
const retryChunk = 100

// scanChunk is how many ended jobs a bulk retry reads per round.
const scanChunk = 500

// Retry puts the ended job id of tenant (admin: of any tenant) back in its
// queue: a failed, cancelled or expired job becomes queued, keeping its id,
// events and last execution. It gets its original max_attempts more
// attempts (MaxAttempts becomes the attempts spent plus that), and its next
// execution is the attempt after the last one spent: attempt numbers never
// go back. No cancel request, its max_wait counting from now; its next
// execution gets a higher fencing token from the queue's counter. Any other state is returned with ErrNotRetryable.
//
// A job cancelled while it ran left a cancel flag, which would stop the
// next execution at once: Retry deletes the flag first, while the job is
// still cancelled (nothing sets a flag on a job that is not running), then
// moves the job.
func (s *Store) Retry(ctx context.Context, tenant, id string, admin bool) (Job, error) {
	queue, owner, err := s.find(ctx, tenant, id, admin)
	if err != nil {
		return Job{}, err
	}
	// The script takes the job's lane through KEYS; a job's keys and
	// tenant never change, so reading them first races with nothing.
	f, err := s.rdb.HMGet(ctx, s.keys.Job(queue, id), "state", "concurrency_keys", "tenant").Result()
	if err != nil {
		return Job{}, fmt.Errorf("job: retry %s: %w", id, err)
	}
	state, _ := f[0].(string)
	lane, _ := f[1].(string)
	if state == "" || (owner != "" && f[2] != owner) {
		return Job{}, ErrNotFound
	}
	if State(state) == StateCancelled {
		if err := s.rdb.Del(ctx, s.keys.CancelFlag(id)).Err(); err != nil {
			return Job{}, fmt.Errorf("job: retry %s: clear cancel flag: %w", id, err)
		}
	}
	res, err := s.runRetry(ctx, queue, owner, []string{id}, []string{lane}, true)
	if err != nil {
		return Job{}, err
	}
	r := res[0].([]any)
	if r[0] == "missing" {
		return Job{}, ErrNotFound
	}
	j, err := parseReply(r[1])
	if err != nil {
		return Job{}, err
	}
	if r[0] != "retried" {
		return j, ErrNotRetryable
	}
	return j, nil
}

// find returns the queue of job id, and the owner the scripts match the
// job's tenant against: tenant, or "" for the admin, who acts on every
// tenant's jobs.
func (s *Store) find(ctx context.Context, tenant, id string, admin bool) (queue, owner string, err error) {
	if !admin {
		if ValidateTenant(tenant) != nil {
			return "", "", ErrNotFound // "" would mean any tenant to the scripts
		}
		owner = tenant
	}
	queue, err = s.locate(ctx, id)
	return queue, owner, err
}

// runRetry runs the retry script on jobs ids of queue, whose lanes (their
// concurrency keys as stored) are lanes, and returns its reply: per job
// {outcome} or, with records, {outcome, HGETALL}.
func (s *Store) runRetry(ctx context.Context, queue, owner string, ids, lanes []string, records bool) ([]any, error) {
	keys := []string{s.keys.QueueReady(queue), s.keys.QueueFair(queue), s.keys.QueueStats(queue),
		s.keys.QueueRetired(queue), s.keys.QueueDeadlines(queue)}
	flag := "0"
	if records {
		flag = "1"
	}
	args := []any{owner, scripts.EventsMaxLen, flag}
	for i, id := range ids {
		keys = append(keys, s.keys.Job(queue, id), s.keys.JobEvents(queue, id), s.keys.QueueLane(queue, lanes[i]))
		args = append(args, id)
	}
	res, err := s.retry.Run(ctx, s.rdb, keys, args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("job: retry in %s: %w", queue, err)
	}
	if len(res) != len(ids) {
		return nil, fmt.Errorf("job: retry in %s: %d replies for %d jobs", queue, len(res), len(ids))
	}
	return res, nil
}

// RetryFilter selects the jobs RetryAll moves.
type RetryFilter struct {
	// Tenant is the caller, whose jobs are retried. With Admin it is a
	// filter instead: one tenant's jobs, or every tenant's when "".
	Tenant string
	Admin  bool
	State  State  // failed, cancelled or expired; "" = failed
	Kind   string // "" = any
	Queue  string // "" = every queue
	// Max bounds how many jobs one call moves; 0 = no bound. The call
	// stops once it moved Max.
	Max int
}

func (f RetryFilter) validate() error {
	var v ValidationError
	switch {
	case !f.Admin && ValidateTenant(f.Tenant) != nil:
		return ErrNotFound
	case f.Admin && f.Tenant != "" && ValidateTenant(f.Tenant) != nil:
		v.add("tenant", "must match %s", tenantPattern)
	}
	switch f.State {
	case "", StateFailed, StateCancelled, StateExpired:
	default:
		v.add("state", "must be failed, cancelled or expired")
	}
	if f.Kind != "" && !kindPattern.MatchString(f.Kind) {
		v.add("kind", "must match %s", kindPattern)
	}
	if f.Queue != "" && !queuePattern.MatchString(f.Queue) {
		v.add("queue", "must match %s", queuePattern)
	}
	return v.err()
}

// RetryAll retries every ended job that f selects, as Retry does one, and
// returns how many it moved in each queue (queues with none are left out).
// Running it again moves nothing more: the jobs it moved are queued, and
// it only moves ended ones. A job that ends again while it runs (retried,
// then failed at once) is not moved twice.
//
// It reads each queue's ended jobs (its retired set, or the tenant's
// index when that is smaller), scanChunk at a time: the work is linear in
// the jobs it reads, and each round is a few round trips. Cancelled jobs
// lose their cancel flags first, as in Retry.
func (s *Store) RetryAll(ctx context.Context, f RetryFilter) (map[string]int, error) {
	if err := f.validate(); err != nil {
		return nil, err
	}
	if f.State == "" {
		f.State = StateFailed
	}
	queues := []string{f.Queue}
	if f.Queue == "" {
		var err error
		if queues, err = s.queues(ctx); err != nil {
			return nil, err
		}
	}
	owner := ""
	if !f.Admin {
		owner = f.Tenant
	}
	moved := map[string]int{}
	seen := map[string]bool{}
	for _, q := range queues {
		index, err := s.endedIndex(ctx, q, f.Tenant)
		if err != nil {
			return moved, err
		}
		var cursor uint64
		for {
			var page []string
			page, cursor, err = s.rdb.ZScan(ctx, index, cursor, "", scanChunk).Result()
			if err != nil {
				return moved, fmt.Errorf("job: retry in %s: %w", q, err)
			}
			ids := make([]string, 0, len(page)/2)
			for i := 0; i < len(page); i += 2 { // member, score pairs
				if !seen[page[i]] {
					seen[page[i]] = true
					ids = append(ids, page[i])
				}
			}
			if f.Max > 0 {
				ids = ids[:min(len(ids), f.Max-total(moved))]
			}
			n, err := s.retryMatching(ctx, q, owner, f, ids)
			moved[q] += n
			if err != nil {
				return moved, err
			}
			if cursor == 0 || (f.Max > 0 && total(moved) >= f.Max) {
				break
			}
		}
		if moved[q] == 0 {
			delete(moved, q)
		}
		if f.Max > 0 && total(moved) >= f.Max {
			break
		}
	}
	return moved, nil
}

func total(moved map[string]int) int {
	n := 0
	for _, m := range moved {
		n += m
	}
	return n
}

// endedIndex returns the sorted set to scan for queue's ended jobs of
// tenant ("" = every tenant): the retired set holds them all, but a
// tenant's index holds only its own, and is smaller when the tenant has
// few jobs.
func (s *Store) endedIndex(ctx context.Context, queue, tenant string) (string, error) {
	retired := s.keys.QueueRetired(queue)
	if tenant == "" {
		return retired, nil
	}
	own := s.keys.QueueTenantJobs(queue, tenant)
	var all, mine *redis.IntCmd
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		all, mine = p.ZCard(ctx, retired), p.ZCard(ctx, own)
		return nil
	}); err != nil {
		return "", fmt.Errorf("job: retry in %s: %w", queue, err)
	}
	if mine.Val() < all.Val() {
		return own, nil
	}
	return retired, nil
}

// retryMatching retries those of ids (jobs of queue) that f selects, and
// returns how many moved.
func (s *Store) retryMatching(ctx context.Context, queue, owner string, f RetryFilter, ids []string) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	cmds := make([]*redis.SliceCmd, len(ids))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HMGet(ctx, s.keys.Job(queue, id), "tenant", "state", "kind", "concurrency_keys")
		}
		return nil
	}); err != nil {
		return 0, fmt.Errorf("job: retry in %s: %w", queue, err)
	}
	var match, lanes []string
	for i, cmd := range cmds {
		v := cmd.Val()
		tenant, _ := v[0].(string)
		state, _ := v[1].(string)
		kind, _ := v[2].(string)
		lane, _ := v[3].(string)
		if state == string(f.State) && (f.Tenant == "" || tenant == f.Tenant) && (f.Kind == "" || kind == f.Kind) {
			match = append(match, ids[i])
			lanes = append(lanes, lane)
		}
	}
	if len(match) > 0 && f.State == StateCancelled {
		if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, id := range match {
				p.Del(ctx, s.keys.CancelFlag(id))
			}
			return nil
		}); err != nil {
			return 0, fmt.Errorf("job: retry in %s: clear cancel flags: %w", queue, err)
		}
	}
	moved := 0
	for start := 0; start < len(match); start += retryChunk {
		end := min(start+retryChunk, len(match))
		res, err := s.runRetry(ctx, queue, owner, match[start:end], lanes[start:end], false)
		if err != nil {
			return moved, err
		}
		for _, r := range res {
			if r.([]any)[0] == "retried" {
				moved++
			}
		}
	}
	return moved, nil
}

// Delete deletes the ended job id of tenant (admin: of any tenant) with its
// input, result and events, and its index entries. A job that has not ended
// is returned with ErrNotEnded.
//
// The job's record, events and entries in its queue go in one script: from
// then on the job is gone for every reader. The script leaves a mark that
// lives IdempotencyTTL, so an idempotent replay of the submission that
// created the job gets ErrDeleted instead of a new run of it. Its id → queue lookup and a
// cancel flag it may have left live in other slots and go after; a crash
// in between leaves them pointing at nothing, which reads as not found,
// until they expire.
func (s *Store) Delete(ctx context.Context, tenant, id string, admin bool) (Job, error) {
	queue, owner, err := s.find(ctx, tenant, id, admin)
	if err != nil {
		return Job{}, err
	}
	// The tenant index is the job's tenant's; a job's tenant never changes.
	jobTenant, err := s.rdb.HGet(ctx, s.keys.Job(queue, id), "tenant").Result()
	if errors.Is(err, redis.Nil) {
		return Job{}, ErrNotFound
	}
	if err != nil {
		return Job{}, fmt.Errorf("job: delete %s: %w", id, err)
	}
	res, err := s.delete.Run(ctx, s.rdb, []string{
		s.keys.Job(queue, id), s.keys.JobEvents(queue, id), s.keys.QueueRetired(queue),
		s.keys.QueueTenantJobs(queue, jobTenant), s.keys.QueueAllJobs(queue), s.keys.JobDeleted(queue, id),
	}, id, owner, s.idemTTL.Milliseconds()).Slice()
	if err != nil {
		return Job{}, fmt.Errorf("job: delete %s: %w", id, err)
	}
	switch res[0] {
	case "missing":
		return Job{}, ErrNotFound
	case "live":
		j, err := parseReply(res[1])
		if err != nil {
			return Job{}, err
		}
		return j, ErrNotEnded
	}
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, s.keys.JobQueue(id))
		p.Del(ctx, s.keys.CancelFlag(id))
		return nil
	}); err != nil {
		return Job{}, fmt.Errorf("job: delete %s: drop lookup: %w", id, err)
	}
	return Job{}, nil
}
