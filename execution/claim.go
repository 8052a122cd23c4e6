package execution

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/replicas"
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/store/scripts"
)

// claim does the queue's due work for the candidates it looks at (reaping
// expired leases, promoting due retries, expiring jobs past max_wait,
// deleting records past their retention) and claims up to want (at least
// 1) jobs for worker, in four steps:
//
//   - peek: the peek script finds the lanes at the head of the ready set
//     and the due work, and in its round trip go reads of the first jobs
//     of the lanes the last claim saw at the head and slots of their keys
//     (askEarly);
//   - plan: the candidates, the jobs with due work first, then the first
//     jobs of the lanes at the head, with a read of what the peek's round
//     trip missed (the due jobs' lanes, lanes new at the head), if
//     anything, and one of the retired records' tenants, if any;
//   - reserve: the slots the early ask did not cover, if any;
//   - commit: the claim script, which checks each candidate again, and
//     what its reply tells the next claim.
//
// That is two to four round trips, one more when records are retired; one
// for a fused claim that follows another (see fused), whose peek was read
// in the last claim's round trip and whose slots are taken in its own.
// busy says the peek saw ready lanes (if none were claimed, other workers
// took them, and there may be more) or a full batch of due work.
//
// The claimed jobs may start once conf, when not nil, is confirmed: the
// claim's WAIT for replicas, which the caller sends (see confirmation).
func (q *queue) claim(ctx context.Context, worker string, want int) (claimed []*Execution, busy bool, conf *confirmation, err error) {
	ctx = q.ackEach(ctx)
	defer func() {
		if conf != nil && len(claimed) == 0 {
			conf.close()
			conf = nil
		}
	}()
	// What this claim leaves for the next starts as what the last one
	// left, but its peek read along, which is taken once; it is stored as
	// the claim returns, whatever it found.
	last := q.hints.Load()
	next := *last
	next.along = nil
	defer func() { q.hints.Store(&next) }()
	look, blocked := last.look(want), last.blocked
	r := reservation{got: map[string][]string{}, granted: map[string]int{}, cost: map[string]int64{}, byBudget: map[string]string{}}
	// Slots taken for executions that are not among those claimed (no
	// candidate used them, another key refused its candidate, the claim
	// script did not take it) are given back. A release that fails leaves
	// them taken until their TTL, held by nobody.
	defer func() { _ = q.release(ctx, r.unused(claimed)) }()

	fused := q.fused(ctx)
	p, ok := last.takeAlong(want, q.alongFor, q.lanesGrantAll)
	if !ok {
		if p, err = q.peek(ctx, want, look, last, &r); err != nil {
			return nil, false, nil, err
		}
	}
	q.metrics.reapedLeases(ctx, q.name, false, len(p.expired))
	busy = p.busy()
	next.heads = p.heads
	if p.idle() {
		return nil, false, nil, nil
	}
	tenants, err := q.tenantsOf(ctx, p.retired)
	if err != nil {
		return nil, busy, nil, err
	}
	pl, err := q.plan(ctx, want, p, blocked, tenants)
	if err != nil {
		return nil, false, nil, err
	}

	if p.early == nil {
		// The peek may have waited on a Redis coming back; the leases are
		// granted only from here on.
		p.asked = time.Now()
	}
	if err := q.reserve(ctx, &r, want, pl, p.early, fused, blocked); err != nil {
		return nil, false, nil, err
	}
	next.room = time.Time{}
	if r.room > 0 {
		next.room = time.Now().Add(r.room)
	}
	for i, id := range pl.ids {
		if key, ok := r.byBudget[r.execIDs[i]]; ok && r.held[i] == "0" {
			q.waits.start(id, key, p.asked)
		}
	}

	var ahead *nextPeek
	if fused && q.lanesGrantAll(p.heads) {
		ahead = &nextPeek{want: want, look: look, lanes: p.heads, per: perLaneOf(want, p.heads, blocked), blocked: blocked}
	}
	res, conf, err := q.commit(ctx, q.newClaimArgs(worker, want, pl, r.execIDs, r.held), &r, ahead)
	if err != nil {
		return nil, busy, conf, err // conf: closed as nothing was claimed
	}
	if ahead != nil && ahead.read != nil {
		if np, err := q.peekResult(ctx, ahead.read); err == nil {
			np.want = want
			next.along = &np
		}
	}
	// Jobs waiting for a full key are no reason to claim again at once,
	// unless this claim only looked at the head: then look deeper now.
	left := &waits{lanes: map[string]bool{}, full: r.full, keysOf: q.keysOf}
	for _, lane := range res.blocked {
		left.lanes[lane] = true
	}
	next.blocked = left
	if left.any() {
		busy = look == want
	}
	for lane, c := range res.costs {
		// A job whose cost was above what its lane's last cost reserved
		// was left: claim again at once, now that its cost is known.
		if was, ok := next.costs.get(lane); ok && c > was {
			busy = true
		}
		next.costs.set(lane, c)
	}
	q.metrics.expiredJobs(ctx, q.name, res.expired)
	claimed, err = q.executions(res, pl, &r, p.asked)
	claimed = q.slotted(ctx, claimed, &r)
	if err != nil {
		return claimed, busy, conf, err
	}
	next.left = jobsLeft(p.heads, pl.lanes[pl.due:], perLaneOf(want, p.heads, blocked), claimed)
	if r.err != nil {
		// A key Redis could not ask is no reason to claim again at once:
		// its jobs would only be asked for, and handed back, again.
		return claimed, false, conf, fmt.Errorf("claim %s: %w", q.name, r.err)
	}
	return claimed, busy, conf, nil
}

