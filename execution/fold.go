package execution

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store/scripts"
)

var (
	foldScript = scripts.Load("job_fold.lua", "stats.lua", "finished.lua", "states.lua", "transition.lua")
	packScript = scripts.Load("job_pack.lua")
)

// DefaultFoldAfter is the default Config.FoldAfter.
const DefaultFoldAfter = time.Minute

// foldBatch bounds the jobs one fold script takes.
const foldBatch = 100

// fold folds up to foldBatch of the queue's jobs that ended at least after
// ago (internal/store/scripts/job_fold.lua): each one's events and long fields
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
// folded, in its folded key (store.Store.Events). after keeps the fold away
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
	ids := make([]string, 0, len(retired)+len(later))
	for _, z := range retired {
		ids = append(ids, z.Member.(string))
	}
	ids = append(ids, later...)
	args := q.newFoldArgs(last, upto, after, ids)
	reply, err := foldScript.RunArgs(ctx, q.rdb, args).StringSlice()
	if err == nil && len(reply) == 0 {
		err = errors.New("an empty reply")
	}
	if err != nil {
		return false, fmt.Errorf("fold %s: %w", q.name, err)
	}
	from, folded := reply[0], reply[1:]
	// The packing comes after the fold's progress is kept: a job it
	// leaves is folded, not lost, and the next fold goes on.
	if len(retired) == 0 {
		return len(later) == foldBatch, q.pack(ctx, folded)
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
	return len(retired) == foldBatch || len(later) == foldBatch, q.pack(ctx, folded)
}

// newFoldArgs lays out the fold script's KEYS and ARGV for a fold of ids
// (those taken from the retired index, then those due in fold_later): last
// is the highest retired score of the first ("0" for none), upto the
// highest a job may have to be folded, again how long until a job passed
// over is looked at again. It is the one place in Go that knows that
// layout, which the header of internal/store/scripts/job_fold.lua documents:
// change the two together.
func (q *queue) newFoldArgs(last string, upto int64, again time.Duration, ids []string) scripts.Args {
	a := scripts.Args{Keys: make([]string, 0, 3+3*len(ids)), Argv: make([]any, 0, 3+len(ids))}
	// KEYS[1..3], ARGV[1..3]
	a.Keys = append(a.Keys, q.keys.QueueStats(q.name), q.keys.QueueRetired(q.name), q.keys.QueueFoldLater(q.name))
	a.Argv = append(a.Argv, last, upto, again.Milliseconds())
	// KEYS[3i+1 .. 3i+3] and ARGV[3+i] of job i (1..n)
	for _, id := range ids {
		a.Keys = append(a.Keys, q.keys.Job(q.name, id), q.keys.JobEvents(q.name, id), q.keys.JobFolded(q.name, id))
		a.Argv = append(a.Argv, id)
	}
	return a
}

// pack packs ids, the jobs a fold just folded (scripts.Pack): each job's
// hash and folded key become its folded key alone, a third of their
// bytes. Redis cannot compress, so it reads them, compresses them here,
// and job_pack.lua writes those that have not changed since. A job that
// Pack cannot give back byte for byte stays folded.
func (q *queue) pack(ctx context.Context, ids []string) error {
	hashes := make([]*redis.MapStringStringCmd, len(ids))
	folded := make([]*redis.StringCmd, len(ids))
	if _, err := q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			hashes[i], folded[i] = p.HGetAll(ctx, q.keys.Job(q.name, id)), p.Get(ctx, q.keys.JobFolded(q.name, id))
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("pack %s: %w", q.name, err)
	}
	var jobs []packing
	for i, id := range ids {
		h, f := hashes[i].Val(), []byte(folded[i].Val())
		if h["folded"] != "1" || len(f) == 0 || scripts.IsPacked(f) || h["webhook_state"] == "pending" {
			continue // not folded, packed already, or a delivery's drainer reads its hash (an older fold's)
		}
		value, err := scripts.Pack(h, f)
		if errors.Is(err, scripts.ErrNotPackable) {
			continue
		}
		if err != nil {
			return fmt.Errorf("pack %s: %w", q.name, err)
		}
		jobs = append(jobs, packing{id: id, hash: h, folded: f, value: value})
	}
	if len(jobs) == 0 {
		return nil
	}
	args := q.newPackArgs(jobs)
	if err := packScript.RunArgs(ctx, q.rdb, args).Err(); err != nil {
		return fmt.Errorf("pack %s: %w", q.name, err)
	}
	return nil
}

// packing is one job to pack: its hash and folded key as read, and its
// packed value.
type packing struct {
	id            string
	hash          map[string]string
	folded, value []byte
}

// newPackArgs lays out the pack script's KEYS and ARGV for jobs: the one
// place in Go that knows that layout, which the header of
// internal/store/scripts/job_pack.lua documents: change the two together.
func (q *queue) newPackArgs(jobs []packing) scripts.Args {
	var a scripts.Args
	for _, j := range jobs {
		// KEYS[2i - 1], KEYS[2i]; then m, the m strings of its hash, its
		// folded key and its packed value
		a.Keys = append(a.Keys, q.keys.Job(q.name, j.id), q.keys.JobFolded(q.name, j.id))
		a.Argv = append(a.Argv, 2*len(j.hash))
		for name, value := range j.hash {
			a.Argv = append(a.Argv, name, value)
		}
		a.Argv = append(a.Argv, j.folded, j.value)
	}
	return a
}

// folds is where a queue's next fold starts: the retired score from, past
// skip jobs of that score already taken.
type folds struct {
	from string // "" before the first fold reads it from the stats hash
	skip int64
}
