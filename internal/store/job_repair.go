package store

import (
	"github.com/leasehold/leasehold/job"

	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/jobid"
	"github.com/leasehold/leasehold/internal/store/scripts"
)

const (
	// scanChunk is how many ended jobs a bulk retry reads per round.
	scanChunk = 500
	// retryScanMax is the most index entries one RetryAll call reads.
	retryScanMax = 20 * scanChunk
)

// retryChunk is how many jobs one run of the retry script moves at most,
// so a bulk retry never holds Redis for long.
const retryChunk = 100

// Retry puts the ended job id of tenant (admin: of any tenant) back in its
// queue: a failed, cancelled or expired job becomes queued, keeping its id,
// events and last execution. It gets its original max_attempts more
// attempts (MaxAttempts becomes its Attempt plus that), and its next
// execution is the attempt after its last one: attempt numbers never go
// back. No cancel request, its max_wait counting from now; its next
// execution gets a higher fencing token from the queue's counter. Any other state is returned with ErrNotRetryable.
//
// A job cancelled while it ran left a cancel flag, which would stop the
// next execution at once: Retry deletes the flag first, while the job is
// still cancelled (nothing sets a flag on a job that is not running), then
// moves the job.
func (s *Store) Retry(ctx context.Context, tenant, id string, admin bool) (job.Job, error) {
	return s.RetryWithin(ctx, tenant, id, admin, job.Cap{})
}

// RetryWithin is Retry under limit, a cap on tenant's jobs not ended, which
// a retry counts against like a submission (SubmitWithin): a retry that
// would take the tenant past limit.Max is refused with a *CapError and
// moves nothing, as is one of a tenant at or past limit.MaxBytes, with a
// *QuotaError. The job's queue is counted in the script that moves the
// job; the other queues are read before, as for a submission. The admin's
// retries are not capped.
func (s *Store) RetryWithin(ctx context.Context, tenant, id string, admin bool, limit job.Cap) (job.Job, error) {
	queue, owner, err := s.find(ctx, tenant, id, admin)
	if err != nil {
		return job.Job{}, err
	}
	// The script takes the job's lane through KEYS; a job's kind, keys and
	// tenant never change, so reading them first races with nothing.
	f, err := s.hashFields(ctx, owner, queue, id, "state", "concurrency_keys", "tenant", "kind")
	if err != nil {
		return job.Job{}, fmt.Errorf("job: retry %s: %w", id, err)
	}
	state, _ := f[0].(string)
	keys, _ := f[1].(string)
	kind, _ := f[3].(string)
	lane := scripts.Lane(kind, keys)
	if state == "" || (owner != "" && f[2] != owner) {
		return job.Job{}, job.ErrNotFound
	}
	var room int64
	if !admin {
		if room, _, err = s.retryRoom(ctx, owner, queue, limit); err != nil {
			return job.Job{}, err
		}
	}
	if job.State(state) == job.StateCancelled {
		if err := s.ClearCancels(ctx, id); err != nil {
			return job.Job{}, fmt.Errorf("job: retry %s: %w", id, err)
		}
	}
	res, err := s.runRetry(ctx, queue, owner, room, []string{id}, []string{lane}, true)
	if err != nil {
		return job.Job{}, err
	}
	r, err := decodeVerdict(res[0])
	if err != nil {
		return job.Job{}, fmt.Errorf("job: retry %s: %w", id, err)
	}
	switch r.outcome {
	case "missing":
		return job.Job{}, job.ErrNotFound
	case "capped":
		return job.Job{}, capped(limit, room, r)
	}
	j, err := r.job(queue, id)
	if err != nil {
		return job.Job{}, err
	}
	if r.outcome != "retried" {
		return j, job.ErrNotRetryable
	}
	return j, nil
}

// find returns the queue of job id, and the owner the scripts match the
// job's tenant against: tenant, or "" for the admin, who acts on every
// tenant's jobs.
func (s *Store) find(ctx context.Context, tenant, id string, admin bool) (queue, owner string, err error) {
	if owner, err = ownerOf(tenant, admin); err != nil {
		return "", "", err
	}
	queue, err = s.locate(ctx, id)
	return queue, owner, err
}

