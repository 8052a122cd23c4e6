package store

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

// FoldBatch bounds the jobs one fold takes.
const FoldBatch = 100

// FoldCursor is where a queue's next fold starts: the retired score From,
// past Skip jobs of that score already taken. The zero cursor starts where
// the queue's folds got to (its stats hash's folded_to).
type FoldCursor struct {
	From string
	Skip int64
}

// FoldParams is one fold of a queue's ended jobs.
type FoldParams struct {
	Queue string
	// Retention is how long the queue's terminal jobs are kept: a job's
	// score in the retired index is its end plus it.
	Retention time.Duration
	// After is how long after a job ends it is folded, and how long until
	// a job passed over (its webhook delivery pending) is looked at again.
	After  time.Duration
	Cursor FoldCursor
}

// FoldResult is what a fold did.
type FoldResult struct {
	Folded []string   // the jobs folded, to pack (PackJobs)
	Next   FoldCursor // where the next fold starts
	More   bool       // a batch was full: there may be more
}

// FoldJobs folds up to FoldBatch of a queue's jobs that ended at least
// p.After ago (scripts/job_fold.lua): each one's events and long fields go
// to its folded key and its hash is written anew, a listpack. It takes
// them from the retired index after p.Cursor; a job retired with a shorter
// retention than p.Retention may be passed and keep its stream. A job
// whose webhook delivery is pending is passed over into the queue's
// fold_later set, which each fold looks at again too: up to FoldBatch of
// its jobs due, each folded once its delivery has ended. Two or three
// round trips.
func (s *Store) FoldJobs(ctx context.Context, p FoldParams) (FoldResult, error) {
	q, cur := p.Queue, p.Cursor
	res := FoldResult{Next: cur}
	if cur.From == "" {
		from, err := s.rdb.HGet(ctx, s.keys.QueueStats(q), "folded_to").Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return res, fmt.Errorf("store: fold %s: %w", q, err)
		}
		cur = FoldCursor{From: cmp.Or(from, "-inf")}
		res.Next = cur
	}
	now := time.Now()
	upto := now.Add(p.Retention - p.After).UnixMilli()
	var retiredCmd *redis.ZSliceCmd
	var laterCmd *redis.StringSliceCmd
	if _, err := s.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		retiredCmd = pipe.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: s.keys.QueueRetired(q),
			Start: cur.From, Stop: upto, ByScore: true, Offset: cur.Skip, Count: FoldBatch})
		laterCmd = pipe.ZRangeArgs(ctx, redis.ZRangeArgs{Key: s.keys.QueueFoldLater(q),
			Start: "-inf", Stop: now.UnixMilli(), ByScore: true, Count: FoldBatch})
		return nil
	}); err != nil {
		return res, fmt.Errorf("store: fold %s: %w", q, err)
	}
	retired, later := retiredCmd.Val(), laterCmd.Val()
	if len(retired) == 0 && len(later) == 0 {
		return res, nil
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
	reply, err := foldScript.RunArgs(ctx, s.rdb, s.foldArgs(q, last, upto, p.After, ids)).StringSlice()
	if err == nil && len(reply) == 0 {
		err = errors.New("an empty reply")
	}
	if err != nil {
		return res, fmt.Errorf("store: fold %s: %w", q, err)
	}
	from, folded := reply[0], reply[1:]
	res.Folded = folded
	if len(retired) == 0 {
		res.More = len(later) == FoldBatch
		return res, nil
	}
	// Jobs retired in the same millisecond share a score: the next batch
	// starts at the last one's, past those of it already taken.
	ties := int64(0)
	for _, z := range retired {
		if strconv.FormatFloat(z.Score, 'f', 0, 64) == last {
			ties++
		}
	}
	if last == cur.From {
		res.Next.Skip += ties
	} else {
		res.Next = FoldCursor{From: last, Skip: ties}
	}
	if from != last { // another reaper is further on
		res.Next = FoldCursor{From: from}
	}
	res.More = len(retired) == FoldBatch || len(later) == FoldBatch
	return res, nil
}

// foldArgs lays out the fold script's KEYS and ARGV for a fold of queue's
// jobs ids (those taken from the retired index, then those due in
// fold_later): last is the highest retired score of the first ("0" for
// none), upto the highest a job may have to be folded, again how long
// until a job passed over is looked at again. It is the one place in Go
// that knows that layout, which the header of scripts/job_fold.lua
// documents: change the two together.
func (s *Store) foldArgs(queue, last string, upto int64, again time.Duration, ids []string) scripts.Args {
	a := scripts.Args{Keys: make([]string, 0, 3+3*len(ids)), Argv: make([]any, 0, 3+len(ids))}
	// KEYS[1..3], ARGV[1..3]
	a.Keys = append(a.Keys, s.keys.QueueStats(queue), s.keys.QueueRetired(queue), s.keys.QueueFoldLater(queue))
	a.Argv = append(a.Argv, last, upto, again.Milliseconds())
	// KEYS[3i+1 .. 3i+3] and ARGV[3+i] of job i (1..n)
	for _, id := range ids {
		a.Keys = append(a.Keys, s.keys.Job(queue, id), s.keys.JobEvents(queue, id), s.keys.JobFolded(queue, id))
		a.Argv = append(a.Argv, id)
	}
	return a
}

// PackJobs packs ids, jobs of queue a fold just folded (scripts.Pack):
// each job's hash and folded key become its folded key alone, a third of
// their bytes. Redis cannot compress, so it reads them, compresses them
// here, and job_pack.lua writes those that have not changed since. A job
// that Pack cannot give back byte for byte stays folded.
func (s *Store) PackJobs(ctx context.Context, queue string, ids []string) error {
	hashes := make([]*redis.MapStringStringCmd, len(ids))
	folded := make([]*redis.StringCmd, len(ids))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			hashes[i], folded[i] = p.HGetAll(ctx, s.keys.Job(queue, id)), p.Get(ctx, s.keys.JobFolded(queue, id))
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("store: pack %s: %w", queue, err)
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
			return fmt.Errorf("store: pack %s: %w", queue, err)
		}
		jobs = append(jobs, packing{id: id, hash: h, folded: f, value: value})
	}
	if len(jobs) == 0 {
		return nil
	}
	if err := packScript.RunArgs(ctx, s.rdb, s.packArgs(queue, jobs)).Err(); err != nil {
		return fmt.Errorf("store: pack %s: %w", queue, err)
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

// packArgs lays out the pack script's KEYS and ARGV for jobs of queue: the
// one place in Go that knows that layout, which the header of
// scripts/job_pack.lua documents: change the two together.
func (s *Store) packArgs(queue string, jobs []packing) scripts.Args {
	var a scripts.Args
	for _, j := range jobs {
		// KEYS[2i - 1], KEYS[2i]; then m, the m strings of its hash, its
		// folded key and its packed value
		a.Keys = append(a.Keys, s.keys.Job(queue, j.id), s.keys.JobFolded(queue, j.id))
		a.Argv = append(a.Argv, 2*len(j.hash))
		for name, value := range j.hash {
			a.Argv = append(a.Argv, name, value)
		}
		a.Argv = append(a.Argv, j.folded, j.value)
	}
	return a
}
