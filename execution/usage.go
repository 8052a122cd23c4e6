package execution

import (
	"context"
	"log/slog"
	"time"

	"github.com/leasehold/leasehold/internal/jobid"
	"github.com/leasehold/leasehold/ratelimit/usage"
)

// usageTimeout bounds one usage write: it is bookkeeping, and must not hold
// the counting of the events after it for long.
const usageTimeout = 2 * time.Second

// usageBatch is the most events one write counts.
const usageBatch = 512

// usageCounter counts executions in their tenants' usage: one start per
// execution claimed, one outcome per execution whose finish was accepted
// or that a claim found lost. The execution id is the event id, so a count
// written twice (a claim's reply resent, two reapers) adds once. A failed
// write is logged and changes nothing else: usage never fails a job. A nil
// *usageCounter counts nothing.
//
// The counts are written by run, in batches of what came while the last
// write was out: one script per tenant and counter, all in one round
// trip, which counts the events of a day in a few commands (a count per
// event, three per execution, cost Redis more commands than the execution
// itself).
type usageCounter struct {
	c       *usage.Counters
	log     *slog.Logger
	events  chan usageEvent
	stopped chan struct{} // closed when run has returned
}

// usageEvent is one event to count.
type usageEvent struct {
	tenant, counter string
	event           usage.Event
}

// open readies u for a run of its worker's (Run), before anything counts.
func (u *usageCounter) open() {
	u.events, u.stopped = make(chan usageEvent, usageBatch), make(chan struct{})
}

func (u *usageCounter) add(ctx context.Context, tenant, counter, execID string) {
	u.addAt(ctx, tenant, counter, execID, time.Now())
}

// addAt counts event id, which happened at at. It waits only while the
// counts waiting to be written are a full batch already, whatever ctx (an
// execution's, cancelled or not: its outcome still counts).
func (u *usageCounter) addAt(ctx context.Context, tenant, counter, id string, at time.Time) {
	if u == nil {
		return
	}
	select {
	case u.events <- usageEvent{tenant: tenant, counter: counter, event: usage.Event{ID: id, At: at}}:
	case <-u.stopped:
		u.log.WarnContext(ctx, "usage not counted: the worker has stopped", "counter", counter, "tenant", tenant, "event_id", id)
	}
}

// run writes the counts as they come until ctx is done, then those still
// waiting, and returns. It runs as long as executions may end (the
// worker's background context).
func (u *usageCounter) run(ctx context.Context) error {
	defer close(u.stopped)
	for {
		var batch []usageEvent
		select {
		case e := <-u.events:
			batch = append(batch, e)
		case <-ctx.Done():
		}
	more:
		for len(batch) < usageBatch {
			select {
			case e := <-u.events:
				batch = append(batch, e)
			default:
				break more
			}
		}
		if len(batch) > 0 {
			u.write(ctx, batch)
		} else if ctx.Err() != nil {
			return nil // done, and nothing is left to write
		}
	}
}

// write counts batch: one script per tenant and counter, in one round trip.
func (u *usageCounter) write(ctx context.Context, batch []usageEvent) {
	type group struct{ tenant, counter string }
	groups := map[group][]usage.Event{}
	for _, e := range batch {
		g := group{e.tenant, e.counter}
		groups[g] = append(groups[g], e.event)
	}
	ctx, stop := context.WithTimeout(context.WithoutCancel(ctx), usageTimeout)
	defer stop()
	adds := make([]usage.Add, 0, len(groups))
	for g, events := range groups {
		adds = append(adds, usage.Add{Tenant: g.tenant, Counter: g.counter, N: 1, Events: events})
	}
	for i, err := range u.c.AddAll(ctx, adds) {
		if err != nil {
			u.log.WarnContext(ctx, "usage not counted", "counter", adds[i].Counter, "tenant", adds[i].Tenant,
				"events", len(adds[i].Events), "error", err)
		}
	}
}

// jobTime is when job id was made: the time in its UUID, within a
// millisecond of its created_at; now for an id that has none.
func jobTime(id string) time.Time {
	if _, _, at, ok := jobid.Parse(id); ok {
		return at
	}
	return time.Now()
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
