package execution

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/replicas"
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/store/scripts"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/ratelimit/usage"
)

var (
	peekScript   = scripts.Load("execution_peek.lua", "fair.lua")
	claimScript  = scripts.Load("execution_claim.lua", "fence.lua", "fair.lua", "batch.lua", "stats.lua", "finished.lua", "states.lua", "transition.lua", "signal.lua", "due.lua")
	finishScript = scripts.Load("execution_finish.lua", "fair.lua", "stats.lua", "finished.lua", "states.lua", "transition.lua", "signal.lua")
)

// dueBatch bounds how much due work (expired leases, due retries, passed
// deadlines) one claim does, as it bounds the reaper's.
const dueBatch = store.DueBatch

// queue runs one queue's execution scripts. All its keys share the queue's
// hash tag, so each script is atomic on a Redis Cluster too.
type queue struct {
	name string
	// st sends the queue's commands; the slots of concurrency keys are
	// its lease sets, one per key for the whole fleet, each in the key's
	// own hash slot.
	st        *store.Store
	rdb       redis.UniversalClient
	keys      keys.Space
	ttl       time.Duration
	retention time.Duration
	backoff   func(attempt int) time.Duration
	maxEvents int // per execution
	limits    *limits
	// back is how soon this worker comes back to a lane whose keys were
	// full: how long a refusal marks the jobs as waiting (store.AcquireLeases).
	back time.Duration
	// usageTTL is how long a day's usage counts are kept (0: executions
	// are not counted).
	usageTTL time.Duration
	metrics  *metrics
	// hints is what the last claim left for the next (see hints); never
	// nil.
	hints atomic.Pointer[hints]
	// waits holds when this worker's claims first saw each job refused by
	// a key's budget, for the trace of its execution (budgetWaits).
	waits budgetWaits
	// folds is where the reaper's next fold starts (fold.go); the reaper
	// alone uses it.
	folds store.FoldCursor
	// alongFor is how long the peek read along with a fused claim stands
	// in for the next claim's own (hints.along).
	alongFor time.Duration
	// acked is whether its client waits for replicas (see confirmation):
	// 0 not known yet, 1 it does, 2 it does not.
	acked atomic.Int32
	// kinds are the kinds the worker serves, as the peek script takes
	// them, and serves the same as a set: a claim looks at no lane of
	// another kind and takes no job of one (see serves). Set before the
	// worker claims.
	kinds  []any
	served map[string]bool
}

// serves says whether the worker serves the jobs of lane: those of its
// kinds.
func (q *queue) serves(lane string) bool { return q.served[scripts.LaneKind(lane)] }

// waiting says whether q's client waits for replicas, asking once.
func (q *queue) waiting(ctx context.Context) bool {
	switch q.acked.Load() {
	case 1:
		return true
	case 2:
		return false
	}
	waits, err := replicas.Waiting(ctx, q.rdb)
	if err != nil {
		return true // asked again next time; this claim waits as if it did
	}
	if waits {
		q.acked.Store(1)
	} else {
		q.acked.Store(2)
	}
	return waits
}

// tenantsOf reads the tenant of each retired job, whose listing entry
// (the tenant's index) the claim removes with the record, in one step
// (scripts.ReadTenant, in a transaction); "" for a record already gone.
func (q *queue) tenantsOf(ctx context.Context, retired []string) ([]string, error) {
	if len(retired) == 0 {
		return nil, nil
	}
	reads := make([]scripts.TenantRead, len(retired))
	if _, err := q.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for k, id := range retired {
			reads[k] = scripts.ReadTenant(ctx, p, q.keys.Job(q.name, id), q.keys.JobFolded(q.name, id))
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("claim %s: tenants of retired jobs: %w", q.name, err)
	}
	tenants := make([]string, len(retired))
	for k, r := range reads {
		tenants[k] = r.Tenant()
	}
	return tenants, nil
}

