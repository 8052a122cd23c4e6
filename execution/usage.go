package execution

import (
	"context"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/leasehold/leasehold/ratelimit/usage"
)

// usageTimeout bounds one usage write: it is bookkeeping, and must not hold
// an execution's slot for long.
const usageTimeout = 2 * time.Second

// usageCounter counts executions in their tenants' usage: one start per
// execution claimed, one outcome per execution whose finish was accepted
// or that a claim found lost. The execution id is the event id, so a count
// written twice (a claim's reply resent, two reapers) adds once. A failed
// write is logged and changes nothing else: usage never fails a job. A nil
// *usageCounter counts nothing.
type usageCounter struct {
	c   *usage.Counters
	log *slog.Logger
}

func (u *usageCounter) add(ctx context.Context, tenant, counter, execID string) {
	u.addAt(ctx, tenant, counter, execID, time.Now())
}

// addAt counts event id, which happened at at.
func (u *usageCounter) addAt(ctx context.Context, tenant, counter, id string, at time.Time) {
	if u == nil {
		return
	}
	ctx, stop := context.WithTimeout(context.WithoutCancel(ctx), usageTimeout)
	defer stop()
	if _, err := u.c.Add(ctx, tenant, counter, 1, id, at); err != nil {
		u.log.WarnContext(ctx, "usage not counted", "counter", counter, "tenant", tenant, "event_id", id, "error", err)
	}
}

// jobTime is when job id was made: the time of its UUIDv7, within a
// millisecond of its created_at; now for an id that has none.
func jobTime(id string) time.Time {
	u, err := uuid.Parse(id)
	if err != nil || u.Version() != 7 {
		return time.Now()
	}
	sec, nsec := u.Time().UnixTime()
	return time.Unix(sec, nsec)
}

// ended counts the end of an execution with outcome. The nil check comes
// first: naming the counter allocates, on every execution.
func (u *usageCounter) ended(ctx context.Context, tenant, outcome, execID string) {
	if u == nil {
		return
	}
	u.add(ctx, tenant, usage.ExecutionsEnded(outcome), execID)
}

// lost counts the executions a claim found lost: its script's list of
// execution id, tenant and the job's new state, flat. Each one's start is
// counted again too: that adds nothing when its worker counted it, and
// makes up for a worker that died between its claim and its count.
func (u *usageCounter) lost(ctx context.Context, list []lostExecution) {
	for _, e := range list {
		u.add(ctx, e.tenant, usage.ExecutionsStarted, e.id)
		u.ended(ctx, e.tenant, string(StateLost), e.id)
	}
}
