package store

import (
	"github.com/leasehold/leasehold/job"

	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

const (
	// listScanBound is how many index entries one List call examines at
	// most. Filters that match rarely would otherwise make a page read the
	// whole index; instead the page comes back short, with a cursor.
	listScanBound = 1000
	// loadChunk is how many jobs one pipeline reads, so the jobs held at
	// once while a page fills stay near job.MaxPageBytes too.
	loadChunk = 16
	// listFirstRead is about how many index entries a listing's first
	// read takes in all, when its indexes are many (nextEntries).
	listFirstRead = 256
)

// shownFields are the hash fields a listing reads: all but input, which a
// listing does not show and which may be 1 MiB per job, and id and queue,
// which its key names. state, first, tells whether the job exists.
var shownFields = []string{
	"state", "tenant", "kind", "attempt", "max_attempts", "priority",
	"concurrency_keys", "created_at", "started_at", "finished_at", "cancel_requested",
	"metadata", "result", "error", "timeout_ms", "max_wait_ms", "on_busy", "token",
	"exec_id", "exec_worker", "exec_attempt", "exec_started_at", "exec_heartbeat_at",
	"exec_finished_at", "exec_state", "trace", "retries", "schedule", "cost",
	"webhook", "webhook_id", "webhook_state", "webhook_attempts", "webhook_first_at", "webhook_tries",
	"checkpoint", "wait_for", "wait_until",
}

// jobFields are the hash fields Get reads: shownFields and input, which
// the job object of one job shows.
var jobFields = append(slices.Clip(shownFields), "input")

// List returns a page of jobs, newest first (by created_at, then id), across
// every queue or the one asked for, and the cursor of the next page ("" when
// there is none). Filters are applied while paging, and a page examines at
// most 1000 index entries, so a page may hold fewer than Limit jobs (even
// none) while next is not "": stop when next is "". A page also ends
// before its jobs' fields would pass MaxPageBytes.
//
// A page is read in rounds. Each round reads the next entries of every
// queue's index of the tenant (of every tenant, for an admin) and merges
// them (nextEntries: one pipeline, more when many indexes share the
// first entries), and reads the examined jobs in another pipeline.
// One round fills a page unless filters reject or jobs were deleted at the
// end of their retention; the rounds then widen, doubling, so a page takes
// at most about log2(1000/Limit) + 1 rounds.
func (s *Store) List(ctx context.Context, q job.ListQuery) (jobs []job.Job, next string, err error) {
	if err := q.Validate(); err != nil {
		return nil, "", err
	}
	after, err := parseCursor(q.Cursor)
	if err != nil {
		return nil, "", err
	}
	queues := []string{q.Queue}
	if q.Queue == "" {
		if queues, err = s.queues(ctx); err != nil {
			return nil, "", err
		}
	}
	indexes, queueOf, err := s.listIndexes(ctx, queues, q.Tenant)
	if err != nil {
		return nil, "", err
	}

	limit := cmp.Or(q.Limit, job.DefaultListLimit)
	// A round examines width entries; width doubles while filters reject,
	// so a page takes a handful of rounds, not one per rejected entry.
	width, scanned, more, bytes := limit, 0, true, 0
page:
	for more && len(jobs) < limit && scanned < listScanBound {
		batch, rest, err := s.nextEntries(ctx, indexes, after, min(width, listScanBound-scanned))
		if err != nil {
			return nil, "", err
		}
		more = rest
		for len(batch) > 0 {
			chunk := batch[:min(loadChunk, len(batch))]
			batch = batch[len(chunk):]
			loaded, sizes, err := s.load(ctx, queueOf, indexes, chunk)
			if err != nil {
				return nil, "", err
			}
			for i, j := range loaded {
				// Only what the page returns counts against its bytes:
				// a big job the filters leave out does not cut it.
				listed := j.ID != "" && q.Matches(j)
				if len(jobs) == limit || (listed && len(jobs) > 0 && bytes+sizes[i] > job.MaxPageBytes) {
					more = true // chunk[i:] is left for the next page
					break page
				}
				after = &chunk[i].position
				scanned++
				if listed {
					jobs = append(jobs, j)
					bytes += sizes[i]
				}
			}
		}
		width *= 2
	}
	if more {
		next = after.cursor()
	}
	return jobs, next, nil
}

// listIndexes names the sorted sets that list tenant's jobs in queues
// ("" = every tenant's), and the queue of each. A queue lists each
// tenant's jobs apart; its tenants are those its stats hash counts
// (stats.lua keeps a tenant's counts when they reach 0).
func (s *Store) listIndexes(ctx context.Context, queues []string, tenant string) (indexes, queueOf []string, err error) {
	if tenant != "" {
		for _, q := range queues {
			indexes = append(indexes, s.keys.QueueTenantJobs(q, tenant))
		}
		return indexes, queues, nil
	}
	fields := make([]*redis.StringSliceCmd, len(queues))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, q := range queues {
			fields[i] = p.HKeys(ctx, s.keys.QueueStats(q))
		}
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("job: list: %w", err)
	}
	for i, q := range queues {
		tenants := map[string]bool{}
		for _, f := range fields[i].Val() {
			if _, t, ok := counted(f); ok && !tenants[t] {
				tenants[t] = true
				indexes, queueOf = append(indexes, s.keys.QueueTenantJobs(q, t)), append(queueOf, q)
			}
		}
	}
	return indexes, queueOf, nil
}