// confirmation is the WAIT for replicas (LEASEHOLD_REDIS_MIN_REPLICAS)
// that a claim's handlers wait for. On one primary (a single Redis, or
// Sentinel's) the claim script runs on a connection of its own, without
// its WAIT, and the worker sends the WAIT on that connection once the
// claim has returned (Worker.confirmer): the next claim need not wait for
// the replica, and one WAIT after several claims confirms them all (the
// primary's offset after the last one's writes covers the earlier ones').
// On a Cluster each round trip carries its WAIT, as before: the claim's
// slots are on other shards.
type confirmation struct {
	owed replicas.Owed
	conn *redis.Conn // the claim script's
}

func (c *confirmation) close() { _ = c.conn.Close() }

// laneCosts holds the cost of the last job read of each lane with a tpm
// key, at most maxLaneCosts lanes (then it starts over): the early ask
// reserves it for the lane's next jobs before they are read, which costs
// a claim a round trip and a command a job less. A lane's jobs usually
// cost alike (one caller's prompts and max_tokens); a job that costs more
// is left by the claim script and claimed again at once, and one that
// costs less holds the difference of its budget until it settles.
type laneCosts struct {
	mu sync.Mutex
	m  map[string]int64
}

const maxLaneCosts = 4096

func (l *laneCosts) get(lane string) (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.m[lane]
	return c, ok
}

func (l *laneCosts) set(lane string, cost int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil || len(l.m) >= maxLaneCosts {
		l.m = map[string]int64{}
	}
	l.m[lane] = cost
}

// jobsLeft returns, for each lane at the head of which a claim read fewer
// jobs than the per it asked for (all it had), how many of them it did not
// take. read holds the lane of each job read.
func jobsLeft(heads, read []string, per int, claimed []*Execution) map[string]int {
	n := map[string]int{}
	for _, lane := range read {
		n[lane]++
	}
	taken := map[string]int{}
	for _, e := range claimed {
		taken[e.lane]++
	}
	left := map[string]int{}
	for _, lane := range heads {
		if n[lane] < per { // a taken due job of the lane counts too: a hint
			left[lane] = max(0, n[lane]-taken[lane])
		}
	}
	return left
}

// peekReply is the peek script's reply (see execution_peek.lua): the work
// a claim may do, each list at most dueBatch long but heads.
type peekReply struct {
	heads     []string // lanes at the head of the ready set, best first
	scheduled []string // scheduled jobs now due
	expired   []string // jobs whose execution's lease expired
	overdue   []string // jobs past their max_wait
	retired   []string // terminal jobs past their retention
}

// decodePeek reads the peek script's reply, checking its length and every
// value's type: a script and its caller that disagree return an error,
// never a panic.
func decodePeek(res []any) (peekReply, error) {
	if len(res) != 5 {
		return peekReply{}, fmt.Errorf("peek reply of %d values: want 5 lists", len(res))
	}
	var out peekReply
	var errs [5]error
	for i, dst := range []*[]string{&out.heads, &out.scheduled, &out.expired, &out.overdue, &out.retired} {
		*dst, errs[i] = stringList(res[i])
	}
	if err := errors.Join(errs[:]...); err != nil {
		return peekReply{}, fmt.Errorf("peek reply: %w", err)
	}
	return out, nil
}

