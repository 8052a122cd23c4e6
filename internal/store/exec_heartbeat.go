package store

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/store/scripts"
)

var heartbeatScript = scripts.Load("execution_heartbeat.lua")

// RunningExecution is an execution that holds its job's lease: its job,
// its id and fencing token, and the concurrency keys it holds a slot of.
type RunningExecution struct {
	JobID string
	ID    string
	Token fencing.Token
	Keys  []string
}

// ExecutionStatus is what a heartbeat learned of one execution.
type ExecutionStatus int

const (
	// ExecutionLost: its lease, or a slot of one of its keys, is gone or
	// someone else's; it must stop now.
	ExecutionLost ExecutionStatus = iota
	// ExecutionHeld: its lease and slots are renewed.
	ExecutionHeld
	// ExecutionCancelRequested: renewed, and a cancel of its job was
	// requested.
	ExecutionCancelRequested
)

// HeartbeatParams is one renewal of a queue's running executions.
type HeartbeatParams struct {
	Queue      string
	TTL        time.Duration // the leases' new length
	Executions []RunningExecution
}

// HeartbeatExecutions renews the leases of p's executions and reads their
// jobs' cancel state (one script), then renews the slots they hold of
// their concurrency keys (one script per key, in the keys' own slots): two
// round trips. It returns each execution's status, in p's order. An
// execution that lost a slot of a key has lost its lease: the slot may be
// someone else's now.
func (s *Store) HeartbeatExecutions(ctx context.Context, p HeartbeatParams) ([]ExecutionStatus, error) {
	held := map[string][]string{}
	for _, e := range p.Executions {
		for _, k := range e.Keys {
			held[k] = append(held[k], e.ID)
		}
	}
	res, err := heartbeatScript.RunArgs(ctx, s.rdb, s.heartbeatArgs(p)).Int64Slice()
	if err == nil && len(res) != len(p.Executions) {
		err = fmt.Errorf("%d values in the reply, want %d", len(res), len(p.Executions))
	}
	if err != nil {
		return nil, fmt.Errorf("store: heartbeat %s: %w", p.Queue, err)
	}
	gone, err := s.RenewLeases(ctx, p.TTL, held)
	if err != nil {
		return nil, fmt.Errorf("store: heartbeat %s: %w", p.Queue, err)
	}
	lost := map[string]bool{}
	for _, ids := range gone {
		for _, id := range ids {
			lost[id] = true
		}
	}
	out := make([]ExecutionStatus, len(res))
	for i, r := range res {
		out[i] = ExecutionStatus(r)
		if r < int64(ExecutionLost) || r > int64(ExecutionCancelRequested) || lost[p.Executions[i].ID] {
			out[i] = ExecutionLost
		}
	}
	return out, nil
}

// heartbeatArgs lays out the heartbeat script's KEYS and ARGV: the one
// place in Go that knows that layout, which the header of
// scripts/execution_heartbeat.lua documents: change the two together.
func (s *Store) heartbeatArgs(p HeartbeatParams) scripts.Args {
	a := scripts.Args{Keys: make([]string, 0, 1+len(p.Executions)), Argv: make([]any, 0, 1+3*len(p.Executions))}
	// KEYS[1], ARGV[1]
	a.Keys = append(a.Keys, s.keys.QueueLeases(p.Queue))
	a.Argv = append(a.Argv, p.TTL.Milliseconds())
	// KEYS[1+i] and ARGV[3i-1 .. 3i+1] of execution i (1..n)
	for _, e := range p.Executions {
		a.Keys = append(a.Keys, s.keys.Job(p.Queue, e.JobID))
		a.Argv = append(a.Argv, e.JobID, e.Token.String(), e.ID)
	}
	return a
}