// ownerOf returns the owner the scripts match a job's tenant against:
// tenant, or "" for the admin. An invalid tenant owns nothing: "" would
// mean any tenant to the scripts.
func ownerOf(tenant string, admin bool) (string, error) {
	if admin {
		return "", nil
	}
	if job.ValidateTenant(tenant) != nil {
		return "", job.ErrNotFound
	}
	return tenant, nil
}

// retryRoom returns room, how many of tenant's jobs not ended queue may
// hold under limit: limit.Max less those of limit's other queues, read now
// (the retry script counts queue's own with its moves); 0 when there is no
// cap. free is how many more it may hold as read now (room less its own).
// The tenant at the cap already is a *CapError; at or past its quota of
// bytes, a *QuotaError.
func (s *Store) retryRoom(ctx context.Context, tenant, queue string, limit job.Cap) (room, free int64, err error) {
	if err := s.overQuota(ctx, tenant, queue, limit); err != nil {
		return 0, 0, err
	}
	if limit.Max <= 0 {
		return 0, 0, nil
	}
	counts, err := s.unended(ctx, tenant, append(slices.Clone(limit.Queues), queue))
	if err != nil {
		return 0, 0, err
	}
	room = limit.Max
	for q, n := range counts {
		if q != queue {
			room -= n
		}
	}
	if free = room - counts[queue]; free <= 0 {
		return 0, 0, &job.CapError{Jobs: limit.Max - free, Max: limit.Max}
	}
	return room, free, nil
}

// capped is the *CapError of the retry script's reply r, {'capped', n}:
// queue held n of the tenant's jobs not ended, room under limit.
func capped(limit job.Cap, room int64, r verdict) error {
	n, err := r.count()
	if err != nil {
		return err
	}
	return &job.CapError{Jobs: limit.Max - room + n, Max: limit.Max}
}

// runRetry runs the retry script on jobs ids of queue, whose lanes (their
// concurrency keys as stored) are lanes, under room (retryRoom; 0 = no
// cap), and returns its reply: per job {outcome} or, with records,
// {outcome, HGETALL}.
func (s *Store) runRetry(ctx context.Context, queue, owner string, room int64, ids, lanes []string, records bool) ([]any, error) {
	res, err := s.run(ctx, jobRetryScript, retryCall{queue: queue, owner: owner, room: room, ids: ids, lanes: lanes, records: records}).Slice()
	if err != nil {
		return nil, fmt.Errorf("job: retry in %s: %w", queue, err)
	}
	if len(res) != len(ids) {
		return nil, fmt.Errorf("job: retry in %s: %d replies for %d jobs", queue, len(res), len(ids))
	}
	return res, nil
}

// retryLockTTL is how long a bulk retry's lock lives when its context has
// no deadline; with one, the lock lives until it and a second more. A
// process that dies holding it blocks its tenant's bulk retries no longer.
const retryLockTTL = 2 * time.Minute

// retryPosition is where a bulk retry stands: the Redis time its first
// call began (it moves only jobs that had ended by then), the queue it is
// in, which of the queue's indexes it scans ('r' the retired set, 't' the
// tenant's) and the ZSCAN cursor of the page it reads next.
type retryPosition struct {
	asOf  int64
	queue string
	index byte
	scan  uint64
}

func (p retryPosition) cursor() string {
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "%d:%c:%d:%s", p.asOf, p.index, p.scan, p.queue))
}

func parseRetryCursor(c string) (retryPosition, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	parts := strings.SplitN(string(b), ":", 4)
	if err != nil || len(parts) != 4 || len(parts[1]) != 1 || job.ValidateQueue(parts[3]) != nil {
		return retryPosition{}, job.ErrBadCursor
	}
	p := retryPosition{index: parts[1][0], queue: parts[3]}
	p.asOf, err = strconv.ParseInt(parts[0], 10, 64)
	scan, serr := strconv.ParseUint(parts[2], 10, 64)
	if err != nil || serr != nil || p.asOf <= 0 || (p.index != 'r' && p.index != 't') {
		return retryPosition{}, job.ErrBadCursor
	}
	p.scan = scan
	return p, nil
}

