package execution

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/store/scripts"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/ratelimit/usage"
	"github.com/redis/go-redis/v9"
)

var finishScript = scripts.Load("execution_finish.lua", "fair.lua", "stats.lua", "finished.lua", "states.lua", "transition.lua", "signal.lua")

// usageDay names the usage day the queue's claims and finishes count in
// now, and when its counts are dropped (unix ms; "" when the worker counts
// no usage: see Config.Usage), as the scripts take them.
func (q *queue) usageDay() (key string, dropAt any) {
	now := time.Now()
	if q.usageTTL == 0 {
		return q.keys.QueueUsage(q.name, now), ""
	}
	return q.keys.QueueUsage(q.name, now), usage.DropAt(now, q.usageTTL).UnixMilli()
}

// finishing is one execution's finish, and what came of it.
type finishing struct {
	e     *Execution
	o     outcome
	state job.State
	err   error
	done  chan struct{} // closed once state or err is set
}

// finishBatch is the finishes of one queue, written by one finish script.
type finishBatch struct {
	fs  []*finishing
	a   scripts.Args
	run *scripts.Queued
}

func newFinishBatch(q *queue, fs []*finishing) *finishBatch {
	day, drop := q.usageDay()
	b := &finishBatch{
		fs: fs,
		a: scripts.Args{
			Keys: []string{q.keys.QueueLeases(q.name), q.keys.QueueReady(q.name), q.keys.QueueScheduled(q.name),
				q.keys.QueueFair(q.name), q.keys.QueueStats(q.name), q.keys.QueueRetired(q.name)},
			Argv: []any{q.retention.Milliseconds(), scripts.EventsMaxLen, len(fs), drop},
		},
	}
	for _, f := range fs {
		id := f.e.JobID
		b.a.Keys = append(b.a.Keys, q.keys.Job(q.name, id), q.keys.JobEvents(q.name, id), q.keys.QueueLane(q.name, f.e.lane))
	}
	b.a.Keys = append(b.a.Keys, day, q.keys.QueueWebhooks(q.name))
	for _, f := range fs {
		var errJSON []byte
		if f.o.err != nil {
			errJSON, _ = json.Marshal(f.o.err) // a struct of two strings always marshals
		}
		retry := "0"
		if f.o.retryable {
			retry = "1"
		}
		backoff := max(q.backoff(f.e.attempt), f.o.minBackoff)
		if f.o.state == StatePushback {
			backoff = f.o.minBackoff // the script backs off when the upstream did not say
		}
		var waitFor string
		var waitMS int64
		if w := f.o.wait; w != nil {
			waitFor, waitMS = w.For, w.Timeout.Milliseconds()
		}
		b.a.Argv = append(b.a.Argv, f.e.JobID, f.e.token.String(), f.e.attempt, string(f.o.state), f.o.result, errJSON, retry,
			backoff.Milliseconds(), f.e.traceparent(), f.e.ID, waitFor, waitMS)
	}
	return b
}

// settlement is what f's end settles of key's budget: the upstream served
// it, refused it for capacity (a pushback that concerns key), or neither (a
// failure, a cancel, another key's pushback).
func (f *finishing) settlement(key string) store.LeaseSettlement {
	s := store.LeaseSettlement{Holder: f.e.ID, Outcome: store.LeaseOther, Tokens: f.e.tokens(), Estimate: f.e.cost}
	switch {
	case f.o.unrun:
		s.Outcome = store.LeaseUnused // no request started: it leaves the window
	case f.o.state == StateSucceeded:
		s.Outcome = store.LeaseOK
	case f.o.pushedBackOn(key):
		s.Outcome, s.RetryAfter = store.LeasePushback, f.o.minBackoff
	}
	return s
}

// finishAll records how each execution of fs ended and releases its leases,
// if it still owns its job: one script per queue, all of them in one round
// trip (a pipeline, split per node on a cluster). Each gets the job's new
// state, or ErrNotOwner, or the error that kept it from being written.
// The slots of their concurrency keys are released in the same round trip,
// whatever the finish finds: the handlers have stopped, and a release
// removes only the execution's own member. (A key's lease set is in a slot
// of its own, so this cannot be one atomic step with the finish; a worker
// that dies between the two leaves the slots to expire with their TTL.)
func finishAll(ctx context.Context, rdb redis.UniversalClient, fs []*finishing) {
	byQueue := map[*queue][]*finishing{}
	for _, f := range fs {
		byQueue[f.e.q] = append(byQueue[f.e.q], f)
	}
	var batches []*finishBatch
	for q, fs := range byQueue {
		batches = append(batches, newFinishBatch(q, fs))
	}
	type settling struct {
		q   *queue
		key string
		ss  []store.LeaseSettlement
		run *store.LeaseSettling
	}
	var settlings []*settling
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, b := range batches {
			b.run = finishScript.In(ctx, p, rdb, b.a)
		}
		for q, fs := range byQueue {
			held := map[string][]store.LeaseSettlement{}
			for _, f := range fs {
				for _, k := range f.e.keys {
					held[k] = append(held[k], f.settlement(k))
				}
			}
			for k, ss := range held {
				if run := q.releaseIn(ctx, p, k, ss); run != nil {
					settlings = append(settlings, &settling{q, k, ss, run})
				}
			}
		}
		return nil
	})
	for _, s := range settlings {
		// A settlement lost leaves the estimates standing until the window
		// forgets them, and the slots to expire with their TTL.
		b := s.q.limits.budgetOf(s.key)
		_, err := s.run.Settled(ctx)
		s.q.metrics.settled(ctx, s.key, b, s.ss, err)
	}
	for _, b := range batches {
		states, err := b.run.Reply(ctx).StringSlice()
		if err == nil && len(states) != len(b.fs) {
			err = fmt.Errorf("%d states in the reply, want %d", len(states), len(b.fs))
		}
		for i, f := range b.fs {
			switch {
			case err != nil:
				f.err = fmt.Errorf("finish %s: %w", f.e.JobID, err)
			case states[i] == "":
				f.err = ErrNotOwner
			default:
				f.state = job.State(states[i])
			}
		}
	}
}