// ackEach makes every round trip of a claim carry its own WAIT for
// replicas on a Cluster. A claim's leases and slots are on
// LEASEHOLD_REDIS_MIN_REPLICAS replicas before its handlers start. On one
// primary the claim script's WAIT covers the writes of the round trips
// before it too (WAIT waits for the primary's offset after the
// connection's last write); on a Cluster the slots are on other shards.
func (q *queue) ackEach(ctx context.Context) context.Context {
	if _, cluster := q.rdb.(*redis.ClusterClient); cluster {
		return replicas.Ack(ctx)
	}
	return ctx
}

// fused says whether a claim's own round trip takes its slots of keys
// without a limit or a budget, which grant every ask, and reads the next
// claim's peek (nextPeek), so that a claim of such jobs that follows
// another takes one round trip: on one primary, where a pipeline runs in
// order, unless its claims wait for replicas (their script runs on a
// connection of its own: see confirmation).
func (q *queue) fused(ctx context.Context) bool {
	_, single := q.rdb.(*redis.Client)
	return single && !q.waiting(ctx)
}

// defaultAlongFor is how long the peek read along with a claim stands in
// for the next claim's own: a claim that follows within it needs no peek
// round trip. Later, the lanes at the head may have changed, and their
// first jobs been taken by others.
const defaultAlongFor = 10 * time.Millisecond

// nextPeek is the next claim's peek, which a fused claim reads in its own
// round trip after its script, when its lanes at the head grant every ask
// (else the next claim peeks itself: see takeAlong): look lanes at the
// head and the due work, and the first per jobs of lanes (this claim's
// heads), for a claim of up to want jobs.
type nextPeek struct {
	want, look int
	lanes      []string
	per        int
	blocked    *waits
	read       *peeking // queued by commit; nil when its script was loaded again
}

// peeked is what a claim's first round trip found, or the last claim's
// (see fused).
type peeked struct {
	peekReply
	// ahead holds the first jobs of the lanes the last claim saw at the
	// head, read with the peek.
	ahead map[string]*redis.StringSliceCmd
	early *earlyAsk // the slots asked for with the peek; nil: none
	// asked is when the first ask for slots was sent: the leases' trust
	// window counts from there.
	asked time.Time
	read  time.Time // when the peek was read
	want  int       // for a claim of up to how many jobs, when read along with the last one (see takeAlong)
}

