package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/replicas"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// The Redis failover, for real: a Sentinel group or a Cluster with
// replicas, whose primary is killed with kill -9 while the API and the
// workers run on it (docs/operations.md, *Failover*).

// downstream is a fenced store behind the handlers: it sees each
// execution's token as it starts and counts executions in flight of the
// one limited key.
type downstream struct {
	mu       sync.Mutex
	tokens   map[string][]uint64 // job id → tokens in the order they came
	inFlight int
	most     int
	// hold, when set, keeps a job's first execution running until its
	// context ends (its lease is lost).
	hold bool
}

func newDownstream() *downstream { return &downstream{tokens: map[string][]uint64{}} }

func (d *downstream) handle(ctx context.Context, e *execution.Execution) (any, error) {
	d.mu.Lock()
	d.tokens[e.JobID] = append(d.tokens[e.JobID], uint64(e.Token()))
	first := len(d.tokens[e.JobID]) == 1
	d.inFlight++
	d.most = max(d.most, d.inFlight)
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.inFlight--
		d.mu.Unlock()
	}()
	wait := 50 * time.Millisecond
	if d.hold && first {
		wait = time.Hour
	}
	select {
	case <-time.After(wait):
		return "ok", nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// seen returns the tokens the downstream saw for job id.
func (d *downstream) seen(id string) []uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]uint64(nil), d.tokens[id]...)
}

// checkTokens fails the test when a job's tokens did not strictly grow: a
// fenced store would have refused the rightful owner, or taken two
// owners' writes.
func (d *downstream) checkTokens(t *testing.T) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, tokens := range d.tokens {
		for i := 1; i < len(tokens); i++ {
			if tokens[i] <= tokens[i-1] {
				t.Errorf("job %s: tokens %v do not strictly grow", id, tokens)
			}
		}
	}
}

// checkLimit fails the test when more than limit executions ran at once.
func (d *downstream) checkLimit(t *testing.T, limit int) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.most > limit {
		t.Errorf("%d executions of the limited key ran at once, the limit is %d", d.most, limit)
	}
}

// load submits jobs without pause, each retried with its Idempotency-Key
// until the API acknowledges it, and keeps what the API answered.
// change is an answer of another status than the one before, and when
// its request was sent.
type change struct {
	sent   time.Time
	status int
}

type load struct {
	f    *fixture
	body string

	mu        sync.Mutex
	acked     []string // ids, in the order acknowledged
	ackedAt   []time.Time
	statuses  map[int]int
	firstFail time.Time // the first 503
	recovered time.Time // the first 2xx after it
	changes   []change  // each answer whose status differs from the one before
	stop      chan struct{}
	done      chan struct{}
}

func startLoad(f *fixture, body string) *load {
	l := &load{f: f, body: body, statuses: map[int]int{}, stop: make(chan struct{}), done: make(chan struct{})}
	go l.run()
	f.t.Cleanup(l.end)
	return l
}

