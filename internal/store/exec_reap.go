package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store/scripts"
)

var (
	peekScript = scripts.Load("execution_peek.lua", "fair.lua")
	reapScript = scripts.Load("execution_reap.lua", "fair.lua", "batch.lua", "stats.lua", "finished.lua", "states.lua",
		"transition.lua", "signal.lua", "due.lua")
)

// DueBatch bounds each kind of due work one finding returns (and one
// claim does), so that its cost stays bounded however large the backlog.
const DueBatch = 64

// DueJob is a job with due work, and its lane ("" for a job gone).
type DueJob struct{ ID, Lane string }

// DueWork is the due work of a queue, each list at most DueBatch long.
// What it says of a job is a hint: each duty checks the job again.
type DueWork struct {
	Lost    []DueJob // running jobs whose execution's lease expired: their owner is gone
	Retries []DueJob // scheduled jobs now due: delayed jobs, retries after their backoff
	Waits   []DueJob // waiting jobs whose wait timed out
	Overdue []DueJob // jobs past their max_wait
	Retired []string // terminal jobs past their retention
	// Full says a kind of due work filled its batch: there may be more.
	Full bool
}

// FindDue finds the due work of queue, reading only: one round trip for
// the due sets (the peek script, asked for no lane), and one more for the
// state and lane of the jobs they name, if any.
func (s *Store) FindDue(ctx context.Context, queue string) (DueWork, error) {
	reply, err := peekScript.RunArgs(ctx, s.rdb, scripts.Args{Keys: s.peekKeys(queue), Argv: []any{0, DueBatch}}).Slice()
	if err == nil && len(reply) != 5 {
		err = fmt.Errorf("%d values in the reply, want 5 lists", len(reply))
	}
	var lists [5][]string
	for i := range lists {
		if err == nil {
			lists[i], err = StringList(reply[i])
		}
	}
	if err != nil {
		return DueWork{}, fmt.Errorf("store: find due work of %s: %w", queue, err)
	}
	scheduled, lost, overdue, retired := lists[1], lists[2], lists[3], lists[4]
	w := DueWork{Retired: retired}
	for _, l := range lists[1:] {
		w.Full = w.Full || len(l) == DueBatch
	}
	ids := make([]string, 0, len(scheduled)+len(lost)+len(overdue))
	for _, l := range [][]string{scheduled, lost, overdue} {
		ids = append(ids, l...)
	}
	if len(ids) == 0 {
		return w, nil
	}
	fields := make(map[string]*redis.SliceCmd, len(ids))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, id := range ids {
			if fields[id] == nil {
				fields[id] = p.HMGet(ctx, s.keys.Job(queue, id), "state", "kind", "concurrency_keys")
			}
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return DueWork{}, fmt.Errorf("store: find due work of %s: %w", queue, err)
	}
	dueJob := func(id string) (DueJob, string) {
		f := fields[id].Val()
		state, _ := f[0].(string)
		kind, _ := f[1].(string)
		keys, _ := f[2].(string)
		if keys == "" {
			return DueJob{ID: id}, state // the job is gone: no lane
		}
		return DueJob{ID: id, Lane: scripts.Lane(kind, keys)}, state
	}
	for _, id := range scheduled {
		j, state := dueJob(id)
		if state == "waiting" {
			w.Waits = append(w.Waits, j)
		} else {
			w.Retries = append(w.Retries, j)
		}
	}
	for _, id := range lost {
		j, _ := dueJob(id)
		w.Lost = append(w.Lost, j)
	}
	for _, id := range overdue {
		j, _ := dueJob(id)
		w.Overdue = append(w.Overdue, j)
	}
	return w, nil
}

// peekKeys returns the peek script's KEYS (see execution_peek.lua).
func (s *Store) peekKeys(queue string) []string {
	return []string{s.keys.QueueReady(queue), s.keys.QueueScheduled(queue), s.keys.QueueLeases(queue),
		s.keys.QueueDeadlines(queue), s.keys.QueueRetired(queue)}
}

// DueParams is how a queue's due work is done.
type DueParams struct {
	Queue string
	// Retention is how long a job that turns terminal is kept.
	Retention time.Duration
	// Backoff is the wait before retrying a job whose lease expired.
	Backoff time.Duration
	// UsageDropAt is when today's usage counts of the queue are dropped;
	// zero: executions are not counted.
	UsageDropAt time.Time
}

// RescueLost finalises the executions of jobs whose lease expired: their
// owner is gone. Each job is retried (spending the attempt), fails on its
// last attempt, or, when a cancel was requested, is cancelled. It returns
// how many leases had expired. One round trip.
func (s *Store) RescueLost(ctx context.Context, p DueParams, jobs []DueJob) (int, error) {
	n, _, err := s.reap(ctx, "rescue", p, jobs, nil)
	return n, err
}

// PromoteDue makes ready the scheduled jobs of jobs whose time came: a
// delay or a retry's backoff. It returns how many it promoted. One round
// trip.
func (s *Store) PromoteDue(ctx context.Context, p DueParams, jobs []DueJob) (int, error) {
	n, _, err := s.reap(ctx, "promote", p, jobs, nil)
	return n, err
}