// RetryAll retries the ended jobs that f selects, as Retry does one, at
// most f.Max of them (RetryPageMax) and reading at most retryScanMax
// index entries, and says where to continue. A bulk retry moves only the
// jobs that had ended when its first call began (by their finished_at on
// the Redis clock): a job it moved that ends again is not moved twice,
// and running it again after it finished moves nothing more.
//
// One bulk retry per caller (each tenant, and the admin) runs at a time,
// on any number of API processes: a lock in Redis, held for the call and
// expiring with its context's deadline. A second call meanwhile gets
// ErrRetryRunning.
//
// A tenant's retries count like submissions: each run of the retry
// script moves no more than f.Cap has room for, counted in the script as
// RetryWithin does, and than f.Admit grants. When either stops the call,
// it ends there with Next; if it had moved nothing, it returns why (a
// *CapError, or what Admit returned).
//
// It reads each queue's ended jobs (its retired set, or the tenant's
// index when that is smaller), scanChunk at a time. Cancelled jobs lose
// their cancel flags first, as in Retry.
func (s *Store) RetryAll(ctx context.Context, f job.RetryFilter) (job.RetryPage, error) {
	page := job.RetryPage{Moved: map[string]int{}}
	if err := f.Validate(); err != nil {
		return page, err
	}
	var at retryPosition
	if f.Cursor != "" {
		var err error
		if at, err = parseRetryCursor(f.Cursor); err != nil {
			return page, err
		}
	}
	if f.State == "" {
		f.State = job.StateFailed
	}
	if f.Max <= 0 || f.Max > job.RetryPageMax {
		f.Max = job.RetryPageMax
	}
	caller := f.Tenant
	if f.Admin {
		caller = "admin" // the admin tenant's name: no other tenant has it
	}
	unlock, err := s.lockRetry(ctx, caller)
	if err != nil {
		return page, err
	}
	defer unlock()
	if at.asOf == 0 {
		now, err := s.rdb.Time(ctx).Result()
		if err != nil {
			return page, fmt.Errorf("job: retry: %w", err)
		}
		at.asOf = now.UnixMilli()
	}
	queues := []string{f.Queue}
	if f.Queue == "" {
		if queues, err = s.queues(ctx); err != nil {
			return page, err
		}
	}
	owner := ""
	if !f.Admin {
		owner = f.Tenant
	}
	moved, read := 0, 0
	for _, q := range queues {
		if q < at.queue {
			continue // done in an earlier call
		}
		if q != at.queue {
			at = retryPosition{asOf: at.asOf, queue: q}
			if at.index, err = s.endedIndex(ctx, q, f.Tenant); err != nil {
				return page, err
			}
		}
		index := s.keys.QueueRetired(q)
		if at.index == 't' {
			index = s.keys.QueueTenantJobs(q, f.Tenant)
		}
		for {
			if moved >= f.Max || read >= retryScanMax {
				page.Next = at.cursor()
				return page, nil
			}
			entries, next, err := s.rdb.ZScan(ctx, index, at.scan, "", scanChunk).Result()
			if err != nil {
				return page, fmt.Errorf("job: retry in %s: %w", q, err)
			}
			read += len(entries) / 2
			ids := make([]string, 0, len(entries)/2)
			for i := 0; i < len(entries); i += 2 { // member, score pairs
				ids = append(ids, entries[i])
			}
			n, cut, why, err := s.retryMatching(ctx, q, owner, f, at.asOf, ids, f.Max-moved)
			moved += n
			if n > 0 {
				page.Moved[q] += n
			}
			if err != nil {
				return page, err
			}
			if why != nil && moved == 0 {
				return page, why
			}
			if cut {
				// The rest of this page is read again next time: what
				// this call moved is no longer ended, so only the rest
				// moves then.
				page.Next = at.cursor()
				return page, nil
			}
			if at.scan = next; next == 0 {
				break
			}
		}
	}
	return page, nil
}