// position is a place in the listing order: newer created_at first, then
// greater id first, which is how a sorted set lists equal scores in reverse.
type position struct {
	created int64 // unix ms, the index score
	id      string
}

// before reports whether p comes before o in the listing.
func (p position) before(o position) bool {
	return p.created > o.created || (p.created == o.created && p.id > o.id)
}

func (p *position) cursor() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(p.created, 10) + ":" + p.id))
}

// parseCursor reads a cursor; "" is the start (nil).
func parseCursor(c string) (*position, error) {
	if c == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return nil, job.ErrBadCursor
	}
	ms, id, _ := strings.Cut(string(b), ":")
	created, err := strconv.ParseInt(ms, 10, 64)
	if u, uerr := uuid.Parse(id); err != nil || created < 0 || uerr != nil || u.String() != id {
		return nil, job.ErrBadCursor
	}
	return &position{created: created, id: id}, nil
}

// entry is an index entry: where it sorts, and which index (and queue) it
// came from.
type entry struct {
	position
	index int
}

// nextEntries returns up to n entries that follow after (nil = the start)
// across indexes, in listing order, and whether more follow them.
//
// Any of the first n entries overall is among the first n of its own index,
// so reading n+1 of each index and merging is exact, in one round trip: a
// tenant's listing, over its queues, does that. An admin's reads an index
// per tenant and queue, so it reads a few of each instead (listFirstRead
// in all), and then further only those that may hold more of the first
// n+1: an index whose last entry read ranks before the (n+1)-th read
// (twice as many each time, up to n+1 in all). It stops when no index may:
// the entries read are then exact, and about n and a few per index.
func (s *Store) nextEntries(ctx context.Context, indexes []string, after *position, n int) ([]entry, bool, error) {
	type cursor struct {
		at   *position // the last entry read, after to begin with
		read int       // how many it has read
		want int       // how many to read next; 0 once no more are needed
	}
	cursors := make([]cursor, len(indexes))
	for i := range cursors {
		cursors[i] = cursor{at: after, want: min(n+1, max(4, listFirstRead/len(indexes)))}
	}
	var merged []entry
	for {
		reads := make([]entryRead, len(indexes))
		if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, c := range cursors {
				if c.want > 0 {
					reads[i] = readEntries(ctx, p, indexes[i], c.at, c.want)
				}
			}
			return nil
		}); err != nil {
			return nil, false, fmt.Errorf("job: list: %w", err)
		}
		for i, r := range reads {
			c := &cursors[i]
			if c.want == 0 {
				continue
			}
			got, full := r.entries(i, c.at, c.want)
			merged = append(merged, got...)
			if !full {
				c.want = 0 // the index has no more
				continue
			}
			c.read += c.want
			c.at, c.want = &got[len(got)-1].position, min(2*c.want, n+1-c.read)
		}
		slices.SortFunc(merged, func(a, b entry) int {
			if a.before(b.position) {
				return -1
			}
			return 1
		})
		again := false
		for i := range cursors {
			c := &cursors[i]
			if c.want > 0 && len(merged) > n && !c.at.before(merged[n].position) {
				c.want = 0 // what it holds more ranks after the (n+1)-th
			}
			again = again || c.want > 0
		}
		if !again {
			return merged[:min(n, len(merged))], len(merged) > n, nil
		}
	}
}

