package execution

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/scripts"
)

var foldScript = scripts.Load("job_fold.lua", "stats.lua", "finished.lua", "transition.lua")

// DefaultFoldAfter is the default Config.FoldAfter.
const DefaultFoldAfter = time.Minute

// foldBatch bounds the jobs one fold script takes.
const foldBatch = 100

// fold folds up to foldBatch of the queue's jobs that ended at least after
// ago (internal/scripts/job_fold.lua): each one's events and long fields
// go to its folded key and its hash is written anew, a listpack; it keeps
// none of a stream's preallocated node, and half the bytes a field. It
// takes them from the retired index, whose score is a job's end plus the
// retention, after the score the queue's jobs are folded up to; a job
// retired with a shorter retention than this worker's may be passed and
// keep its stream. It reports whether there may be more.
//
// A reader of an ended job's events finds them in the stream or, once
// folded, in its folded key (job.Store.Events). after keeps the fold away
// from the readers that wait for a job's next events: they wait for a job
// that has not ended, and the step that ends it appends its last event,
// so they have it long before.
func (q *queue) fold(ctx context.Context, after time.Duration) (bool, error) {
	stats := q.keys.QueueStats(q.name)
	if q.folds.from == "" {
		from, err := q.rdb.HGet(ctx, stats, "folded_to").Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return false, fmt.Errorf("fold %s: %w", q.name, err)
		}
		q.folds.from = cmp.Or(from, "-inf")
	}
	upto := time.Now().Add(q.retention - after).UnixMilli()
	retired, err := q.rdb.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: q.keys.QueueRetired(q.name),
		Start: q.folds.from, Stop: upto, ByScore: true, Offset: q.folds.skip, Count: foldBatch}).Result()
	if err != nil || len(retired) == 0 {
		return false, err
	}
	keys := []string{stats}
	for _, z := range retired {
		id := z.Member.(string)
		keys = append(keys, q.keys.Job(q.name, id), q.keys.JobEvents(q.name, id), q.keys.JobFolded(q.name, id))
	}
	last := strconv.FormatFloat(retired[len(retired)-1].Score, 'f', 0, 64)
	from, err := foldScript.Run(ctx, q.rdb, keys, last).Text()
	if err != nil {
		return false, fmt.Errorf("fold %s: %w", q.name, err)
	}
	// Jobs retired in the same millisecond share a score: the next batch
	// starts at the last one's, past those of it already taken.
	ties := int64(0)
	for _, z := range retired {
		if strconv.FormatFloat(z.Score, 'f', 0, 64) == last {
			ties++
		}
	}
	if last == q.folds.from {
		q.folds.skip += ties
	} else {
		q.folds.from, q.folds.skip = last, ties
	}
	if from != last { // another reaper is further on
		q.folds.from, q.folds.skip = from, 0
	}
	return len(retired) == foldBatch, nil
}

// folds is where a queue's next fold starts: the retired score from, past
// skip jobs of that score already taken.
type folds struct {
	from string // "" before the first fold reads it from the stats hash
	skip int64
}