// busy says there may be more work than the peek found room for: lanes at
// the head (if a claim took none of them, others did), or a full batch of
// due work.
func (p peeked) busy() bool { return len(p.heads) > 0 || p.full() }

// idle says the peek found nothing to do.
func (p peeked) idle() bool {
	return len(p.heads) == 0 && len(p.retired) == 0 && len(p.due()) == 0
}

// peek runs the peek script for look lanes at the head and the due work.
// It reads along with it, in the same round trip, the first jobs of the
// lanes the last claim saw at the head (last.heads) and asks for slots of
// their keys (askEarly), what it got going into r.
func (q *queue) peek(ctx context.Context, want, look int, last *hints, r *reservation) (peeked, error) {
	// The lanes at the head are seldom new: the first jobs of those the
	// last claim saw, and slots of their keys, are asked for in the peek's
	// round trip, and what that missed in one more.
	blocked := last.blocked
	early := q.askEarly(want, last)
	var pk *peeking
	// The leases are granted from the moment the first ask for them is
	// sent: their trust window counts from here.
	asked := time.Now()
	_, _ = q.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		pk = q.peekIn(ctx, pipe, look, last.heads, perLaneOf(want, last.heads, blocked), blocked)
		if early != nil {
			early.acquiring = q.st.AcquireLeasesIn(ctx, pipe, q.ttl, q.back, early.asks.list)
		}
		return nil
	})
	if early != nil {
		grants, errs := early.acquiring.Each(ctx)
		r.add(early.asks.list, grants, errs)
	}
	p, err := q.peekResult(ctx, pk)
	p.early, p.asked = early, asked
	return p, err
}

// peeking is a peek queued on a pipeline (peekIn).
type peeking struct {
	look  int
	run   *scripts.Queued
	ahead map[string]*redis.StringSliceCmd
}

// peekIn queues on pipe the peek script for look lanes at the head and the
// due work, and the reads of the first per jobs of lanes (readLanes).
func (q *queue) peekIn(ctx context.Context, pipe redis.Pipeliner, look int, lanes []string, per int,
	blocked *waits) *peeking {
	pk := &peeking{look: look, run: peekScript.In(ctx, pipe, q.rdb, scripts.Args{Keys: q.peekKeys(), Argv: append([]any{look, dueBatch}, q.kinds...)})}
	if len(lanes) > 0 {
		pk.ahead = q.readLanes(ctx, pipe, lanes, per, blocked)
	}
	return pk
}

// peekResult returns what pk found, once its pipeline has run.
func (q *queue) peekResult(ctx context.Context, pk *peeking) (peeked, error) {
	p := peeked{ahead: pk.ahead, read: time.Now()}
	reply, err := pk.run.Reply(ctx).Slice()
	if err != nil {
		return p, fmt.Errorf("peek %s: %w", q.name, err)
	}
	if p.peekReply, err = decodePeek(reply); err != nil {
		return p, fmt.Errorf("peek %s: %w", q.name, err)
	}
	return p, nil
}

// claimPlan is what a claim asks the claim script to check and take.
type claimPlan struct {
	// ids are the candidates: the due jobs first (the first due of
	// them), then the first jobs of the lanes at the head.
	ids []string
	due int
	// lanes holds each candidate's lane: its concurrency keys as stored
	// ("" for a job gone, which the claim script drops).
	lanes []string
	// ckeys holds each candidate's concurrency keys, parsed.
	ckeys [][]string
	// retired are the terminal jobs past their retention, whose records
	// the claim script deletes, and tenants each one's tenant.
	retired, tenants []string
}