// entryRead is the reply of readEntries.
type entryRead struct {
	ties *redis.StringSliceCmd // nil when reading from the start
	rest *redis.ZSliceCmd
}

// readEntries reads up to want entries of index that follow after (nil =
// the start). Entries that share after's millisecond are read apart, all
// of them (a few at most), because a score range cannot start between two
// equal scores.
func readEntries(ctx context.Context, p redis.Pipeliner, index string, after *position, want int) entryRead {
	var r entryRead
	top := "+inf"
	if after != nil {
		top = "(" + strconv.FormatInt(after.created, 10)
		r.ties = p.ZRangeArgs(ctx, redis.ZRangeArgs{Key: index, ByScore: true, Rev: true,
			Start: after.created, Stop: after.created})
	}
	r.rest = p.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: index, ByScore: true, Rev: true,
		Start: top, Stop: "-inf", Count: int64(want)})
	return r
}

// entries returns what r read of index i, in listing order, and whether
// it read all the want it asked for (the index may hold more).
func (r entryRead) entries(i int, after *position, want int) (got []entry, full bool) {
	if r.ties != nil {
		for _, id := range r.ties.Val() {
			if id < after.id {
				got = append(got, entry{position{after.created, id}, i})
			}
		}
	}
	for _, z := range r.rest.Val() {
		got = append(got, entry{position{int64(z.Score), z.Member.(string)}, i})
	}
	return got, len(r.rest.Val()) == want
}

// load reads the jobs of entries, in order, with the bytes of each one's
// fields; a job whose hash is gone (a
// DELETE, or a retention reaped between the index read and this one) is
// left zero and its entry removed from its index. The reaper takes a
// retired job out of the indexes itself.
func (s *Store) load(ctx context.Context, queueOf, indexes []string, entries []entry) ([]job.Job, []int, error) {
	reads := make([]jobRead, len(entries))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, e := range entries {
			reads[i] = s.readJob(ctx, p, queueOf[e.index], e.id, shownFields)
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) { // the GET of a job not folded
		return nil, nil, fmt.Errorf("job: list: %w", err)
	}
	jobs := make([]job.Job, len(entries))
	sizes := make([]int, len(entries))
	var gone []entry
	for i, e := range entries {
		h, torn, err := reads[i].shown()
		if torn {
			h, err = s.shownOf(ctx, queueOf[e.index], e.id, shownFields)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("job: list: %w", err)
		}
		if h == nil {
			gone = append(gone, e)
			continue
		}
		for _, v := range h {
			sizes[i] += len(v)
		}
		if jobs[i], err = job.ParseRecord(queueOf[e.index], e.id, h); err != nil {
			return nil, nil, err
		}
	}
	if len(gone) > 0 {
		if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, e := range gone {
				p.ZRem(ctx, indexes[e.index], e.id)
			}
			return nil
		}); err != nil {
			return nil, nil, fmt.Errorf("job: list: clean index: %w", err)
		}
	}
	return jobs, sizes, nil
}

// shown maps the values of HMGET names (state first) to their fields; nil
// when the job hash does not exist.
func shown(names []string, vals []any) map[string]string {
	if vals[0] == nil {
		return nil
	}
	h := make(map[string]string, len(names))
	for k, v := range vals {
		if v != nil {
			h[names[k]] = v.(string)
		}
	}
	return h
}
