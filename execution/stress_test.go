package execution_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/lease"
)

// The stress tests of one concurrency key shared by every path: jobs of
// three queues run by three worker processes, and synchronous waiters
// (lease.Semaphore.Wait) in the test process, all call one fake upstream
// while they hold a slot of the key.

const stressKey = "model:x"

// stressQueues hash to three different Cluster slots, none of them the
// key's (TestStressOneKeyOnCluster checks it).
var stressQueues = []string{"stress-a", "stress-b", "stress-c"}

// upstream is the fake model provider: it counts the requests it is
// serving and records every moment it serves more than limit.
//
// A request counts from its arrival until the upstream answers it (after
// the "ms" it asks for) or its caller goes away (the connection closes:
// the caller's context ended, or its process was killed). This is what a
// provider that answers 429 past N requests in flight counts, and it is
// what invariant 1 means, "never more than limit holders working at
// once", for a caller that keeps its work inside its lease:
//   - A handler makes its call under its execution's context, so losing the
//     lease (a heartbeat that finds the slot gone, the trust timer) ends
//     the call at once, and the upstream stops counting it.
//   - A worker paused with SIGSTOP cannot end its call, but the upstream
//     answers it after its "ms" (at most 120 ms) all the same, as a real
//     one would: the paused holder's slot, renewed every 200 ms with a TTL
//     of 1 s, outlives that answer, so the slot passes to another holder
//     only after the upstream stopped counting the paused one.
//   - The answer is sent after the request stops counting, so a caller
//     releases its slot (and another holder can call) only after that.
//
// Counting at the upstream, not in the handlers, sees what the lease sets
// cannot: a holder working without a slot of its own (a claim that
// skipped the key, a slot released under a holder still working).
type upstream struct {
	*httptest.Server
	limit  int
	client *http.Client // the test process's callers' own, closed at the end

	mu     sync.Mutex
	in     map[int]caller // requests being served
	seq    int
	peak   int
	over   []string // what was in flight each time more than limit were
	served map[string]int
}

// caller is who made a request: the worker process ("" for the test
// process's waiters) and the holder of the slot (an execution id, or a
// waiter's holder name).
type caller struct{ worker, holder string }

func startUpstream(t *testing.T, limit int) *upstream {
	t.Helper()
	u := &upstream{limit: limit, in: map[int]caller{}, served: map[string]int{}}
	u.Server = httptest.NewServer(http.HandlerFunc(u.serve))
	u.client = &http.Client{Transport: &http.Transport{}}
	t.Cleanup(func() {
		u.client.CloseIdleConnections()
		u.Close()
	})
	return u
}

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	c := caller{worker: r.Header.Get("X-Worker"), holder: r.Header.Get("X-Holder")}
	ms, err := strconv.Atoi(r.URL.Query().Get("ms"))
	if c.holder == "" || err != nil {
		http.Error(w, "want X-Holder and ?ms=", http.StatusBadRequest)
		return
	}
	u.mu.Lock()
	u.seq++
	id := u.seq
	u.in[id] = c
	u.served[c.worker]++
	u.peak = max(u.peak, len(u.in))
	if len(u.in) > u.limit {
		u.over = append(u.over, fmt.Sprint(slices.Collect(maps.Values(u.in))))
	}
	u.mu.Unlock()

	work := time.NewTimer(time.Duration(ms) * time.Millisecond)
	select {
	case <-work.C:
	case <-r.Context().Done():
		work.Stop()
	}
	u.mu.Lock()
	delete(u.in, id)
	u.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// inFlight lists the holders of worker's requests being served now.
func (u *upstream) inFlight(worker string) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var holders []string
	for _, c := range u.in {
		if c.worker == worker {
			holders = append(holders, c.holder)
		}
	}
	return holders
}

// requests is how many requests the upstream has received, from everyone.
func (u *upstream) requests() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, s := range u.served {
		n += s
	}
	return n
}

// callUpstream makes one request to the fake upstream at url, which lasts
// ms unless ctx ends first.
func callUpstream(ctx context.Context, client *http.Client, url, worker, holder string, ms int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"?ms="+strconv.Itoa(ms), nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-Worker", worker)
	req.Header.Set("X-Holder", holder)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("upstream answered %s", resp.Status)
	}
	return nil
}

// TestStressOneKeyAcrossPaths: see stressOneKey.
func TestStressOneKeyAcrossPaths(t *testing.T) {
	t.Parallel()
	stressOneKey(t, newFixture(t))
}

