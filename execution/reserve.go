package execution

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/store/scripts"
	"github.com/redis/go-redis/v9"
)

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