// due returns the jobs with due work, each once: those past their
// max_wait, then those whose lease expired, then the scheduled ones due.
func (p peekReply) due() []string {
	seen := map[string]bool{}
	var ids []string
	for _, list := range [][]string{p.overdue, p.expired, p.scheduled} {
		for _, id := range list {
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// full says a kind of due work filled its batch: there may be more of it.
func (p peekReply) full() bool {
	return len(p.scheduled) == dueBatch || len(p.expired) == dueBatch || len(p.overdue) == dueBatch ||
		len(p.retired) == dueBatch
}

// claimReply is the claim script's reply (see execution_claim.lua).
type claimReply struct {
	blocked []string         // lanes left waiting for a full key
	expired []string         // the lane of each job expired at max_wait
	costs   map[string]int64 // lane -> the cost of its last job read that had reserved tokens
	jobs    []claimedJob
}

// claimedJob is one job the claim handed out.
type claimedJob struct {
	id, execID   string
	token        fencing.Token
	attempt      int
	kind, tenant string
	input        json.RawMessage
	timeout      time.Duration
	// the traceparents of the job's submit span and of its last finished
	// execution ("" or nil when there is none)
	trace, prevTrace any
	resume           Resume
}

// decodeClaim reads the claim script's reply, checking every length and
// type: a script and its caller that disagree return an error, never a
// panic or a job run with half its fields.
func decodeClaim(res []any) (claimReply, error) {
	var out claimReply
	if len(res) < 3 || (len(res)-3)%claimedJobFields != 0 {
		return out, fmt.Errorf("claim reply of %d values: want 3 lists and %d values per job", len(res), claimedJobFields)
	}
	blocked, err1 := stringList(res[0])
	expired, err2 := stringList(res[1])
	costs, err3 := stringList(res[2])
	if err := errors.Join(err1, err2, err3); err != nil {
		return out, fmt.Errorf("claim reply: %w", err)
	}
	if len(costs)%2 != 0 {
		return out, fmt.Errorf("claim reply: %d values of costs, want 2 each", len(costs))
	}
	out.blocked, out.expired = blocked, expired
	for i := 0; i < len(costs); i += 2 {
		if out.costs == nil {
			out.costs = map[string]int64{}
		}
		out.costs[costs[i]], _ = strconv.ParseInt(costs[i+1], 10, 64) // "" or "0" for a job without one
	}
	for f := res[3:]; len(f) > 0; f = f[claimedJobFields:] {
		j, err := decodeClaimedJob(f[:claimedJobFields])
		if err != nil {
			return out, fmt.Errorf("claim reply: job %d: %w", len(out.jobs)+1, err)
		}
		out.jobs = append(out.jobs, j)
	}
	return out, nil
}

// claimedJobFields is how many values the claim script returns per job.
const claimedJobFields = 12

func decodeClaimedJob(f []any) (claimedJob, error) {
	id, ok1 := f[0].(string)
	execID, ok2 := f[1].(string)
	token, ok3 := f[2].(int64)
	attempt, ok4 := f[3].(int64)
	kind, ok5 := f[4].(string)
	input, ok6 := f[5].(string)
	timeout, ok7 := f[6].(string)
	tenant, ok8 := f[7].(string)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7 && ok8) {
		return claimedJob{}, fmt.Errorf("a value of the wrong type in %v", f)
	}
	checkpoint, ok9 := f[10].(string)
	signal, ok10 := f[11].(string)
	if !(ok9 && ok10) {
		return claimedJob{}, fmt.Errorf("a value of the wrong type in %v", f)
	}
	ms, err := strconv.ParseInt(timeout, 10, 64)
	if err != nil || ms < 0 {
		return claimedJob{}, fmt.Errorf("job %s has a bad timeout %q", id, timeout)
	}
	j := claimedJob{id: id, execID: execID, token: fencing.Token(token), attempt: int(attempt), kind: kind,
		tenant: tenant, input: json.RawMessage(input), timeout: time.Duration(ms) * time.Millisecond,
		trace: f[8], prevTrace: f[9]}
	if checkpoint != "" {
		j.resume.Checkpoint = json.RawMessage(checkpoint)
	}
	if signal != "" {
		j.resume.Signal = &job.Signal{}
		if err := json.Unmarshal([]byte(signal), j.resume.Signal); err != nil {
			return claimedJob{}, fmt.Errorf("job %s has a bad signal %q: %w", id, signal, err)
		}
	}
	return j, nil
}

// stringList reads a list of strings from a script reply.
func stringList(v any) ([]string, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%T, want a list", v)
	}
	out := make([]string, len(list))
	for i, e := range list {
		if out[i], ok = e.(string); !ok {
			return nil, fmt.Errorf("%T in a list of strings", e)
		}
	}
	return out, nil
}

// reservation is what a claim took of its candidates' concurrency keys
// before the claim script ran.
type reservation struct {
	// held says, for each candidate, whether it holds a slot of every one
	// of its keys ("1"), was refused one ("0", its lane waits for a full
	// key) or was not asked for (""): the claim script's ARGV.
	held []string
	// execIDs holds, for each candidate, the execution id it runs under
	// if claimed.
	execIDs []string
	// got lists, for each key, the execution ids it gave a slot.
	got map[string][]string
	// granted counts, for each execution id, the keys that gave it a slot.
	granted map[string]int
	// cost holds, for each execution id asked for with a tpm key, the
	// tokens it reserved.
	cost map[string]int64
	// byBudget holds, for each execution id refused by a key whose budget
	// refused a holder of the claim (store.LeaseGrant.ByBudget), that key.
	byBudget map[string]string
	// room is the soonest a budget that refused one has room again.
	room time.Duration
	// refused holds, for each execution id refused a slot, the keys that
	// refused it; full, those keys for each tenant (fullFor).
	refused map[string][]string
	full    map[string]bool
	// later holds the asks of keys without a limit or a budget that a
	// fused claim takes in its own round trip (see reserve), counted in
	// got and granted already: such a key grants every ask.
	later []store.LeaseAsk
	// err holds the errors of asks Redis could not run (a key's Cluster
	// shard down, a lease set of the wrong type): their holders got no
	// slot, and the claim goes on with the others.
	err error
}

// add records what asks got, or the error that kept each from Redis.
func (r *reservation) add(asks []store.LeaseAsk, grants []store.LeaseGrant, errs []error) {
	for j, ask := range asks {
		r.err = errors.Join(r.err, errs[j])
		for h, tok := range grants[j].Tokens {
			if tok != 0 {
				r.took(ask.Key, ask.Holders[h])
				continue
			}
			if r.refused == nil {
				r.refused = map[string][]string{}
			}
			r.refused[ask.Holders[h]] = append(r.refused[ask.Holders[h]], ask.Key)
			if grants[j].ByBudget {
				r.byBudget[ask.Holders[h]] = ask.Key
				if r.room == 0 || grants[j].RetryAfter < r.room {
					r.room = grants[j].RetryAfter
				}
			}
		}
	}
}

// took records that holder got a slot of key.
func (r *reservation) took(key, holder string) {
	r.granted[holder]++
	r.got[key] = append(r.got[key], holder)
}

// tookLater records what the asks of later got, taken in the claim's own
// round trip and counted as granted by reserve: a holder refused, or of an
// ask Redis could not run, holds no slot of that key after all. It stays
// in got, released with the slots unused: a release takes out nothing
// where Redis took nothing, and the slot it took where only the reply was
// lost.
func (r *reservation) tookLater(grants []store.LeaseGrant, errs []error) {
	for j, ask := range r.later {
		r.err = errors.Join(r.err, errs[j])
		for h, holder := range ask.Holders {
			if errs[j] != nil || grants[j].Tokens[h] == 0 {
				r.granted[holder]--
			}
		}
	}
}

// slotAsks gathers the slots a claim asks for: one store.LeaseAsk per key.
type slotAsks struct {
	list []store.LeaseAsk
	at   map[string]int // key -> its ask in list
}

// add asks for a slot of every one of keys for holder, whose job is
// estimated to spend tokens of the keys' tpm budgets.
func (a *slotAsks) add(limits *limits, keys []string, holder string, tokens int64) {
	if a.at == nil {
		a.at = map[string]int{}
	}
	for _, k := range keys {
		j, ok := a.at[k]
		if !ok {
			j = len(a.list)
			a.at[k] = j
			a.list = append(a.list, limits.ask(k))
		}
		a.list[j].Holders = append(a.list[j].Holders, holder)
		if a.list[j].Budget.TPM > 0 {
			a.list[j].Tokens = append(a.list[j].Tokens, tokens)
		}
	}
}

// needsCost reports whether one of keys has a tpm budget: a slot of it
// reserves the job's estimated tokens, which only its record knows.
func (l *limits) needsCost(keys []string) bool {
	for _, k := range keys {
		if l.budgetOf(k).TPM > 0 {
			return true
		}
	}
	return false
}

// earlyAsk is the slots a claim asks for before it knows its candidates,
// in the peek's round trip: the lanes at the head seldom change between
// two claims, and a lane's jobs share its keys (the lane is their list).
type earlyAsk struct {
	ids       map[string][]string // lane -> the execution ids asked for
	cost      map[string]int64    // execution id -> the tokens asked for it, for a lane with a tpm key
	asks      slotAsks
	acquiring *store.LeasesAcquiring
}

// askEarly returns the early ask of a claim of want jobs that the last
// claim left h (hints.early): an execution id for each slot planned, and
// the asks for their keys. nil when there is nothing to ask for.
func (q *queue) askEarly(want int, h *hints) *earlyAsk {
	slots := h.early(want, q.keysOf, q.limits.needsCost)
	if len(slots) == 0 {
		return nil
	}
	e := &earlyAsk{ids: map[string][]string{}, cost: map[string]int64{}}
	for _, s := range slots {
		id := newExecID()
		if s.reserve {
			e.cost[id] = s.cost
		}
		e.ids[s.lane] = append(e.ids[s.lane], id)
		e.asks.add(q.limits, s.keys, id, s.cost)
	}
	return e
}

func newExecID() string { return uuid.Must(uuid.NewV7()).String() }

// reserve takes, for up to want of pl's candidates, a slot of every one
// of their concurrency keys, member the execution id each would run
// under, all or none, and records in r each candidate's execution id and
// what it holds. A candidate whose lane
// has slots left of the early ask takes those; for the others it asks now,
// one script per key, all in one round trip. On a Redis Cluster a key's
// lease set is in a slot of its own, not the queue's, so no script can
// take the job and its slots at once; the slots come first, and the claim
// script takes only candidates holding all of theirs. Every key gets a
// lease, limited or not: a limit set later counts the executions already
// running.
//
// The candidates asked for are chosen as the claim script serves lanes
// (ask). A fused claim's asks whose keys grant every ask are left to the claim's
// own round trip (r.later): no round trip is spent on an answer known
// before it is asked.
func (q *queue) reserve(ctx context.Context, r *reservation, want int, pl claimPlan, early *earlyAsk, fused bool, blocked *waits) error {
	ids, lanes, ckeys := pl.ids, pl.lanes, pl.ckeys
	r.held = make([]string, len(lanes))
	execIDs := make([]string, len(lanes))
	asked := ask(want, lanes, ckeys, blocked, q.serves)
	var pool map[string][]string
	if early != nil {
		pool = early.ids
	}
	var fresh []int // the candidates asked for now: the early ask did not cover them
	for _, i := range asked {
		if ids := pool[lanes[i]]; len(ids) > 0 {
			execIDs[i], pool[lanes[i]] = ids[0], ids[1:]
			if c, ok := early.cost[execIDs[i]]; ok {
				r.cost[execIDs[i]] = c
			}
			continue
		}
		fresh = append(fresh, i)
	}
	costs, err := q.readCosts(ctx, fresh, ids, ckeys)
	if err != nil {
		return err
	}
	var asks slotAsks
	for _, i := range fresh {
		execIDs[i] = newExecID()
		if c, ok := costs[i]; ok {
			r.cost[execIDs[i]] = c
		}
		asks.add(q.limits, ckeys[i], execIDs[i], costs[i])
	}
	for i := range execIDs {
		if execIDs[i] == "" {
			execIDs[i] = newExecID() // not asked for: not claimed, but the claim script's ARGV has one for each candidate
		}
	}
	switch {
	case fused && grantAll(asks.list):
		// Every ask is granted: the claim's round trip takes them, before
		// its script (commit).
		r.later = asks.list
		for _, ask := range asks.list {
			for _, h := range ask.Holders {
				r.took(ask.Key, h)
			}
		}
	case len(asks.list) > 0:
		grants, errs := q.st.AcquireLeases(ctx, q.ttl, q.back, asks.list)
		r.add(asks.list, grants, errs)
	}
	for _, i := range asked {
		r.held[i] = "0"
		if r.granted[execIDs[i]] == len(ckeys[i]) {
			r.held[i] = "1"
			if c, ok := r.cost[execIDs[i]]; ok {
				r.held[i] = "1:" + strconv.FormatInt(c, 10) // the claim script checks the job's cost against it
			}
		}
	}
	// A candidate not asked for whose tenant a key of its refused waits too.
	r.full = r.fullFor(asked, execIDs, ckeys)
	for i := range lanes {
		if r.held[i] == "" && lanes[i] != "" && q.serves(lanes[i]) && len(r.full) > 0 && waitsToo(r.full, ckeys[i]) {
			r.held[i] = "0"
		}
	}
	r.execIDs = execIDs
	return nil
}

// grantAll says whether every ask of asks is granted to all its holders.
func grantAll(asks []store.LeaseAsk) bool {
	for _, a := range asks {
		if !a.GrantsAll() {
			return false
		}
	}
	return true
}

// lanesGrantAll says whether every key of lanes grants every ask, as the
// worker's limits stand.
func (q *queue) lanesGrantAll(lanes []string) bool {
	for _, lane := range lanes {
		for _, k := range q.keysOf(lane) {
			if !q.limits.ask(k).GrantsAll() {
				return false
			}
		}
	}
	return true
}

// keysOf returns the keys a job of lane holds slots of: its concurrency
// keys and their share keys (limits.withShares).
func (q *queue) keysOf(lane string) []string { return q.limits.withShares(scripts.LaneKeys(lane)) }

// readCosts reads, in one round trip, the estimated tokens of the
// candidates asked for whose keys have a tpm budget (none: no round trip).
func (q *queue) readCosts(ctx context.Context, asked []int, ids []string, ckeys [][]string) (map[int]int64, error) {
	cmds := map[int]*redis.StringCmd{}
	for _, i := range asked {
		if q.limits.needsCost(ckeys[i]) {
			cmds[i] = nil
		}
	}
	if len(cmds) == 0 {
		return nil, nil
	}
	if _, err := q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range cmds {
			cmds[i] = p.HGet(ctx, q.keys.Job(q.name, ids[i]), "cost")
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("claim %s: read costs: %w", q.name, err)
	}
	out := make(map[int]int64, len(cmds))
	for i, c := range cmds {
		out[i], _ = strconv.ParseInt(c.Val(), 10, 64) // "" for a job without one: 0
	}
	return out, nil
}

// unused returns, by key, the slots r took for executions that are not
// among claimed: candidates refused a slot of another key, or not taken
// by the claim script.
func (r reservation) unused(claimed []*Execution) map[string][]string {
	if len(r.got) == 0 {
		return nil
	}
	taken := make(map[string]bool, len(claimed))
	for _, e := range claimed {
		taken[e.ID] = true
	}
	out := map[string][]string{}
	for key, ids := range r.got {
		for _, id := range ids {
			if !taken[id] {
				out[key] = append(out[key], id)
			}
		}
	}
	return out
}

// release gives back slots of concurrency keys (key -> execution ids) that
// no execution ran under, in one round trip: the reservations of a key with
// a budget leave its window.
func (q *queue) release(ctx context.Context, held map[string][]string) error {
	if len(held) == 0 {
		return nil
	}
	var settles []*store.LeaseSettling
	_, err := q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for key, ids := range held {
			ss := make([]store.LeaseSettlement, len(ids))
			for i, id := range ids {
				ss[i] = store.LeaseSettlement{Holder: id, Outcome: store.LeaseUnused, Tokens: -1}
			}
			if s := q.releaseIn(ctx, p, key, ss); s != nil {
				settles = append(settles, s)
			}
		}
		return nil
	})
	if scripts.NoScript(err) {
		err = nil // a settlement Redis lost the script of is sent again below
	}
	for _, s := range settles {
		_, serr := s.Settled(ctx)
		err = errors.Join(err, serr)
	}
	return err
}

