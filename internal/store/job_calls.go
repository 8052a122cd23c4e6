package store

import (
	"github.com/leasehold/leasehold/job"

	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/store/scripts"
	"github.com/leasehold/leasehold/internal/telemetry"
)

// submitCall creates items, all of queue, for tenant (job_submit.lua),
// counted on the usage day of at, kept usageTTL after it. room is how
// many of the tenant's jobs not ended queue may hold before the first item
// ("" for no cap); quota how many bytes they may be charged ("" for no
// quota).
type submitCall struct {
	tenant, queue, room, quota string
	at                         time.Time
	usageTTL                   time.Duration
	items                      []*submitting
}

func (c submitCall) layout(ks keys.Space) scripts.Args {
	q := c.queue
	a := scripts.Args{Keys: make([]string, 0, 8+5*len(c.items)), Argv: make([]any, 0, 5+17*len(c.items))}
	a.Keys = append(a.Keys, ks.QueueReady(q), ks.QueueScheduled(q), ks.QueueDeadlines(q),
		ks.QueueFair(q), ks.QueueStats(q), ks.QueueTenantJobs(q, c.tenant), ks.QueueUsage(q, c.at),
		ks.QueueRetained(q, c.tenant))
	a.Argv = append(a.Argv, c.tenant, scripts.EventsMaxLen, c.room, UsageDropAt(c.at, c.usageTTL).UnixMilli(), c.quota)
	for _, p := range c.items {
		n, id := p.n, p.id
		a.Keys = append(a.Keys, ks.Job(q, id), ks.JobEvents(q, id), ks.QueueLane(q, p.lane), ks.JobDeleted(q, id),
			ks.JobFolded(q, id))
		a.Argv = append(a.Argv,
			id, n.Kind, n.Priority, n.MaxAttempts, p.keys, []byte(n.Input), []byte(n.Metadata),
			millis(n.Timeout), millis(n.MaxWait), string(n.OnBusy), millis(n.Delay), p.trace, nonce(p),
			n.Schedule, cost(p.tokens), n.Webhook.Address(), flag(p.replay()))
	}
	return a
}

// nonce tells the submit script's run of item p from another's: go-redis
// resends a script whose reply it lost, and the resend finds the job it
// created. Two runs create under one id only when their items share an
// idempotency key (a replay, and a first request that failed before it
// created the job): an item without a key, whose id no other run knows,
// needs none ("").
func nonce(p *submitting) string {
	if p.idem == "" {
		return ""
	}
	return uuid.NewString()
}

// created is the job that the script created as item p of c at createdAt
// (Redis ms, its reply): what ParseRecord reads of the new job's hash. It
// is built here, beside layout, so that the script need not send a new
// job's fields back, and directly, not through the map of strings that
// HGETALL would read; TestSubmitBatchAnswersTheJobsRecords holds the two
// to the same job.
func (c submitCall) created(p *submitting, createdAt string) (job.Job, error) {
	ms, err := strconv.ParseInt(createdAt, 10, 64)
	if err != nil {
		return job.Job{}, fmt.Errorf("job: record %s: field created_at: %w", p.id, err)
	}
	n := p.n
	j := job.Job{
		ID: p.id, Tenant: c.tenant, Queue: c.queue, Kind: n.Kind, State: job.StateQueued,
		MaxAttempts: n.MaxAttempts, Priority: n.Priority, ConcurrencyKeys: n.ConcurrencyKeys,
		CreatedAt: time.UnixMilli(ms).UTC(), Input: n.Input, Metadata: n.Metadata,
		// What the hash holds: whole milliseconds.
		Timeout: time.Duration(millis(n.Timeout)) * time.Millisecond, MaxWait: time.Duration(millis(n.MaxWait)) * time.Millisecond,
		OnBusy: n.OnBusy, Trace: telemetry.Decode(p.trace),
	}
	if n.Schedule != "" {
		name := n.Schedule
		j.Schedule = &name
	}
	if p.tokens != 0 {
		j.Cost = &job.Cost{Tokens: p.tokens}
	}
	if url := n.Webhook.Address(); url != "" {
		j.Webhook = &job.Webhook{URL: url, State: job.WebhookPending, Tries: []job.WebhookTry{}}
	}
	return j, nil
}

