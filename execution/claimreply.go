package execution

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/job"
)

// peekReply is the peek script's reply (see execution_peek.lua): the work
// a claim may do, each list at most dueBatch long but heads.
type peekReply struct {
	heads     []string // lanes at the head of the ready set, best first
	scheduled []string // scheduled jobs now due
	expired   []string // jobs whose execution's lease expired
	overdue   []string // jobs past their max_wait
	retired   []string // terminal jobs past their retention
}

// decodePeek reads the peek script's reply, checking its length and every
// value's type: a script and its caller that disagree return an error,
// never a panic.
func decodePeek(res []any) (peekReply, error) {
	if len(res) != 5 {
		return peekReply{}, fmt.Errorf("peek reply of %d values: want 5 lists", len(res))
	}
	var out peekReply
	var errs [5]error
	for i, dst := range []*[]string{&out.heads, &out.scheduled, &out.expired, &out.overdue, &out.retired} {
		*dst, errs[i] = store.StringList(res[i])
	}
	if err := errors.Join(errs[:]...); err != nil {
		return peekReply{}, fmt.Errorf("peek reply: %w", err)
	}
	return out, nil
}

// due returns the jobs with due work, each once: those past their
// max_wait, then those whose lease expired, then the scheduled ones due.
func (p peekReply) due() []string {
	seen := map[string]bool{}
	var ids []string
	for _, list := range [][]string{p.overdue, p.expired, p.scheduled} {
		for _, id := range list {
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// full says a kind of due work filled its batch: there may be more of it.
func (p peekReply) full() bool {
	return len(p.scheduled) == dueBatch || len(p.expired) == dueBatch || len(p.overdue) == dueBatch ||
		len(p.retired) == dueBatch
}

// claimReply is the claim script's reply (see execution_claim.lua).
type claimReply struct {
	blocked []string         // lanes left waiting for a full key
	expired []string         // the lane of each job expired at max_wait
	costs   map[string]int64 // lane -> the cost of its last job read that had reserved tokens
	jobs    []claimedJob
}

// claimedJob is one job the claim handed out.
type claimedJob struct {
	id, execID   string
	token        fencing.Token
	attempt      int
	kind, tenant string
	input        json.RawMessage
	timeout      time.Duration
	// the traceparents of the job's submit span and of its last finished
	// execution ("" or nil when there is none)
	trace, prevTrace any
	resume           Resume
}

// decodeClaim reads the claim script's reply, checking every length and
// type: a script and its caller that disagree return an error, never a
// panic or a job run with half its fields.
func decodeClaim(res []any) (claimReply, error) {
	var out claimReply
	if len(res) < 3 || (len(res)-3)%claimedJobFields != 0 {
		return out, fmt.Errorf("claim reply of %d values: want 3 lists and %d values per job", len(res), claimedJobFields)
	}
	blocked, err1 := store.StringList(res[0])
	expired, err2 := store.StringList(res[1])
	costs, err3 := store.StringList(res[2])
	if err := errors.Join(err1, err2, err3); err != nil {
		return out, fmt.Errorf("claim reply: %w", err)
	}
	if len(costs)%2 != 0 {
		return out, fmt.Errorf("claim reply: %d values of costs, want 2 each", len(costs))
	}
	out.blocked, out.expired = blocked, expired
	for i := 0; i < len(costs); i += 2 {
		if out.costs == nil {
			out.costs = map[string]int64{}
		}
		out.costs[costs[i]], _ = strconv.ParseInt(costs[i+1], 10, 64) // "" or "0" for a job without one
	}
	for f := res[3:]; len(f) > 0; f = f[claimedJobFields:] {
		j, err := decodeClaimedJob(f[:claimedJobFields])
		if err != nil {
			return out, fmt.Errorf("claim reply: job %d: %w", len(out.jobs)+1, err)
		}
		out.jobs = append(out.jobs, j)
	}
	return out, nil
}

// claimedJobFields is how many values the claim script returns per job.
const claimedJobFields = 12

func decodeClaimedJob(f []any) (claimedJob, error) {
	id, ok1 := f[0].(string)
	execID, ok2 := f[1].(string)
	token, ok3 := f[2].(int64)
	attempt, ok4 := f[3].(int64)
	kind, ok5 := f[4].(string)
	input, ok6 := f[5].(string)
	timeout, ok7 := f[6].(string)
	tenant, ok8 := f[7].(string)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7 && ok8) {
		return claimedJob{}, fmt.Errorf("a value of the wrong type in %v", f)
	}
	checkpoint, ok9 := f[10].(string)
	signal, ok10 := f[11].(string)
	if !(ok9 && ok10) {
		return claimedJob{}, fmt.Errorf("a value of the wrong type in %v", f)
	}
	ms, err := strconv.ParseInt(timeout, 10, 64)
	if err != nil || ms < 0 {
		return claimedJob{}, fmt.Errorf("job %s has a bad timeout %q", id, timeout)
	}
	j := claimedJob{id: id, execID: execID, token: fencing.Token(token), attempt: int(attempt), kind: kind,
		tenant: tenant, input: json.RawMessage(input), timeout: time.Duration(ms) * time.Millisecond,
		trace: f[8], prevTrace: f[9]}
	if checkpoint != "" {
		j.resume.Checkpoint = json.RawMessage(checkpoint)
	}
	if signal != "" {
		j.resume.Signal = &job.Signal{}
		if err := json.Unmarshal([]byte(signal), j.resume.Signal); err != nil {
			return claimedJob{}, fmt.Errorf("job %s has a bad signal %q: %w", id, signal, err)
		}
	}
	return j, nil
}
