package execution

import (
	"sync"
	"time"
)

// hints is what one claim of a queue leaves for the next: what it saw,
// which the next claim's planning reads (look, early, takeAlong) and
// nothing else of the claims before. A claim reads the last hints once
// and stores its own once, as it returns (queue.claim). A queue's claims
// follow one another (Worker.fetch), so the hints need no lock; the
// worker's idle wait reads room between them.
type hints struct {
	// heads are the lanes the claim's peek saw at the head of the ready
	// set: the next claim reads their first jobs along with its peek.
	heads []string
	// blocked is what the claim found waiting for a full key: the next
	// one looks at more lanes, reads one job of each lane that waits (its
	// jobs share its keys: one tells whether there is room for any) and
	// asks for one of each tenant's (see waits). nil: none.
	blocked *waits
	// left holds, for each lane of heads whose jobs the claim read to
	// the end, how many of them it did not take: the next claim asks
	// early for no more slots for it than that (early).
	left map[string]int
	// room is when the budget that refused the claim's jobs has room
	// again (its throttle ends, its window frees a request or tokens);
	// zero when none did: an idle worker claims again then, not a poll
	// later.
	room time.Time
	// along is the next claim's peek, read in a fused claim's round trip,
	// for the next claim if it follows within alongFor (see fused); nil
	// when none. It is taken once: the claim that reads it leaves none.
	along *peeked
	// costs holds the cost of the last job the claim script read of each
	// lane with a tpm key: the early ask reserves it for the lane's next
	// jobs, before they are read (laneCosts). Unlike the rest it is
	// carried from claim to claim and kept up to date in place: a lane's
	// cost stands until a job of it is read again.
	costs *laneCosts
}

// look is how many lanes at the head a claim of want jobs peeks at: while
// keys are full, more, so that the lanes waiting for them do not hide the
// ones behind that can run; otherwise want lanes are enough, and cheaper.
func (h *hints) look(want int) int {
	if h.blocked.any() {
		return min(want*4+16, 256)
	}
	return want
}

// earlySlot is one execution's slots that a claim asks for early: those
// of keys, the keys of a job of lane, reserving cost tokens of their tpm
// budgets when reserve is set.
type earlySlot struct {
	lane    string
	keys    []string
	cost    int64
	reserve bool
}

// early plans the slots a claim of want jobs asks for before it knows its
// candidates (askEarly): for want executions, taking turns between the
// lanes at the head, at most as many for a lane as the jobs of it the
// claim reads (perLaneOf), and as the last claim left of it when it read
// them all (left); none for a lane left waiting for a full key (it would
// only be refused again), nor for a lane with a tpm key whose cost no
// claim has read yet (its jobs' estimates are not known before they are
// read: it reserves its last job's, which the claim script checks).
// keysOf gives the keys of a lane's jobs, needsCost whether keys have a
// tpm budget. An ask for jobs that are not there would hold slots that
// others wait for until the claim gives them back.
func (h *hints) early(want int, keysOf func(lane string) []string, needsCost func(keys []string) bool) []earlySlot {
	per := perLaneOf(want, h.heads, h.blocked)
	keys := map[string][]string{}
	var out []earlySlot
	for round := 0; round < per && len(out) < want; round++ {
		for _, lane := range h.heads {
			if len(out) == want || h.blocked.has(lane) {
				continue
			}
			if k, ok := h.left[lane]; ok && round >= k {
				continue
			}
			ks, ok := keys[lane]
			if !ok {
				ks = keysOf(lane)
				keys[lane] = ks
			}
			s := earlySlot{lane: lane, keys: ks, reserve: needsCost(ks)}
			if s.reserve {
				if s.cost, ok = h.costs.get(lane); !ok {
					continue
				}
			}
			out = append(out, s)
		}
	}
	return out
}

// takeAlong returns the peek read along with the last claim for a claim
// of want jobs, when it is younger than alongFor, was read for at least
// want (enough lanes, and jobs of each), found lanes at the head (a claim
// after one that found none has been woken, or has polled: it peeks
// afresh), and grantAll says their keys grant every ask (the peek's own
// round trip asks early for the slots of a limited key, and reserves a
// budget's tokens before the jobs are read: see askEarly).
func (h *hints) takeAlong(want int, alongFor time.Duration, grantAll func(lanes []string) bool) (peeked, bool) {
	p := h.along
	if p == nil || time.Since(p.read) > alongFor || p.want < want || len(p.heads) == 0 || !grantAll(p.heads) {
		return peeked{}, false
	}
	return *p, true
}

// ask chooses the candidates a claim of want jobs asks slots for, of
// those in lanes (each one's lane, "" for a job gone) with keys ckeys: as
// the claim script serves lanes, one job of each in turn, so that a slot
// taken is seldom left unused; of the lanes that wait for a full key
// (blocked), one per tenant. A candidate of a lane serves does not take
// (another worker's kind) is not asked for.
func ask(want int, lanes []string, ckeys [][]string, blocked *waits, serves func(lane string) bool) []int {
	byLane := map[string][]int{}
	var order []string
	for i, lane := range lanes {
		if lane == "" || !serves(lane) {
			continue // the job is gone, or of a kind another worker serves
		}
		if _, ok := byLane[lane]; !ok {
			order = append(order, lane)
		}
		byLane[lane] = append(byLane[lane], i)
	}
	var asked []int
	probe := map[string]string{} // tenant key -> the one of its lanes that waits asked for
	for round := 0; len(asked) < want; round++ {
		more := false
		for _, lane := range order {
			c := byLane[lane]
			if round >= len(c) || len(asked) == want {
				continue
			}
			if blocked.has(lane) {
				t := tenantKey(ckeys[c[0]])
				if p, ok := probe[t]; ok && p != lane {
					continue
				}
				probe[t] = lane
			}
			asked = append(asked, c[round])
			more = true
		}
		if !more {
			break
		}
	}
	return asked
}

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