// cancelCall cancels job id of queue, whose lane is lane, for owner (""
// for an admin) (job_cancel.lua); a job it ends is kept for retention.
type cancelCall struct {
	queue, id, lane, owner string
	retention              time.Duration
}

func (c cancelCall) layout(ks keys.Space) scripts.Args {
	q, id := c.queue, c.id
	return scripts.Args{
		Keys: []string{ks.Job(q, id), ks.QueueReady(q), ks.QueueScheduled(q), ks.QueueDeadlines(q),
			ks.QueueStats(q), ks.JobEvents(q, id), ks.QueueFair(q), ks.QueueLane(q, c.lane), ks.QueueRetired(q),
			ks.QueueWebhooks(q), ks.JobFolded(q, id)},
		Argv: []any{c.owner, c.retention.Milliseconds(), scripts.EventsMaxLen, id},
	}
}

// signalCall sends the signal name with data to job id of queue, whose
// lane is lane, for owner (job_signal.lua).
type signalCall struct {
	queue, id, lane, owner, name string
	data                         []byte
}

func (c signalCall) layout(ks keys.Space) scripts.Args {
	q, id := c.queue, c.id
	return scripts.Args{
		Keys: []string{ks.Job(q, id), ks.QueueReady(q), ks.QueueScheduled(q), ks.QueueStats(q),
			ks.JobEvents(q, id), ks.QueueFair(q), ks.QueueLane(q, c.lane), ks.QueueRetired(q), ks.JobFolded(q, id)},
		Argv: []any{c.owner, c.name, c.data, scripts.EventsMaxLen, job.MaxKeptSignals, job.MaxKeptSignalBytes, id},
	}
}

// retryCall retries jobs ids of queue, whose lanes (their concurrency keys
// as stored) are lanes, for owner, under room (retryRoom; 0 = no cap)
// (job_retry.lua); with records, each reply carries the job's record.
type retryCall struct {
	queue, owner string
	room         int64
	ids, lanes   []string
	records      bool
}

func (c retryCall) layout(ks keys.Space) scripts.Args {
	q := c.queue
	room := "" // no cap
	if c.room > 0 {
		room = strconv.FormatInt(c.room, 10)
	}
	a := scripts.Args{
		Keys: append(make([]string, 0, 5+4*len(c.ids)),
			ks.QueueReady(q), ks.QueueFair(q), ks.QueueStats(q), ks.QueueRetired(q), ks.QueueDeadlines(q)),
		Argv: append(make([]any, 0, 4+len(c.ids)), c.owner, scripts.EventsMaxLen, flag(c.records), room),
	}
	for i, id := range c.ids {
		a.Keys = append(a.Keys, ks.Job(q, id), ks.JobEvents(q, id), ks.QueueLane(q, c.lanes[i]), ks.JobFolded(q, id))
		a.Argv = append(a.Argv, id)
	}
	return a
}

// deleteCall deletes the ended job id of queue, whose tenant is tenant,
// for owner, and marks it deleted for idemTTL (job_delete.lua).
type deleteCall struct {
	queue, id, tenant, owner string
	idemTTL                  time.Duration
}

func (c deleteCall) layout(ks keys.Space) scripts.Args {
	q, id := c.queue, c.id
	return scripts.Args{
		Keys: []string{ks.Job(q, id), ks.JobEvents(q, id), ks.QueueRetired(q), ks.QueueTenantJobs(q, c.tenant),
			ks.JobDeleted(q, id), ks.JobFolded(q, id), ks.QueueRetained(q, c.tenant)},
		Argv: []any{id, c.owner, c.idemTTL.Milliseconds()},
	}
}

// followCall gives job id of queue its stream (job_follow.lua).
type followCall struct{ queue, id string }

