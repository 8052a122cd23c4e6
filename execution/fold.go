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
// keep its stream. A job whose webhook delivery is pending is passed over
// into the queue's fold_later set, which each fold looks at again too: up
// to foldBatch of its jobs due, each folded once its delivery has ended.
// It reports whether there may be more.
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
	now := time.Now()
	upto := now.Add(q.retention - after).UnixMilli()
	retiredKey, laterKey := q.keys.QueueRetired(q.name), q.keys.QueueFoldLater(q.name)
	var retiredCmd *redis.ZSliceCmd
	var laterCmd *redis.StringSliceCmd
	if _, err := q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		retiredCmd = p.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: retiredKey,
			Start: q.folds.from, Stop: upto, ByScore: true, Offset: q.folds.skip, Count: foldBatch})
		laterCmd = p.ZRangeArgs(ctx, redis.ZRangeArgs{Key: laterKey,
			Start: "-inf", Stop: now.UnixMilli(), ByScore: true, Count: foldBatch})
		return nil
	}); err != nil {
		return false, fmt.Errorf("fold %s: %w", q.name, err)
	}
	retired, later := retiredCmd.Val(), laterCmd.Val()
	if len(retired) == 0 && len(later) == 0 {
		return false, nil
	}
	last := "0" // no job of the retired index's: the stored score stands
	if len(retired) > 0 {
		last = strconv.FormatFloat(retired[len(retired)-1].Score, 'f', 0, 64)
	}
	keys := []string{stats, retiredKey, laterKey}
	args := []any{last, upto, after.Milliseconds()}
	add := func(id string) {
		keys = append(keys, q.keys.Job(q.name, id), q.keys.JobEvents(q.name, id), q.keys.JobFolded(q.name, id))
		args = append(args, id)
	}
	for _, z := range retired {
		add(z.Member.(string))
	}
	for _, id := range later {
		add(id)
	}
	from, err := foldScript.Run(ctx, q.rdb, keys, args...).Text()
	if err != nil {
		return false, fmt.Errorf("fold %s: %w", q.name, err)
	}
	if len(retired) == 0 {
		return len(later) == foldBatch, nil
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
	return len(retired) == foldBatch || len(later) == foldBatch, nil
}

// folds is where a queue's next fold starts: the retired score from, past
// skip jobs of that score already taken.
type folds struct {
	from string // "" before the first fold reads it from the stats hash
	skip int64
}