// lockRetry takes caller's bulk-retry lock and returns its release.
func (s *Store) lockRetry(ctx context.Context, caller string) (func(), error) {
	ttl := retryLockTTL
	if d, ok := ctx.Deadline(); ok {
		ttl = time.Until(d) + time.Second
	}
	key, token := s.keys.RetryLock(caller), uuid.NewString()
	ok, err := s.rdb.SetNX(ctx, key, token, ttl).Result()
	if err != nil {
		return nil, fmt.Errorf("job: retry: lock: %w", err)
	}
	if !ok {
		return nil, job.ErrRetryRunning
	}
	return func() {
		// The answer may already be lost; the release must still happen
		// (or the lock holds until its TTL).
		ctx, stop := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer stop()
		_ = unlockScript.Run(ctx, s.rdb, []string{key}, token).Err()
	}, nil
}

// endedIndex returns which sorted set to scan for queue's ended jobs of
// tenant ("" = every tenant): the retired set ('r') holds them all, but a
// tenant's index ('t') holds only its own, and is smaller when the tenant
// has few jobs.
func (s *Store) endedIndex(ctx context.Context, queue, tenant string) (byte, error) {
	if tenant == "" {
		return 'r', nil
	}
	var all, mine *redis.IntCmd
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		all, mine = p.ZCard(ctx, s.keys.QueueRetired(queue)), p.ZCard(ctx, s.keys.QueueTenantJobs(queue, tenant))
		return nil
	}); err != nil {
		return 0, fmt.Errorf("job: retry in %s: %w", queue, err)
	}
	if mine.Val() < all.Val() {
		return 't', nil
	}
	return 'r', nil
}

// retryMatching retries those of ids (jobs of queue) that f selects and
// that had ended by asOf, at most room of them, and returns how many
// moved and whether some that matched were left: for want of room, or
// because the tenant's cap or its rate stopped them (then why says so,
// when it can).
func (s *Store) retryMatching(ctx context.Context, queue, owner string, f job.RetryFilter, asOf int64, ids []string, room int) (moved int, cut bool, why, err error) {
	if len(ids) == 0 {
		return 0, false, nil, nil
	}
	names := []string{"tenant", "state", "kind", "concurrency_keys", "finished_at"}
	reads := make([]jobRead, len(ids))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			reads[i] = s.readJob(ctx, p, queue, id, names) // a packed job's too (values)
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) { // the GET of a job not folded
		return 0, false, nil, fmt.Errorf("job: retry in %s: %w", queue, err)
	}
	var match, lanes []string
	for i, r := range reads {
		v, _, _, torn, err := r.values()
		if err == nil && torn {
			v, err = s.hashFields(ctx, owner, queue, ids[i], names...)
		}
		if err != nil {
			return 0, false, nil, fmt.Errorf("job: retry in %s: %w", queue, err)
		}
		tenant, _ := v[0].(string)
		state, _ := v[1].(string)
		kind, _ := v[2].(string)
		keys, _ := v[3].(string)
		lane := scripts.Lane(kind, keys)
		finished, _ := v[4].(string)
		ended, err := strconv.ParseInt(finished, 10, 64)
		if err != nil || ended > asOf || state != string(f.State) || (f.Tenant != "" && tenant != f.Tenant) || (f.Kind != "" && kind != f.Kind) {
			continue
		}
		if len(match) == room {
			cut = true
			break
		}
		match = append(match, ids[i])
		lanes = append(lanes, lane)
	}
	for start := 0; start < len(match); start += retryChunk {
		chunk := min(retryChunk, len(match)-start)
		n, capRoom, stopped, err := s.admitRetries(ctx, queue, owner, f, chunk)
		if err != nil {
			return moved, false, nil, err
		}
		moving := match[start : start+n]
		if n > 0 && f.State == job.StateCancelled {
			if err := s.ClearCancels(ctx, moving...); err != nil {
				return moved, false, nil, fmt.Errorf("job: retry in %s: %w", queue, err)
			}
		}
		if n > 0 {
			res, err := s.runRetry(ctx, queue, owner, capRoom, moving, lanes[start:start+n], false)
			if err != nil {
				return moved, false, nil, err
			}
			for _, v := range res {
				r, err := decodeVerdict(v)
				if err != nil {
					return moved, false, nil, fmt.Errorf("job: retry in %s: %w", queue, err)
				}
				switch r.outcome {
				case "retried":
					moved++
				case "capped":
					stopped = capped(f.Cap, capRoom, r)
				}
			}
		}
		if stopped != nil || n < chunk {
			return moved, true, stopped, nil
		}
	}
	return moved, cut, nil, nil
}

