package execution

import (
	"context"

	"github.com/leasehold/leasehold/internal/store"
)

// heartbeat renews every execution of execs (all of this queue): their
// leases and the slots of their keys (store.HeartbeatExecutions).
func (q *queue) heartbeat(ctx context.Context, execs []*Execution) ([]store.ExecutionStatus, error) {
	p := store.HeartbeatParams{Queue: q.name, TTL: q.ttl, Executions: make([]store.RunningExecution, len(execs))}
	for i, e := range execs {
		p.Executions[i] = e.owner()
	}
	return q.st.HeartbeatExecutions(ctx, p)
}

// checkpoint saves data as e's checkpoint, if e still owns its job.
func (q *queue) checkpoint(ctx context.Context, e *Execution, data []byte) error {
	ok, err := q.st.SaveCheckpoint(ctx, q.name, e.owner(), data)
	if err != nil {
		return err
	}
	if !ok {
		q.metrics.refusedWrite(ctx, q.name, "checkpoint")
		return ErrNotOwner
	}
	e.traceCheckpoint(len(data))
	return nil
}

// emit appends an event of type typ to e's job's stream, if e still owns
// its job.
func (q *queue) emit(ctx context.Context, e *Execution, typ string, data []byte) error {
	ok, err := q.st.EmitEvent(ctx, q.name, e.owner(), typ, data)
	if err != nil {
		return err
	}
	if !ok {
		q.metrics.refusedWrite(ctx, q.name, "emit")
		return ErrNotOwner
	}
	return nil
}