// plan returns the candidates of the work p found for a claim of want
// jobs: the due jobs and the first jobs of the lanes at the head (see
// candidates), each one's keys parsed. tenants are those of p's retired
// jobs (tenantsOf).
func (q *queue) plan(ctx context.Context, want int, p peeked, blocked *waits, tenants []string) (claimPlan, error) {
	due := p.due()
	ids, lanes, err := q.candidates(ctx, due, p.heads, want, blocked, p.ahead)
	if err != nil {
		return claimPlan{}, err
	}
	pl := claimPlan{ids: ids, due: len(due), lanes: lanes, retired: p.retired, tenants: tenants}
	// Each candidate's concurrency keys and their share keys (withShares),
	// parsed once per lane: a lane's jobs share them.
	pl.ckeys = make([][]string, len(ids))
	parsed := map[string][]string{}
	for i, lane := range lanes {
		keys, ok := parsed[lane]
		if !ok {
			keys = q.keysOf(lane) // nil for a job gone ("")
			parsed[lane] = keys
		}
		pl.ckeys[i] = keys
	}
	return pl, nil
}

// commit runs the claim script with args and returns its reply, decoded,
// and, for a claim whose client waits for replicas on one primary, the
// WAIT the claim owes (confirmation). r is the claim's reservation. A
// fused claim (next not nil) takes the
// slots r left for its round trip, before the script, and reads next
// after it.
func (q *queue) commit(ctx context.Context, args scripts.Args, r *reservation, next *nextPeek) (res claimReply, conf *confirmation, err error) {
	// go-redis resends the script when a connection drops before the reply;
	// the script recognises its own earlier claims by their execution ids.
	var raw []any
	c, single := q.rdb.(*redis.Client)
	switch {
	case next != nil:
		var acquiring *store.LeasesAcquiring
		var run *scripts.Queued
		_, _ = q.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			if len(r.later) > 0 {
				acquiring = q.st.AcquireLeasesIn(ctx, pipe, q.ttl, q.back, r.later)
			}
			run = claimScript.In(ctx, pipe, q.rdb, args)
			next.read = q.peekIn(ctx, pipe, next.look, next.lanes, next.per, next.blocked)
			return nil
		})
		if run.Lost() {
			next.read = nil // read before the script, run again below, took its jobs
		}
		raw, err = run.Reply(ctx).Slice()
		if acquiring != nil {
			// Keys without a limit grant every ask: only an error refuses
			// one, and the jobs claimed without it must not start (slotted).
			r.tookLater(acquiring.Each(ctx))
		}
	case single && q.waiting(ctx):
		// On a connection of its own, resent on a new one when the
		// connection drops (go-redis resends only on a pooled one).
		for try := 0; try < 2; try++ {
			if conf != nil {
				conf.close()
			}
			conf = &confirmation{conn: c.Conn()}
			raw, err = claimScript.RunArgs(replicas.Defer(ctx, &conf.owed), conf.conn, args).Slice()
			if _, reply := errors.AsType[redis.Error](err); err == nil || reply {
				break
			}
		}
	default:
		raw, err = claimScript.RunArgs(replicas.Ack(ctx), q.rdb, args).Slice()
	}
	if err != nil {
		// The slots stay taken until their TTL, held by nobody: the limit
		// is never exceeded, only under-used for a while.
		r.got = nil
		return res, conf, fmt.Errorf("claim %s: %w", q.name, err)
	}
	if res, err = decodeClaim(raw); err != nil {
		// Jobs the script claimed are not run: their leases expire and the
		// reaper retries them, as after a worker's crash.
		return res, conf, fmt.Errorf("claim %s: %w", q.name, err)
	}
	return res, conf, nil
}