func (l *load) run() {
	defer close(l.done)
	for n := 0; ; n++ {
		key := fmt.Sprintf("failover-%d", n)
		for {
			select {
			case <-l.stop:
				return
			default:
			}
			sent := time.Now()
			req, _ := http.NewRequest(http.MethodPost, l.f.url+"/v1/jobs", strings.NewReader(l.body))
			req.Header.Set("Authorization", "Bearer "+acmeKey)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", key)
			resp, err := l.f.client.Do(req)
			if err != nil {
				l.f.t.Errorf("submit: %v", err)
				return
			}
			var j job.Job
			status := resp.StatusCode
			if status/100 == 2 {
				j = decodeBody[job.Job](l.f.t, resp)
			}
			resp.Body.Close()
			now := time.Now()
			l.mu.Lock()
			l.statuses[status]++
			if n := len(l.changes); n == 0 || l.changes[n-1].status != status {
				l.changes = append(l.changes, change{sent, status})
			}
			switch {
			case status/100 == 2:
				if !l.firstFail.IsZero() && l.recovered.IsZero() {
					l.recovered = now
				}
				l.acked, l.ackedAt = append(l.acked, j.ID), append(l.ackedAt, now)
			case status == http.StatusServiceUnavailable:
				if l.firstFail.IsZero() {
					l.firstFail = now
				}
			}
			l.mu.Unlock()
			if status/100 == 2 {
				break
			}
			if status != http.StatusServiceUnavailable {
				l.f.t.Errorf("submit: %d, want 2xx or 503", status)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// ackedSince counts the jobs acknowledged after at.
func (l *load) ackedSince(at time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, t := range l.ackedAt {
		if t.After(at) {
			n++
		}
	}
	return n
}

func (l *load) end() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
}

// With LEASEHOLD_REDIS_MIN_REPLICAS=1, kill -9 of the Sentinel group's
// primary under load loses nothing the API acknowledged: every job it
// answered 2xx ends succeeded, with one terminal state event; a fenced
// downstream sees each job's tokens strictly grow; the limit is never
// passed; the API answers 503 while the group fails over, never 500, and
// the workers run on (a worker whose Run returned fails the test).
//
// It passes with MIN_REPLICAS=0 too: on loopback a replica is a fraction
// of a millisecond behind, and a kill loses nothing acknowledged. What
// the waits for replicas prevent is shown with a replica that does not
// follow: TestWriteNotOnTheReplicaIs503AndItsRetryReturnsTheJob (the API)
// and execution's TestClaimWaitsForItsReplicaBeforeTheHandlerStarts.
func TestSentinelFailoverLosesNoAcknowledgedJob(t *testing.T) {
	t.Parallel()
	g := testenv.StartSentinelGroup(t)
	loseNothingUnderLoad(t, g.Client(t), func() {
		old := g.Primary(t)
		old.Kill(t)
		g.AwaitFailover(t, old, 30*time.Second)
	})
}

// The same on a Cluster, whose master of the jobs' queue is killed. Its
// replica takes over, and has none of its own until the killed node comes
// back, as a replica of it (docs/operations.md: what an operator runs with
// one replica and MIN_REPLICAS=1): the test restarts it, and meanwhile
// every write to that shard is a 503.
func TestClusterFailoverLosesNoAcknowledgedJob(t *testing.T) {
	t.Parallel()
	c := testenv.StartClusterWithReplicas(t)
	opts := c.Options()
	opts.ContextTimeoutEnabled = true
	rdb := redis.NewClusterClient(opts)
	t.Cleanup(func() { rdb.Close() })
	loseNothingUnderLoad(t, rdb, func() {
		master, replica := c.MasterOf(t, keys.New("").QueueReady("default"))
		master.Kill(t)
		rc := replica.Client(t)
		testenv.Eventually(t, 30*time.Second, func() bool {
			info, err := rc.Info(t.Context(), "replication").Result()
			return err == nil && strings.Contains(info, "role:master")
		}, "the replica %s never took over", replica.Addr())
		master.Restart(t)
	})
}

// loseNothingUnderLoad runs the API and two workers on rdb with
// MIN_REPLICAS=1 under a steady load of submissions, calls failover (which
// kills a primary and returns once a replica took over), and checks that
// every acknowledged job ends once, with tokens that grow and the limit
// held.
func loseNothingUnderLoad(t *testing.T, rdb redis.UniversalClient, failover func()) {
	t.Helper()
	if err := replicas.Require(rdb, 1, 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	f := newFixtureWith(t, rdb, testenv.NATS(t).Conn(t))
	const limit = 3
	if resp := f.putLimit(adminKey, "model:failover", fmt.Sprintf(`{"limit": %d}`, limit)); resp.StatusCode != http.StatusOK {
		t.Fatalf("limit: %s %s", resp.Status, resp.body)
	}
	d := newDownstream()
	for range 2 {
		f.startWorker(map[string]execution.Handler{"fenced": d.handle}, func(c *execution.Config) { c.Concurrency = 4 })
	}
	l := startLoad(f, `{"kind": "fenced", "concurrency_keys": ["model:failover"]}`)
	testenv.Eventually(t, 30*time.Second, func() bool { return l.ackedSince(time.Time{}) >= 20 }, "no load")

	killed := time.Now()
	failover()
	testenv.Eventually(t, 60*time.Second, func() bool { return l.ackedSince(killed) >= 20 }, "the API acknowledges no job after the failover")
	l.end()

	l.mu.Lock()
	acked, statuses, window := l.acked, l.statuses, l.recovered.Sub(l.firstFail)
	firstFail, recovered := l.firstFail.Sub(killed), l.recovered.Sub(killed)
	var timeline []string
	for _, c := range l.changes {
		timeline = append(timeline, fmt.Sprintf("%d from %v", c.status, c.sent.Sub(killed).Round(time.Millisecond)))
	}
	l.mu.Unlock()
	t.Logf("failover: %d jobs acknowledged, statuses %v, 503 window %v (first 503 %v after the kill, first 2xx after it %v after); answers by the time their request was sent, from the kill: %s",
		len(acked), statuses, window, firstFail, recovered, strings.Join(timeline, ", "))
	reran := 0
	for _, id := range acked {
		j := f.awaitEnd(id)
		if j.State != job.StateSucceeded {
			t.Errorf("job %s ended %s", id, j.State)
		}
		terminal := 0
		events, err := f.store.Events(t.Context(), "acme", id, false, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events {
			if s, ok := eventStateOf(e); ok && s.Terminal() {
				terminal++
			}
		}
		if terminal != 1 {
			t.Errorf("job %s has %d terminal state events, want 1", id, terminal)
		}
		if len(d.seen(id)) > 1 {
			reran++
		}
	}
	t.Logf("failover: %d of %d acknowledged jobs ran more than once", reran, len(acked))
	d.checkTokens(t)
	d.checkLimit(t, limit)
}

// With MIN_REPLICAS=0 a failover to a replica that missed a claim loses
// the claim: the job runs again. Its new token is still above the lost
// one (the Redis clock's floor), so a fenced downstream takes the re-run
// and the first execution, whose lease the new primary never had, stops
// and writes nothing. The test checks that the replica really missed the
// claim: it was stopped (SIGSTOP) and held back by more replication
// traffic than the kernel buffers (a stopped replica's socket would
// otherwise take the claim in, and apply it once continued).
//
// Fails when the claim issues tokens from the counter alone (fence.lua):
// the re-run gets a token below the lost one.
func TestSentinelFailoverToALaggingReplicaKeepsTokensGrowing(t *testing.T) {
	t.Parallel()
	g := testenv.StartSentinelGroup(t)
	primary, lagging, other := g.Servers[0], g.Servers[1], g.Servers[2]
	// The other replica gets every write; it must not be the one promoted.
	if err := other.Client(t).ConfigSet(t.Context(), "replica-priority", "0").Err(); err != nil {
		t.Fatal(err)
	}
	f := newFixtureWith(t, g.Client(t), testenv.NATS(t).Conn(t))
	failoverToALaggingReplica(t, f, primary, lagging, func() {
		if got := g.AwaitFailover(t, primary, 30*time.Second); got != lagging {
			t.Fatalf("the sentinels promoted %s, not the lagging replica %s", got.Addr(), lagging.Addr())
		}
	})
}

// The same on a Redis Cluster: the master of the job's queue is killed
// while its replica lags, and the replica takes over.
func TestClusterFailoverToALaggingReplicaKeepsTokensGrowing(t *testing.T) {
	t.Parallel()
	c := testenv.StartClusterWithReplicas(t)
	opts := c.Options()
	opts.ContextTimeoutEnabled = true
	rdb := redis.NewClusterClient(opts)
	t.Cleanup(func() { rdb.Close() })
	f := newFixtureWith(t, rdb, testenv.NATS(t).Conn(t))
	master, replica := c.MasterOf(t, keys.New(f.prefix).QueueReady("default"))
	if replica == nil {
		t.Fatal("the queue's master has no replica")
	}
	failoverToALaggingReplica(t, f, master, replica, func() {
		rc := replica.Client(t)
		testenv.Eventually(t, 30*time.Second, func() bool {
			info, err := rc.Info(t.Context(), "replication").Result()
			return err == nil && strings.Contains(info, "role:master")
		}, "the replica %s never took over", replica.Addr())
	})
}

// failoverToALaggingReplica runs a job's first execution on primary while
// lagging does not follow, kills primary, checks that lagging missed the
// claim, waits for promoted (lagging's promotion), and checks that the
// job's re-run has a higher token and succeeds.
func failoverToALaggingReplica(t *testing.T, f *fixture, primary, lagging *testenv.RedisServer, promoted func()) {
	t.Helper()
	ctx := t.Context()
	j := f.submit(acmeKey, `{"kind": "fenced"}`)
	jobKey := keys.New(f.prefix).Job(j.Queue, j.ID)
	// lagging has the job: a write after it, confirmed by every replica.
	pc := primary.Client(t)
	if err := pc.Set(ctx, keys.New(f.prefix).QueueReady(j.Queue)+":mark", "1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := pc.Do(ctx, "WAIT", 1, 5000).Err(); err != nil {
		t.Fatal(err)
	}
	if err := lagging.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lagging.Resume() })
	// 40 MB in the job's slot, ahead of the claim in lagging's stream:
	// more than loopback's socket buffers hold.
	junk := strings.Repeat("x", 8<<20)
	for i := range 5 {
		if err := pc.Set(ctx, fmt.Sprintf("%s:junk:%d", keys.New(f.prefix).QueueReady(j.Queue), i), junk, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	d := newDownstream()
	d.hold = true
	f.startWorker(map[string]execution.Handler{"fenced": d.handle})
	testenv.Eventually(t, 10*time.Second, func() bool { return len(d.seen(j.ID)) == 1 }, "the job never started")
	lost := d.seen(j.ID)[0]

	primary.Kill(t)
	killed := time.Now()
	if err := lagging.Resume(); err != nil {
		t.Fatal(err)
	}
	// Once lagging has read all that reached it, the claim is not there.
	lc := lagging.Client(t)
	testenv.Eventually(t, 30*time.Second, func() bool {
		info, err := lc.Info(ctx, "replication").Result()
		return err == nil && !strings.Contains(info, "master_link_status:up")
	}, "the lagging replica never saw its primary go")
	conn := lc.(*redis.Client).Conn()
	defer conn.Close()
	_ = conn.ReadOnly(ctx).Err() // a cluster replica serves reads only so; a Sentinel's refuses nothing
	got, err := conn.HMGet(ctx, jobKey, "state", "token").Result()
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != "queued" || got[1] != nil { // a job gets its token from its claim
		t.Fatalf("the lagging replica has the job as %v (state, token): it got the claim, and the test would prove nothing", got)
	}

	promoted()
	t.Logf("failover: promoted %v after the kill", time.Since(killed))
	testenv.Eventually(t, 60*time.Second, func() bool { return len(d.seen(j.ID)) >= 2 }, "the job never ran again after the failover")
	t.Logf("failover: the job ran again %v after the kill", time.Since(killed))
	tokens := d.seen(j.ID)
	if tokens[0] != lost || tokens[1] <= lost {
		t.Errorf("tokens %v: the re-run's is not above the lost claim's %d", tokens, lost)
	}
	if end := f.awaitEnd(j.ID); end.State != job.StateSucceeded || end.Execution == nil || uint64(end.Execution.FencingToken) != tokens[len(tokens)-1] {
		t.Errorf("the job ended %s with execution %+v; want succeeded by the re-run (token %d)", end.State, end.Execution, tokens[len(tokens)-1])
	}
	// The two executions may overlap: the first runs on until its
	// heartbeat, refused by the new primary, stops it (a claim lost with
	// MIN_REPLICAS=0 runs twice; the token tells the downstream which to
	// take). Its writes are refused: the job ended by the re-run.
	d.checkTokens(t)
}

// awaitEnd waits until job id has ended (a 503 on the way is a retry) and
// returns it.
func (f *fixture) awaitEnd(id string) job.Job {
	f.t.Helper()
	var j job.Job
	testenv.Eventually(f.t, 60*time.Second, func() bool {
		resp := f.get(acmeKey, "/v1/jobs/"+id)
		if resp.StatusCode != http.StatusOK {
			return false
		}
		j = decode[job.Job](f.t, resp)
		return j.State.Terminal()
	}, "job %s never ended (lost?)", id)
	return j
}

// eventStateOf returns the state of a stored state event.
func eventStateOf(e job.Event) (job.State, bool) {
	var s struct{ State job.State }
	if e.Type != "state" || json.Unmarshal(e.Data, &s) != nil {
		return "", false
	}
	return s.State, true
}