// TestStressOneKeyOnCluster is the same stress on the three-master Redis
// Cluster, where the queues and the key are in different hash slots, so
// every claim takes its slots in one slot and its job in another.
func TestStressOneKeyOnCluster(t *testing.T) {
	t.Parallel()
	cluster := testenv.Cluster(t)
	f := newFixtureOn(t, cluster.Client(t), testenv.NATS(t).Conn(t))
	ks := keys.New(f.prefix)
	owner := masters(t, f.rdb)
	keySlot := f.rdb.ClusterKeySlot(t.Context(), ks.LeaseSet(stressKey)).Val()
	slots := map[int64]string{keySlot: "the key " + stressKey}
	apart := false
	for _, q := range stressQueues {
		s := f.rdb.ClusterKeySlot(t.Context(), ks.QueueReady(q)).Val()
		if other, ok := slots[s]; ok {
			t.Fatalf("queue %s hashes to slot %d, as %s does", q, s, other)
		}
		slots[s] = "queue " + q
		apart = apart || owner(s) != owner(keySlot)
	}
	if !apart {
		t.Fatalf("every queue is on the master of the key's slot %d: the claim never crosses masters", keySlot)
	}
	stressOneKey(t, f, envCluster+"="+strings.Join(cluster.Addrs(), ","))
}