// slotted returns the executions of claimed that hold a slot of every one
// of their keys, and hands the others back. The claim script takes only
// candidates holding theirs, but a fused claim takes some of its slots in
// the script's own round trip (reserve), which may fail (commit): the
// jobs claimed without theirs go back to their lanes unrun, their
// attempts unspent, and their slots are released, with those of the
// candidates not claimed. What the hand-back cannot write, the reaper
// retries once their leases run out.
func (q *queue) slotted(ctx context.Context, claimed []*Execution, r *reservation) []*Execution {
	var held, back []*Execution
	for _, e := range claimed {
		if r.granted[e.ID] == len(e.keys) {
			held = append(held, e)
		} else {
			back = append(back, e)
		}
	}
	if len(back) == 0 {
		return claimed
	}
	r.got = r.unused(back)
	fs := make([]*finishing, len(back))
	for i, e := range back {
		fs[i] = &finishing{e: e, o: outcome{state: StateHandedOff, unrun: true}}
	}
	finishAll(ctx, q.rdb, fs)
	return held
}

// executions returns the executions of the jobs res hands out, candidates
// of pl with the slots r took, granted at asked.
func (q *queue) executions(res claimReply, pl claimPlan, r *reservation, asked time.Time) ([]*Execution, error) {
	byID := make(map[string]int, len(pl.ids))
	for i, id := range pl.ids {
		byID[id] = i
	}
	var claimed []*Execution
	for _, j := range res.jobs {
		c, ok := byID[j.id]
		if !ok {
			return claimed, fmt.Errorf("claim %s: the script claimed %s, not a candidate", q.name, j.id)
		}
		claimed = append(claimed, &Execution{
			JobID:   j.id,
			ID:      j.execID,
			token:   j.token,
			attempt: j.attempt,
			Kind:    j.kind,
			Input:   j.input,
			Timeout: j.timeout,
			Queue:   q.name,
			Tenant:  j.tenant,
			keys:    pl.ckeys[c],
			lane:    pl.lanes[c],
			granted: asked,
			cost:    r.cost[j.execID],
			waited:  q.waits.end(j.id),
			q:       q,
			trace:   claimedTrace(j.trace, j.prevTrace),
			resume:  j.resume,
		})
	}
	return claimed, nil
}

// peekKeys returns the peek script's KEYS (see execution_peek.lua).
func (q *queue) peekKeys() []string {
	return []string{q.keys.QueueReady(q.name), q.keys.QueueScheduled(q.name), q.keys.QueueLeases(q.name),
		q.keys.QueueDeadlines(q.name), q.keys.QueueRetired(q.name)}
}

// newClaimArgs lays out the claim script's KEYS and ARGV for a claim of
// want jobs for worker of pl's
// candidates, which run under execIDs if claimed, each holding its keys'
// slots as held says (reservation.held). It is the one place in Go that
// knows that layout, which the header of internal/store/scripts/execution_claim.lua
// documents: change the two together.
func (q *queue) newClaimArgs(worker string, want int, pl claimPlan, execIDs, held []string) scripts.Args {
	n, r := len(pl.ids), len(pl.retired)
	a := scripts.Args{Keys: make([]string, 0, 8+3*n+5*r+2), Argv: make([]any, 0, 8+4*n+1+r+1)}
	// KEYS[1..8], ARGV[1..8]
	a.Keys = append(a.Keys, q.keys.QueueReady(q.name), q.keys.QueueScheduled(q.name), q.keys.QueueLeases(q.name),
		q.keys.QueueDeadlines(q.name), q.keys.QueueFence(q.name), q.keys.QueueFair(q.name),
		q.keys.QueueStats(q.name), q.keys.QueueRetired(q.name))
	a.Argv = append(a.Argv, want, q.ttl.Milliseconds(), worker, q.retention.Milliseconds(), scripts.EventsMaxLen,
		q.backoff(1).Milliseconds(), pl.due, n)
	// KEYS[6+3i], KEYS[7+3i], KEYS[8+3i] and ARGV[8+i] of candidate i (1..n)
	for i, id := range pl.ids {
		a.Keys = append(a.Keys, q.keys.Job(q.name, id), q.keys.JobEvents(q.name, id), q.keys.QueueLane(q.name, pl.lanes[i]))
		a.Argv = append(a.Argv, id)
	}
	// ARGV[9+n .. 8+2n], ARGV[9+2n .. 8+3n], ARGV[9+3n .. 8+4n]
	for _, id := range execIDs {
		a.Argv = append(a.Argv, id)
	}
	for _, h := range held {
		a.Argv = append(a.Argv, h)
	}
	for _, lane := range pl.lanes {
		a.Argv = append(a.Argv, lane)
	}
	// KEYS[4+3n+5j .. 8+3n+5j] of retired job j (1..r); ARGV r, then the r ids
	for j, id := range pl.retired {
		a.Keys = append(a.Keys, q.keys.Job(q.name, id), q.keys.JobEvents(q.name, id),
			q.keys.QueueTenantJobs(q.name, pl.tenants[j]), q.keys.JobFolded(q.name, id),
			q.keys.QueueRetained(q.name, pl.tenants[j]))
	}
	a.Argv = append(a.Argv, r)
	for _, id := range pl.retired {
		a.Argv = append(a.Argv, id)
	}
	// KEYS[#KEYS - 1], KEYS[#KEYS], ARGV[#ARGV]
	day, drop := q.usageDay()
	a.Keys = append(a.Keys, day, q.keys.QueueWebhooks(q.name))
	a.Argv = append(a.Argv, drop)
	return a
}