// TimeOutWaits makes ready the waiting jobs of jobs whose wait timed out:
// their next execution is told so. It returns how many it woke. One round
// trip. (A scheduled job is promoted by what it is when the script runs:
// PromoteDue and TimeOutWaits differ in the jobs FindDue gives each.)
func (s *Store) TimeOutWaits(ctx context.Context, p DueParams, jobs []DueJob) (int, error) {
	n, _, err := s.reap(ctx, "promote", p, jobs, nil)
	return n, err
}

// ExpireOverdue ends as expired the jobs of jobs that waited past their
// max_wait without starting, and returns the lane of each. One round trip.
func (s *Store) ExpireOverdue(ctx context.Context, p DueParams, jobs []DueJob) ([]string, error) {
	_, lanes, err := s.reap(ctx, "expire", p, jobs, nil)
	return lanes, err
}

// DeleteRetired deletes the terminal jobs of ids whose retention ended:
// their records, events, folded keys and listing entries, their retained
// bytes given back. It returns how many it deleted. Two round trips: the
// jobs' tenants, which name their listing entries, then the deletion.
func (s *Store) DeleteRetired(ctx context.Context, p DueParams, ids []string) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	tenants, err := s.tenantsOf(ctx, p.Queue, ids)
	if err != nil {
		return 0, fmt.Errorf("store: delete retired jobs of %s: %w", p.Queue, err)
	}
	n, _, err := s.reap(ctx, "delete", p, nil, &retiring{ids, tenants})
	return n, err
}

// retiring is the jobs a deletion takes, and each one's tenant.
type retiring struct{ ids, tenants []string }

// tenantsOf reads the tenant of each job of ids, whose listing entry (the
// tenant's index) goes with its record, in one step (scripts.ReadTenant,
// in a transaction); "" for a record already gone.
func (s *Store) tenantsOf(ctx context.Context, queue string, ids []string) ([]string, error) {
	reads := make([]scripts.TenantRead, len(ids))
	if _, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for k, id := range ids {
			reads[k] = scripts.ReadTenant(ctx, p, s.keys.Job(queue, id), s.keys.JobFolded(queue, id))
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("tenants of retired jobs: %w", err)
	}
	tenants := make([]string, len(ids))
	for k, r := range reads {
		tenants[k] = r.Tenant()
	}
	return tenants, nil
}

// reap runs the reap script's duty for jobs (or, for "delete", the jobs
// of retire) and returns its reply: how many jobs it changed, and the
// lanes of those it expired.
func (s *Store) reap(ctx context.Context, duty string, p DueParams, jobs []DueJob, retire *retiring) (int, []string, error) {
	if len(jobs) == 0 && retire == nil {
		return 0, nil, nil
	}
	res, err := reapScript.RunArgs(ctx, s.rdb, s.reapArgs(duty, p, jobs, retire)).Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("%d values in the reply, want 2", len(res))
	}
	var n int64
	var lanes []string
	if err == nil {
		var ok bool
		if n, ok = res[0].(int64); !ok {
			err = fmt.Errorf("a count of %T", res[0])
		} else {
			lanes, err = StringList(res[1])
		}
	}
	if err != nil {
		return 0, nil, fmt.Errorf("store: %s due jobs of %s: %w", duty, p.Queue, err)
	}
	return int(n), lanes, nil
}

// reapArgs lays out the reap script's KEYS and ARGV: the one place in Go
// that knows that layout, which the header of scripts/execution_reap.lua
// documents: change the two together.
func (s *Store) reapArgs(duty string, p DueParams, jobs []DueJob, retire *retiring) scripts.Args {
	q, now := p.Queue, time.Now()
	var drop any = ""
	if !p.UsageDropAt.IsZero() {
		drop = p.UsageDropAt.UnixMilli()
	}
	// KEYS[1..9], ARGV[1..5]
	a := scripts.Args{
		Keys: []string{s.keys.QueueScheduled(q), s.keys.QueueLeases(q), s.keys.QueueDeadlines(q), s.keys.QueueFair(q),
			s.keys.QueueReady(q), s.keys.QueueStats(q), s.keys.QueueRetired(q), s.keys.QueueUsage(q, now),
			s.keys.QueueWebhooks(q)},
		Argv: []any{duty, p.Retention.Milliseconds(), scripts.EventsMaxLen, p.Backoff.Milliseconds(), drop},
	}
	if retire != nil {
		// KEYS[10 + 5(k - 1) ..] and ARGV[5 + k] of job k
		for k, id := range retire.ids {
			a.Keys = append(a.Keys, s.keys.Job(q, id), s.keys.JobEvents(q, id), s.keys.QueueTenantJobs(q, retire.tenants[k]),
				s.keys.JobFolded(q, id), s.keys.QueueRetained(q, retire.tenants[k]))
			a.Argv = append(a.Argv, id)
		}
		return a
	}
	// KEYS[7 + 3k .. 9 + 3k], ARGV[4 + 2k], ARGV[5 + 2k] of job k
	for _, j := range jobs {
		a.Keys = append(a.Keys, s.keys.Job(q, j.ID), s.keys.JobEvents(q, j.ID), s.keys.QueueLane(q, j.Lane))
		a.Argv = append(a.Argv, j.ID, j.Lane)
	}
	return a
}

// StringList decodes a script reply's list of strings.
func StringList(v any) ([]string, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%T, want a list", v)
	}
	out := make([]string, len(list))
	for i, e := range list {
		if out[i], ok = e.(string); !ok {
			return nil, fmt.Errorf("%T in a list of strings", e)
		}
	}
	return out, nil
}
