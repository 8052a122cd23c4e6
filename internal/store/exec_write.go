package store

import (
	"context"
	"fmt"

	"github.com/leasehold/leasehold/internal/store/scripts"
)

var (
	checkpointScript = scripts.Load("execution_checkpoint.lua")
	emitScript       = scripts.Load("execution_emit.lua", "states.lua")
)

// SaveCheckpoint saves data as the checkpoint of queue's job run by e. It
// returns false, writing nothing, when e no longer owns the job (another
// token or execution, the job not running, the lease expired). One round
// trip.
func (s *Store) SaveCheckpoint(ctx context.Context, queue string, e RunningExecution, data []byte) (bool, error) {
	ok, err := checkpointScript.Run(ctx, s.rdb, []string{s.keys.Job(queue, e.JobID), s.keys.QueueLeases(queue)},
		e.JobID, e.Token.String(), e.ID, data).Int()
	if err != nil {
		return false, fmt.Errorf("store: checkpoint %s: %w", e.JobID, err)
	}
	return ok == 1, nil
}

// EmitEvent appends an event of type typ (progress, output, log) and data
// (JSON) to the stream of queue's job run by e. It returns false, writing
// nothing, when e no longer owns the job. One round trip.
func (s *Store) EmitEvent(ctx context.Context, queue string, e RunningExecution, typ string, data []byte) (bool, error) {
	id, err := emitScript.Run(ctx, s.rdb, []string{s.keys.Job(queue, e.JobID), s.keys.JobEvents(queue, e.JobID)},
		e.Token.String(), typ, data, scripts.EventsMaxLen, e.ID).Text()
	if err != nil {
		return false, fmt.Errorf("store: emit %s: %w", e.JobID, err)
	}
	return id != "", nil
}