func (c followCall) layout(ks keys.Space) scripts.Args {
	return scripts.Args{Keys: []string{ks.Job(c.queue, c.id), ks.JobEvents(c.queue, c.id)}}
}

// unpackCall writes job id of queue back as it was before it was packed,
// to be packed again at repack (job_unpack.lua): value is the packed
// value read, and p its content.
type unpackCall struct {
	queue, id string
	value     []byte
	p         scripts.Packed
	repack    time.Time
}

func (c unpackCall) layout(ks keys.Space) scripts.Args {
	a := scripts.Args{Keys: []string{ks.Job(c.queue, c.id), ks.JobFolded(c.queue, c.id), ks.QueueFoldLater(c.queue)},
		Argv: make([]any, 0, 4+2*len(c.p.Hash))}
	a.Argv = append(a.Argv, c.value, []byte(c.p.Folded), c.id, c.repack.UnixMilli())
	for _, name := range slices.Sorted(maps.Keys(c.p.Hash)) {
		a.Argv = append(a.Argv, name, c.p.Hash[name])
	}
	return a
}

// layouter is a params struct of a script call.
type layouter interface{ layout(keys.Space) scripts.Args }

// run runs script with the KEYS and ARGV c lays out (runArgs).
func (s *Store) run(ctx context.Context, script *scripts.Script, c layouter) *redis.Cmd {
	return s.runArgs(ctx, script, c.layout(s.keys))
}

// unpackTries bounds the runs of a script that finds packed jobs: each is
// unpacked before the next, so only a reaper packing them again at once
// (it packs a job once, a minute after it ended) takes a second.
const unpackTries = 3

// runArgs runs script with a. A script that finds packed jobs where it
// needs their fields (scripts.PackedKeys) has written nothing: they are
// unpacked, and it runs again.
func (s *Store) runArgs(ctx context.Context, script *scripts.Script, a scripts.Args) *redis.Cmd {
	for try := 1; ; try++ {
		cmd := script.RunArgs(ctx, s.rdb, a)
		at, packed := scripts.PackedKeys(cmd.Err())
		if !packed || try == unpackTries {
			return cmd
		}
		for _, k := range at {
			if k[0] > len(a.Keys) {
				return cmd
			}
			queue, id, ok := s.keys.JobOf(a.Keys[k[0]-1])
			if !ok {
				return cmd
			}
			if err := s.unpackJob(ctx, "", queue, id); err != nil {
				cmd.SetErr(err)
				return cmd
			}
		}
	}
}

// repackAfter is how long an unpacked job stays unpacked, at least: the
// reaper's fold packs it again after (job_unpack.lua), unless it changed.
// A job is unpacked to be written, or read by a script that may write it
// (a cancel, a signal, a replay), which clients repeat in bursts.
const repackAfter = time.Minute

// unpackJob writes job id of queue back as it was before it was packed
// (job_unpack.lua), if it still is and is owner's ("" for any tenant's):
// another tenant's call leaves it packed.
func (s *Store) unpackJob(ctx context.Context, owner, queue, id string) error {
	folded := s.keys.JobFolded(queue, id)
	value, err := s.rdb.Get(ctx, folded).Bytes()
	if errors.Is(err, redis.Nil) || (err == nil && !scripts.IsPacked(value)) {
		return nil // not packed, unpacked since, or no job
	}
	if err != nil {
		return fmt.Errorf("job: unpack: %w", err)
	}
	if tenant, _ := scripts.PackedTenant(value); owner != "" && tenant != owner {
		return nil
	}
	p, err := scripts.Unpack(value)
	if err != nil {
		return fmt.Errorf("job: %s: %w", folded, err)
	}
	c := unpackCall{queue: queue, id: id, value: value, p: p, repack: time.Now().Add(repackAfter)}
	if err := s.run(ctx, jobUnpackScript, c).Err(); err != nil {
		return fmt.Errorf("job: unpack: %w", err)
	}
	return nil
}