// masters returns a function that names the master serving a hash slot.
func masters(t *testing.T, rdb redis.UniversalClient) func(slot int64) string {
	t.Helper()
	ranges, err := rdb.ClusterSlots(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return func(slot int64) string {
		for _, r := range ranges {
			if int64(r.Start) <= slot && slot <= int64(r.End) && len(r.Nodes) > 0 {
				return r.Nodes[0].Addr
			}
		}
		t.Fatalf("no master serves slot %d", slot)
		return ""
	}
}

// stressOneKey: one key with limit 5; 150 jobs over 3 queues, run by 3
// worker processes serving all 3; 20 synchronous waiters in line for the
// same key, 4 of them with a MaxWait too short to be granted and 4
// cancelled while they wait. Each job and each granted waiter holds its
// slot for one call to the fake upstream (30–120 ms). While executions
// run, one worker is killed with SIGKILL, and another is paused with
// SIGSTOP until every slot it held has expired and others have called the
// upstream since, then resumed.
//
// The upstream's count (see upstream) never exceeds 5, checked at every
// request; the key's live leases, sampled all along, never exceed 5; every
// job succeeds; every waiter is granted, cancelled or timed out, as
// WaitConfig.Done reports.
//
// Fails when a claim runs a job without a slot of its key, or when a slot
// is freed under a holder still working (see docs/architecture.md, "What
// the tests catch").
func stressOneKey(t *testing.T, f *fixture, helperEnv ...string) {
	const (
		limit     = 5
		ttl       = time.Second
		jobs      = 150
		waiters   = 20
		maxWait   = 30 * time.Millisecond // too short to be granted from the back of the line
		cancelIn  = 60 * time.Millisecond
		workers   = 3
		deadlines = 60 * time.Second
	)
	f.setLimit(t, stressKey, limit)
	u := startUpstream(t, limit)
	ks := keys.New(f.prefix)

	var ids []string
	for i := range jobs {
		ids = append(ids, f.submit(t, job.Submission{
			Kind: faultKind, Queue: stressQueues[i%len(stressQueues)], MaxAttempts: 10,
			Input: raw(fmt.Sprintf(`{"ms":%d}`, 30+rand.N(90))), ConcurrencyKeys: []string{stressKey},
		}).ID)
	}

	ctx, stop := context.WithTimeout(context.Background(), deadlines)
	var bg, waiting sync.WaitGroup // the sampler; the waiters
	defer func() {
		stop()
		waiting.Wait()
		bg.Wait()
	}()

	// The key's live leases, sampled until the end.
	var samples, peakLive int
	bg.Go(func() {
		for ctx.Err() == nil {
			held, err := liveMembers(ctx, f.rdb, ks.LeaseSet(stressKey))
			switch {
			case ctx.Err() != nil:
			case err != nil:
				t.Errorf("sample the lease set: %v", err)
				return
			case len(held) > limit:
				t.Errorf("%d live leases on %s, limit %d: %v", len(held), stressKey, limit, held)
				return
			}
			samples++
			peakLive = max(peakLive, len(held))
			time.Sleep(2 * time.Millisecond)
		}
	})

	fleet := make([]*testenv.Process, workers)
	for i := range fleet {
		fleet[i] = f.startHelper(t, "upstream", append([]string{
			envLeaseTTL + "=" + ttl.String(), envHeartbeat + "=200ms", envConcurrency + "=4",
			envID + "=stress-" + strconv.Itoa(i), envQueues + "=" + strings.Join(stressQueues, ","),
			envUpstream + "=" + u.URL,
		}, helperEnv...)...)
	}

	// The waiters join once jobs hold the key: the plain ones first, then,
	// behind them in line, those that time out or are cancelled.
	leases, err := lease.New(store.New(f.rdb, store.Config{Prefix: f.prefix}), lease.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sem := leases.Semaphore(stressKey, limit, ttl)
	const (
		plain = iota
		timesOut
		cancelled
	)
	kinds := make([]int, waiters)
	states := make([]lease.TicketState, waiters)
	wait := func(i int) {
		wctx, cancelWait := context.WithCancel(ctx)
		defer cancelWait()
		cfg := lease.WaitConfig{NATS: f.nc, Poll: lease.MinPoll, Done: func(s lease.TicketState) { states[i] = s }}
		var cancelling *time.Timer
		switch kinds[i] {
		case timesOut:
			cfg.MaxWait = maxWait
		case cancelled:
			cancelling = time.AfterFunc(cancelIn, cancelWait)
		}
		holder := "waiter-" + strconv.Itoa(i)
		p, err := sem.Wait(wctx, holder, cfg)
		if err != nil {
			return
		}
		// A cancel that came after the grant ends the permit's context:
		// then the waiter has nothing to do but release.
		if cancelling == nil || cancelling.Stop() {
			if err := callUpstream(p.Context(), u.client, u.URL, "", holder, 30+rand.N(90)); err != nil && p.Context().Err() == nil {
				t.Errorf("%s: %v", holder, err)
			}
		}
		if err := p.Release(); err != nil {
			t.Errorf("%s: release: %v", holder, err)
		}
	}
	testenv.Eventually(t, 20*time.Second, func() bool { return u.requests() >= limit }, "the workers never called the upstream")
	for i := range waiters {
		if i >= 12 {
			kinds[i] = timesOut + i%2
		}
		if i == 12 {
			testenv.Eventually(t, 10*time.Second, func() bool { return f.rdb.ZCard(ctx, ks.SemQueue(stressKey)).Val() >= 4 },
				"the waiters never lined up")
		}
		waiting.Go(func() { wait(i) })
	}

	// Faults, while executions run: kill one worker, pause another past
	// the TTL of every slot it held.
	var held []string
	testenv.Eventually(t, 20*time.Second, func() bool { return len(u.inFlight("stress-0")) > 0 },
		"worker 0 never called the upstream")
	fleet[0].Kill(t)
	testenv.Eventually(t, 20*time.Second, func() bool { held = u.inFlight("stress-1"); return len(held) > 0 },
		"worker 1 never called the upstream")
	fleet[1].Stop(t)
	testenv.Eventually(t, 20*time.Second, func() bool {
		live, err := liveMembers(ctx, f.rdb, ks.LeaseSet(stressKey))
		return err == nil && !slices.ContainsFunc(held, func(h string) bool { return slices.Contains(live, h) })
	}, "the paused worker's slots %v never expired", held)
	since := u.requests()
	testenv.Eventually(t, 20*time.Second, func() bool { return u.requests() >= since+limit },
		"nobody called the upstream after the paused worker's slots expired")
	fleet[1].Cont(t)

	testenv.Eventually(t, deadlines, func() bool {
		stats, err := f.store.Stats(ctx)
		if err != nil {
			return false
		}
		left := int64(0)
		for _, s := range stats {
			left += s.Queued + s.Running + s.Retrying
		}
		return len(stats) == len(stressQueues) && left == 0
	}, "not every job ended")
	waiting.Wait()
	stop()
	bg.Wait()

	u.mu.Lock()
	over, peak, served := u.over, u.peak, u.served
	u.mu.Unlock()
	for i, o := range over {
		if i == 5 {
			t.Errorf("… %d times in all", len(over))
			break
		}
		t.Errorf("the upstream served more than %d at once: %s", limit, o)
	}
	retried := 0
	for _, id := range ids {
		j := f.get(t, id)
		if j.State != job.StateSucceeded {
			t.Errorf("job %s ended %s (%+v)", id, j.State, j.Error)
		}
		if j.Attempt > 1 {
			retried++
		}
	}
	var outcomes [3]int
	for i, s := range states {
		switch {
		case s == lease.TicketGranted:
		case s == lease.TicketTimedOut && kinds[i] == timesOut, s == lease.TicketCancelled && kinds[i] == cancelled:
			outcomes[kinds[i]]++
			continue
		default:
			t.Errorf("waiter %d (kind %d) ended %v", i, kinds[i], s)
			continue
		}
		outcomes[plain]++
	}
	if outcomes[timesOut] == 0 || outcomes[cancelled] == 0 {
		t.Errorf("%d waiters timed out and %d were cancelled: the run did not try both", outcomes[timesOut], outcomes[cancelled])
	}
	t.Logf("upstream: %d requests (by worker %v), peak %d at once; lease set: %d samples, peak %d live; "+
		"%d jobs retried; waiters: %d granted, %d timed out, %d cancelled",
		u.requests(), served, peak, samples, peakLive, retried, outcomes[plain], outcomes[timesOut], outcomes[cancelled])
}