// perLane is how many jobs of each of n lanes a claim of want reads: enough
// for want claims taking turns between them.
func perLane(want, n int) int {
	if n <= 1 {
		return want
	}
	return max(1, min(want, (2*want+n-1)/n))
}

// readLanes queues on p the reads of the first per jobs of lanes, and only
// the first of a lane that waits for a full key.
func (q *queue) readLanes(ctx context.Context, p redis.Pipeliner, lanes []string, per int, blocked *waits) map[string]*redis.StringSliceCmd {
	read := make(map[string]*redis.StringSliceCmd, len(lanes))
	for _, lane := range lanes {
		n := per
		if blocked.has(lane) {
			n = 1
		}
		read[lane] = p.ZRange(ctx, q.keys.QueueLane(q.name, lane), 0, int64(n-1))
	}
	return read
}

// candidates returns the candidates of a claim: each job with due work and
// its lane (the concurrency keys as stored), then the first jobs of each
// lane at the head of the ready set (see perLane). It reads, in one round
// trip, what ahead (read with the peek) does not hold; none when it holds
// every head lane and nothing is due. A job whose record is gone has no
// lane: the claim script drops it.
func (q *queue) candidates(ctx context.Context, due, heads []string, want int, blocked *waits,
	ahead map[string]*redis.StringSliceCmd) (ids, lanes []string, err error) {
	var missed []string
	for _, lane := range heads {
		if cmd, ok := ahead[lane]; !ok || cmd.Err() != nil {
			missed = append(missed, lane)
		}
	}
	laneOf := make([]*redis.SliceCmd, len(due))
	if len(due) > 0 || len(missed) > 0 {
		_, err = q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, id := range due {
				laneOf[i] = p.HMGet(ctx, q.keys.Job(q.name, id), "kind", "concurrency_keys")
			}
			for lane, cmd := range q.readLanes(ctx, p, missed, perLaneOf(want, heads, blocked), blocked) {
				if ahead == nil {
					ahead = map[string]*redis.StringSliceCmd{}
				}
				ahead[lane] = cmd
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, nil, fmt.Errorf("read candidates %s: %w", q.name, err)
		}
	}
	seen := map[string]bool{}
	for i, id := range due {
		seen[id] = true
		ids = append(ids, id)
		f := laneOf[i].Val()
		kind, _ := f[0].(string)
		keys, _ := f[1].(string)
		if keys == "" {
			kind = "" // the job is gone: no lane
		}
		lanes = append(lanes, scripts.Lane(kind, keys))
	}
	for _, lane := range heads {
		for _, id := range ahead[lane].Val() {
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
				lanes = append(lanes, lane)
			}
		}
	}
	return ids, lanes, nil
}