// admitRetries returns how many of n jobs about to move into queue may:
// no more than the caller's cap had room for when read (the retry script
// counts again, with its moves) and than f.Admit grants, with the room to
// give the script (retryRoom); when fewer than n, why, if it can tell.
func (s *Store) admitRetries(ctx context.Context, queue, owner string, f job.RetryFilter, n int) (ok int, room int64, why, err error) {
	if owner != "" {
		var free int64
		room, free, err = s.retryRoom(ctx, owner, queue, f.Cap)
		if errors.Is(err, job.ErrOverCap) {
			return 0, 0, err, nil
		}
		if err != nil {
			return 0, 0, nil, err
		}
		if room > 0 {
			n = int(min(int64(n), free))
		}
	}
	if f.Admit != nil {
		granted, err := f.Admit(ctx, n)
		if granted < n {
			return max(0, granted), room, err, nil
		}
	}
	return n, room, nil, nil
}

// Delete deletes the ended job id of tenant (admin: of any tenant) with its
// input, result and events, and its index entries. A job that has not ended
// is returned with ErrNotEnded.
//
// The job's record, events and entries in its queue go in one script: from
// then on the job is gone for every reader. The script leaves a mark that
// lives IdempotencyTTL, so an idempotent replay of the submission that
// created the job gets ErrDeleted instead of a new run of it. A cancel
// flag it may have left (and the id → queue lookup of an id of version 7,
// see locate) live in other slots and go after; a crash
// in between leaves them pointing at nothing, which reads as not found,
// until they expire.
func (s *Store) Delete(ctx context.Context, tenant, id string, admin bool) (job.Job, error) {
	queue, owner, err := s.find(ctx, tenant, id, admin)
	if err != nil {
		return job.Job{}, err
	}
	// The tenant index is the job's tenant's; a job's tenant never
	// changes. A packed job is deleted as it is, not unpacked first.
	var read scripts.TenantRead
	if _, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		read = scripts.ReadTenant(ctx, p, s.keys.Job(queue, id), s.keys.JobFolded(queue, id))
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return job.Job{}, fmt.Errorf("job: delete %s: %w", id, err)
	}
	jobTenant := read.Tenant()
	if jobTenant == "" {
		return job.Job{}, job.ErrNotFound
	}
	res, err := s.run(ctx, jobDeleteScript, deleteCall{queue: queue, id: id, tenant: jobTenant, owner: owner, idemTTL: s.jobs.idemTTL}).Slice()
	if err != nil {
		return job.Job{}, fmt.Errorf("job: delete %s: %w", id, err)
	}
	r, err := decodeVerdict(res)
	if err != nil {
		return job.Job{}, fmt.Errorf("job: delete %s: %w", id, err)
	}
	switch r.outcome {
	case "missing":
		return job.Job{}, job.ErrNotFound
	case "live":
		j, err := r.job(queue, id)
		if err != nil {
			return job.Job{}, err
		}
		return j, job.ErrNotEnded
	}
	if _, tagged, _, _ := jobid.Parse(id); !tagged {
		// An id of version 7 has a lookup (see locate).
		if err := s.rdb.Del(ctx, s.keys.JobQueue(id)).Err(); err != nil {
			return job.Job{}, fmt.Errorf("job: delete %s: drop lookup: %w", id, err)
		}
	}
	if err := s.ClearCancels(ctx, id); err != nil {
		return job.Job{}, fmt.Errorf("job: delete %s: %w", id, err)
	}
	return job.Job{}, nil
}