// releaseIn queues on p the end of holders' slots of key: a plain release,
// or, for a key with a budget, a settlement of what each reserved. It
// returns the settlement, nil for a plain release.
func (q *queue) releaseIn(ctx context.Context, p redis.Pipeliner, key string, ss []store.LeaseSettlement) *store.LeaseSettling {
	b := q.limits.budgetOf(key)
	if b.IsZero() {
		holders := make([]string, len(ss))
		for i, s := range ss {
			holders[i] = s.Holder
		}
		q.st.ReleaseLeasesIn(ctx, p, key, holders...)
		return nil
	}
	return q.st.SettleLeasesIn(ctx, p, key, int(q.limits.of(key)), leaseBudget(b), ss)
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

// heartbeat renews every execution of execs (all of this queue): their
// leases and the slots of their keys (store.HeartbeatExecutions).
func (q *queue) heartbeat(ctx context.Context, execs []*Execution) ([]store.ExecutionStatus, error) {
	p := store.HeartbeatParams{Queue: q.name, TTL: q.ttl, Executions: make([]store.RunningExecution, len(execs))}
	for i, e := range execs {
		p.Executions[i] = e.owner()
	}
	return q.st.HeartbeatExecutions(ctx, p)
}

// usageDay names the usage day the queue's claims and finishes count in
// now, and when its counts are dropped (unix ms; "" when the worker counts
// no usage: see Config.Usage), as the scripts take them.
func (q *queue) usageDay() (key string, dropAt any) {
	now := time.Now()
	if q.usageTTL == 0 {
		return q.keys.QueueUsage(q.name, now), ""
	}
	return q.keys.QueueUsage(q.name, now), usage.DropAt(now, q.usageTTL).UnixMilli()
}

// finishing is one execution's finish, and what came of it.
type finishing struct {
	e     *Execution
	o     outcome
	state job.State
	err   error
	done  chan struct{} // closed once state or err is set
}

// finishBatch is the finishes of one queue, written by one finish script.
type finishBatch struct {
	fs  []*finishing
	a   scripts.Args
	run *scripts.Queued
}

func newFinishBatch(q *queue, fs []*finishing) *finishBatch {
	day, drop := q.usageDay()
	b := &finishBatch{
		fs: fs,
		a: scripts.Args{
			Keys: []string{q.keys.QueueLeases(q.name), q.keys.QueueReady(q.name), q.keys.QueueScheduled(q.name),
				q.keys.QueueFair(q.name), q.keys.QueueStats(q.name), q.keys.QueueRetired(q.name)},
			Argv: []any{q.retention.Milliseconds(), scripts.EventsMaxLen, len(fs), drop},
		},
	}
	for _, f := range fs {
		id := f.e.JobID
		b.a.Keys = append(b.a.Keys, q.keys.Job(q.name, id), q.keys.JobEvents(q.name, id), q.keys.QueueLane(q.name, f.e.lane))
	}
	b.a.Keys = append(b.a.Keys, day, q.keys.QueueWebhooks(q.name))
	for _, f := range fs {
		var errJSON []byte
		if f.o.err != nil {
			errJSON, _ = json.Marshal(f.o.err) // a struct of two strings always marshals
		}
		retry := "0"
		if f.o.retryable {
			retry = "1"
		}
		backoff := max(q.backoff(f.e.attempt), f.o.minBackoff)
		if f.o.state == StatePushback {
			backoff = f.o.minBackoff // the script backs off when the upstream did not say
		}
		var waitFor string
		var waitMS int64
		if w := f.o.wait; w != nil {
			waitFor, waitMS = w.For, w.Timeout.Milliseconds()
		}
		b.a.Argv = append(b.a.Argv, f.e.JobID, f.e.token.String(), f.e.attempt, string(f.o.state), f.o.result, errJSON, retry,
			backoff.Milliseconds(), f.e.traceparent(), f.e.ID, waitFor, waitMS)
	}
	return b
}

// settlement is what f's end settles of key's budget: the upstream served
// it, refused it for capacity (a pushback that concerns key), or neither (a
// failure, a cancel, another key's pushback).
func (f *finishing) settlement(key string) store.LeaseSettlement {
	s := store.LeaseSettlement{Holder: f.e.ID, Outcome: store.LeaseOther, Tokens: f.e.tokens(), Estimate: f.e.cost}
	switch {
	case f.o.unrun:
		s.Outcome = store.LeaseUnused // no request started: it leaves the window
	case f.o.state == StateSucceeded:
		s.Outcome = store.LeaseOK
	case f.o.pushedBackOn(key):
		s.Outcome, s.RetryAfter = store.LeasePushback, f.o.minBackoff
	}
	return s
}

// finishAll records how each execution of fs ended and releases its leases,
// if it still owns its job: one script per queue, all of them in one round
// trip (a pipeline, split per node on a cluster). Each gets the job's new
// state, or ErrNotOwner, or the error that kept it from being written.
// The slots of their concurrency keys are released in the same round trip,
// whatever the finish finds: the handlers have stopped, and a release
// removes only the execution's own member. (A key's lease set is in a slot
// of its own, so this cannot be one atomic step with the finish; a worker
// that dies between the two leaves the slots to expire with their TTL.)
func finishAll(ctx context.Context, rdb redis.UniversalClient, fs []*finishing) {
	byQueue := map[*queue][]*finishing{}
	for _, f := range fs {
		byQueue[f.e.q] = append(byQueue[f.e.q], f)
	}
	var batches []*finishBatch
	for q, fs := range byQueue {
		batches = append(batches, newFinishBatch(q, fs))
	}
	type settling struct {
		q   *queue
		key string
		ss  []store.LeaseSettlement
		run *store.LeaseSettling
	}
	var settlings []*settling
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, b := range batches {
			b.run = finishScript.In(ctx, p, rdb, b.a)
		}
		for q, fs := range byQueue {
			held := map[string][]store.LeaseSettlement{}
			for _, f := range fs {
				for _, k := range f.e.keys {
					held[k] = append(held[k], f.settlement(k))
				}
			}
			for k, ss := range held {
				if run := q.releaseIn(ctx, p, k, ss); run != nil {
					settlings = append(settlings, &settling{q, k, ss, run})
				}
			}
		}
		return nil
	})
	for _, s := range settlings {
		// A settlement lost leaves the estimates standing until the window
		// forgets them, and the slots to expire with their TTL.
		b := s.q.limits.budgetOf(s.key)
		_, err := s.run.Settled(ctx)
		s.q.metrics.settled(ctx, s.key, b, s.ss, err)
	}
	for _, b := range batches {
		states, err := b.run.Reply(ctx).StringSlice()
		if err == nil && len(states) != len(b.fs) {
			err = fmt.Errorf("%d states in the reply, want %d", len(states), len(b.fs))
		}
		for i, f := range b.fs {
			switch {
			case err != nil:
				f.err = fmt.Errorf("finish %s: %w", f.e.JobID, err)
			case states[i] == "":
				f.err = ErrNotOwner
			default:
				f.state = job.State(states[i])
			}
		}
	}
}

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
