package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNoQueue: no queue of that name has received a job or been paused.
var ErrNoQueue = errors.New("job: no such queue")

// FinishedMinutes is how many minutes Finished reports: the last hour,
// the current minute last.
const FinishedMinutes = 60

// Minute counts the jobs of a queue that ended in one minute, by the state
// they ended in.
type Minute struct {
	At        time.Time // the minute's start, UTC
	Succeeded int64
	Failed    int64
	Cancelled int64
	Expired   int64
}

// MarshalJSON writes the API's minute object.
func (m Minute) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		At        stamp `json:"at"`
		Succeeded int64 `json:"succeeded"`
		Failed    int64 `json:"failed"`
		Cancelled int64 `json:"cancelled"`
		Expired   int64 `json:"expired"`
	}{stamp(m.At), m.Succeeded, m.Failed, m.Cancelled, m.Expired})
}

// Finished returns, for each of the last FinishedMinutes minutes of the
// Redis clock (oldest first, the current one last), how many of queue's
// jobs ended in it, by outcome. The scripts that end jobs count them in
// the queue's stats hash in the same step (internal/store/scripts/finished.lua),
// so every API replica reads the same counts. They are of every tenant.
func (s *Store) Finished(ctx context.Context, queue string) ([]Minute, error) {
	if ValidateQueue(queue) != nil {
		return nil, ErrNoQueue
	}
	var known *redis.BoolCmd
	var now *redis.TimeCmd
	var ring *redis.MapStringStringCmd
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		known = p.SIsMember(ctx, s.keys.Queues(), queue)
		now = p.Time(ctx)
		ring = p.HGetAll(ctx, s.keys.QueueStats(queue))
		return nil
	}); err != nil {
		return nil, fmt.Errorf("job: finished of %s: %w", queue, err)
	}
	if !known.Val() {
		return nil, ErrNoQueue
	}
	h := ring.Val()
	last := now.Val().Unix() / 60
	minutes := make([]Minute, FinishedMinutes)
	for i := range minutes {
		m := last - FinishedMinutes + 1 + int64(i)
		minutes[i].At = time.Unix(m*60, 0).UTC()
		slot := "m" + strconv.FormatInt(m%60, 10)
		if h[slot] != strconv.FormatInt(m, 10) {
			continue // nothing ended in m: the slot is empty or holds an older minute
		}
		for state, n := range map[State]*int64{StateSucceeded: &minutes[i].Succeeded, StateFailed: &minutes[i].Failed,
			StateCancelled: &minutes[i].Cancelled, StateExpired: &minutes[i].Expired} {
			*n, _ = strconv.ParseInt(h[slot+":"+string(state)], 10, 64) // absent: 0
		}
	}
	return minutes, nil
}
