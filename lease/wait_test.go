package lease_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/store/scripts"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/internal/testsignal"
	"github.com/leasehold/leasehold/lease"
)

// The "wait" helper's orders, besides envPrefix, envKey, envTTL, envLimit
// and envName.
const (
	envTicketTTL = "LEASE_TEST_TICKET_TTL"
	envHold      = "LEASE_TEST_HOLD"
)

// helperWait takes holder names from the Redis list "<prefix>orders:<name>"
// and has each one Wait in line, hold its slot for envHold and release it.
// It prints "granted <holder> <token> <unix ns>" when a slot is granted,
// "done <holder> <unix ns>" when it stops using it (before the release) and
// "left <holder> <state>" when a wait ends without one. SIGTERM cancels
// every wait in line; the helper then exits 0.
func helperWait() int {
	rdb := testenv.HelperRedis()
	defer rdb.Close()
	prefix, key, name := os.Getenv(envPrefix), os.Getenv(envKey), os.Getenv(envName)
	c, err := lease.New(store.New(rdb, store.Config{Prefix: prefix}), lease.Config{})
	if err != nil {
		panic(err)
	}
	nc, err := nats.Connect(testenv.HelperNATSURL())
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	ttl, _ := time.ParseDuration(os.Getenv(envTTL))
	ticketTTL, _ := time.ParseDuration(os.Getenv(envTicketTTL))
	hold, _ := time.ParseDuration(os.Getenv(envHold))
	limit, _ := strconv.Atoi(os.Getenv(envLimit))
	sem := c.Semaphore(key, limit, ttl)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()

	var mu sync.Mutex // one line at a time on stdout
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for ctx.Err() == nil {
		got, err := rdb.BLPop(ctx, time.Second, prefix+"orders:"+name).Result()
		if errors.Is(err, redis.Nil) || ctx.Err() != nil {
			continue
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		holder := got[1]
		wg.Go(func() {
			var state lease.TicketState
			p, err := sem.Wait(ctx, holder, lease.WaitConfig{NATS: nc, TicketTTL: ticketTTL, Poll: lease.MinPoll,
				Done: func(s lease.TicketState) { state = s }})
			if err != nil {
				say("left %s %s", holder, state)
				return
			}
			say("granted %s %d %d", holder, p.Token(), time.Now().UnixNano())
			select {
			case <-time.After(hold):
			case <-p.Context().Done():
			}
			say("done %s %d", holder, time.Now().UnixNano())
			if err := p.Release(); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		})
	}
	return 0
}

// waitLine is a test's view of one semaphore and its line.
type waitLine struct {
	rdb redis.UniversalClient
	c   *lease.Client
	ks  keys.Space
	key string
}

func newWaitLine(t testing.TB, rdb redis.UniversalClient) *waitLine {
	t.Helper()
	c, ks := newClient(t, rdb)
	w := &waitLine{rdb: rdb, c: c, ks: ks, key: "model:gpt"}
	t.Cleanup(func() {
		if !t.Failed() {
			w.assertClean(t)
		}
	})
	return w
}

// waiting returns the number of tickets in line, dead ones included.
func (w *waitLine) waiting(t testing.TB) int64 {
	t.Helper()
	n, err := w.rdb.ZCard(context.Background(), w.ks.SemQueue(w.key)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (w *waitLine) held(t testing.TB) int64 {
	t.Helper()
	n, err := w.rdb.ZCard(context.Background(), w.ks.LeaseSet(w.key)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitInLine waits until n tickets are in line.
func (w *waitLine) waitInLine(t testing.TB, n int64) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, func() bool { return w.waiting(t) == n }, "want %d tickets in line", n)
}

// assertClean checks that nothing is held and nobody is in line: no permit
// and no ticket leaked.
func (w *waitLine) assertClean(t testing.TB) {
	t.Helper()
	for _, k := range []string{w.ks.LeaseSet(w.key), w.ks.SemQueue(w.key), w.ks.SemTickets(w.key)} {
		if n, err := w.rdb.ZCard(context.Background(), k).Result(); err != nil || n != 0 {
			t.Errorf("%s holds %d members at the end (err %v)", k, n, err)
		}
	}
}

// outcome records the terminal states a Wait reports through Done.
type outcome struct {
	mu     sync.Mutex
	states []lease.TicketState
}

func (o *outcome) done(s lease.TicketState) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.states = append(o.states, s)
}

func (o *outcome) want(t testing.TB, s lease.TicketState) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.states) != 1 || o.states[0] != s {
		t.Fatalf("Done called with %v, want exactly once with %v", o.states, s)
	}
}

func TestWaitIsGrantedAtOnceWhenFree(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		w := newWaitLine(t, rdb)
		sem := w.c.Semaphore(w.key, 2, time.Minute)
		var o outcome
		p, err := sem.Wait(t.Context(), "a", lease.WaitConfig{Done: o.done})
		if err != nil {
			t.Fatal(err)
		}
		o.want(t, lease.TicketGranted)
		if n := w.held(t); n != 1 {
			t.Fatalf("%d slots held, want 1", n)
		}
		if p.Lease().Holder != "a" || p.Token() == 0 {
			t.Fatalf("permit lease %+v", p.Lease())
		}
		for range 2 { // idempotent
			if err := p.Release(); err != nil {
				t.Fatal(err)
			}
		}
		if context.Cause(p.Context()) == nil {
			t.Fatal("permit context still live after release")
		}
	})
}

func TestWaitIsCancelledByItsContext(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		w := newWaitLine(t, rdb)
		blocker := mustAcquire(t, w.c, w.key, "blocker", 1, time.Minute)
		sem := w.c.Semaphore(w.key, 1, time.Minute)
		ctx, stop := context.WithCancelCause(t.Context())
		errc := make(chan error, 1)
		var o outcome
		go func() {
			_, err := sem.Wait(ctx, "a", lease.WaitConfig{Done: o.done})
			errc <- err
		}()
		w.waitInLine(t, 1)
		gone := errors.New("client went away")
		stop(gone)
		if err := <-errc; !errors.Is(err, gone) {
			t.Fatalf("wait returned %v, want the context's cause", err)
		}
		o.want(t, lease.TicketCancelled)
		if n := w.waiting(t); n != 0 {
			t.Fatalf("%d tickets in line after the wait was cancelled", n)
		}
		if err := w.c.Release(t.Context(), blocker); err != nil {
			t.Fatal(err)
		}
	})
}

func TestWaitTimesOutAfterMaxWait(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		w := newWaitLine(t, rdb)
		blocker := mustAcquire(t, w.c, w.key, "blocker", 1, time.Minute)
		sem := w.c.Semaphore(w.key, 1, time.Minute)
		var o outcome
		start := time.Now()
		_, err := sem.Wait(t.Context(), "a", lease.WaitConfig{MaxWait: 200 * time.Millisecond, Poll: lease.MinPoll, Done: o.done})
		if !errors.Is(err, lease.ErrTimedOut) {
			t.Fatalf("wait returned %v, want ErrTimedOut", err)
		}
		if waited := time.Since(start); waited < 200*time.Millisecond {
			t.Fatalf("gave up after %v, before max wait", waited)
		}
		o.want(t, lease.TicketTimedOut)
		if n := w.waiting(t); n != 0 {
			t.Fatalf("%d tickets in line after the wait timed out", n)
		}
		if err := w.c.Release(t.Context(), blocker); err != nil {
			t.Fatal(err)
		}
	})
}

func TestWaitRefusesBadInput(t *testing.T) {
	t.Parallel()
	w := newWaitLine(t, testenv.Redis(t).Client(t))
	for _, tc := range []struct {
		name, key, holder string
		limit             int
		ttl               time.Duration
		cfg               lease.WaitConfig
	}{
		{"empty holder", "k", "", 1, time.Second, lease.WaitConfig{}},
		{"brace in key", "a}b", "h", 1, time.Second, lease.WaitConfig{}},
		{"zero limit", "k", "h", 0, time.Second, lease.WaitConfig{}},
		{"zero ttl", "k", "h", 1, 0, lease.WaitConfig{}},
		{"negative max wait", "k", "h", 1, time.Second, lease.WaitConfig{MaxWait: -time.Second}},
	} {
		if _, err := w.c.Semaphore(tc.key, tc.limit, tc.ttl).Wait(t.Context(), tc.holder, tc.cfg); err == nil {
			t.Errorf("%s: wait succeeded", tc.name)
		}
	}
	if n, err := w.rdb.Keys(t.Context(), w.ks.Prefix()+"*").Result(); err != nil || len(n) != 0 {
		t.Fatalf("bad input wrote keys %v (err %v)", n, err)
	}
}

// A release wakes the line over NATS at once: with a poll far longer than
// the test's patience, only the wake-up can get the waiter in.
func TestWaitIsWokenOverNATS(t *testing.T) {
	t.Parallel()
	w := newWaitLine(t, testenv.Redis(t).Client(t))
	nc := testenv.NATS(t).Conn(t)
	sem := w.c.Semaphore(w.key, 1, time.Minute)
	first, err := sem.Wait(t.Context(), "first", lease.WaitConfig{NATS: nc})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *lease.Permit, 1)
	waiting := testsignal.New()
	go func() {
		p, err := sem.Wait(t.Context(), "second", lease.WithWaitingSignal(lease.WaitConfig{NATS: nc, Poll: time.Minute}, waiting))
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	// The waiter polls once more right after subscribing; release only
	// once it is asleep on its minute-long poll, so that only the wake-up
	// can end the wait in time.
	waiting.Wait(t, 10*time.Second)
	released := time.Now()
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-got:
		t.Logf("woken %v after the release", time.Since(released))
		if p != nil {
			if err := p.Release(); err != nil {
				t.Fatal(err)
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken by the release")
	}
}

// With NATS down, polling alone still moves the line.
func TestWaitPollsWhenNATSIsDown(t *testing.T) {
	t.Parallel()
	w := newWaitLine(t, testenv.Redis(t).Client(t))
	srv := testenv.StartNATS(t)
	nc := srv.Conn(t)
	sem := w.c.Semaphore(w.key, 1, time.Minute)
	cfg := lease.WaitConfig{NATS: nc, Poll: 100 * time.Millisecond}
	first, err := sem.Wait(t.Context(), "first", cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *lease.Permit, 1)
	go func() {
		p, err := sem.Wait(t.Context(), "second", cfg)
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	w.waitInLine(t, 1)
	srv.Stop(t)
	testenv.Eventually(t, 5*time.Second, func() bool { return !nc.IsConnected() }, "client still connected")
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-got:
		if p != nil {
			if err := p.Release(); err != nil {
				t.Fatal(err)
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatal("with NATS down, the waiter never got the released slot")
	}
}

// lossyReplies cancels the waiter's context while the next poll script that
// grants a slot is on its way back, and drops the reply, as a caller giving
// up at that moment sees it: the script ran, the caller never learns it.
type lossyReplies struct {
	armed  atomic.Bool
	cancel context.CancelFunc
}

func (h *lossyReplies) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *lossyReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *lossyReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if s, ok := cmd.(*redis.Cmd); ok && err == nil && h.armed.Load() && strings.HasPrefix(cmd.Name(), "eval") {
			if res, _ := s.Int64Slice(); len(res) == 4 && res[0] == 1 && h.armed.CompareAndSwap(true, false) {
				h.cancel()
				return ctx.Err()
			}
		}
		return err
	}
}

// The grant's reply is lost and the caller gives up in the same moment: the
// slot Redis granted is released by the cleanup, never leaked.
func TestWaitReleasesASlotGrantedWhoseReplyWasLost(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: testenv.Redis(t).Addr()})
	t.Cleanup(func() { rdb.Close() })
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	hook := &lossyReplies{cancel: stop}
	rdb.AddHook(hook)
	w := newWaitLine(t, rdb)
	blocker := mustAcquire(t, w.c, w.key, "blocker", 1, time.Minute)
	sem := w.c.Semaphore(w.key, 1, time.Minute)
	errc := make(chan error, 1)
	var o outcome
	go func() {
		_, err := sem.Wait(ctx, "a", lease.WaitConfig{Poll: lease.MinPoll, Done: o.done})
		errc <- err
	}()
	w.waitInLine(t, 1)
	hook.armed.Store(true)
	if err := w.c.Release(t.Context(), blocker); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("wait returned %v, want context.Canceled", err)
	}
	o.want(t, lease.TicketCancelled)
	if n := w.held(t); n != 0 {
		t.Fatalf("%d slots held after the waiter gave up: the granted slot leaked", n)
	}
}

// Cancellation racing grants, many times over: each caller either gets its
// permit (and releases it) or gets an error with nothing held; the limit
// holds at every step.
func TestWaitCancelRacingGrantNeverLeaks(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		w := newWaitLine(t, rdb)
		const limit = 2
		sem := w.c.Semaphore(w.key, limit, time.Minute)
		var inUse, peak atomic.Int64
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 15 {
					ctx, stop := context.WithTimeout(t.Context(), time.Duration(i%5)*7*time.Millisecond)
					p, err := sem.Wait(ctx, fmt.Sprintf("g%d-%d", g, i), lease.WaitConfig{Poll: lease.MinPoll})
					if err != nil {
						stop()
						if !errors.Is(err, context.DeadlineExceeded) {
							t.Error(err)
						}
						continue
					}
					n := inUse.Add(1)
					peak.Store(max(peak.Load(), n))
					if n > limit {
						t.Errorf("%d permits out at once, limit %d", n, limit)
					}
					time.Sleep(time.Millisecond)
					inUse.Add(-1)
					if err := p.Release(); err != nil {
						t.Error(err)
					}
					stop()
				}
			})
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		for {
			select {
			case <-done:
				t.Logf("peak %d permits out", peak.Load())
				return
			case <-time.After(time.Millisecond):
			}
			if n := w.held(t); n > limit {
				t.Errorf("%d slots held, limit %d", n, limit)
				<-done
				return
			}
		}
	})
}

// A live waiter heartbeats its ticket as it polls: it keeps its place for
// many ticket TTLs and is served once the slot frees up.
func TestLiveWaiterKeepsItsPlacePastTheTicketTTL(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		w := newWaitLine(t, rdb)
		blocker := mustAcquire(t, w.c, w.key, "blocker", 1, time.Minute)
		sem := w.c.Semaphore(w.key, 1, time.Minute)
		const ticketTTL = 300 * time.Millisecond
		got := make(chan *lease.Permit, 1)
		go func() {
			p, err := sem.Wait(t.Context(), "a", lease.WaitConfig{TicketTTL: ticketTTL, Poll: lease.MinPoll})
			if err != nil {
				t.Error(err)
			}
			got <- p
		}()
		w.waitInLine(t, 1)
		expiries := func() []redis.Z {
			return w.rdb.ZRangeWithScores(t.Context(), w.ks.SemTickets(w.key), 0, -1).Val()
		}
		first := expiries()[0].Score
		testenv.Eventually(t, 10*time.Second, func() bool {
			z := expiries()
			return len(z) == 1 && z[0].Score > first+float64(3*ticketTTL.Milliseconds())
		}, "the ticket's expiry did not move three ticket TTLs on")
		if err := w.c.Release(t.Context(), blocker); err != nil {
			t.Fatal(err)
		}
		if p := <-got; p != nil {
			if err := p.Release(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// lateJoin holds the waiter's join back: the caller sees it fail and gives
// up at once, and the join reaches Redis only when the test lets it, after
// the waiter's leave, as a command stuck in a slow connection would.
type lateJoin struct {
	cancel  context.CancelFunc
	release chan struct{}
	result  chan []any
}

func (h *lateJoin) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *lateJoin) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *lateJoin) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		// EVALSHA sha 12 KEYS... ticket ticket_ttl join ...
		if cmd.Name() != "evalsha" || len(args) < 18 || args[17] != true {
			return next(ctx, cmd)
		}
		go func() {
			<-h.release
			late := redis.NewSliceCmd(context.Background(), args...)
			_ = next(context.Background(), late)
			h.result <- late.Val()
		}()
		h.cancel()
		return ctx.Err()
	}
}

// A join that reaches Redis after its waiter has left finds the ticket
// CANCELLED and neither queues nor grants: the leave's compare-and-set
// holds for joins still on their way.
func TestJoinArrivingAfterLeaveQueuesNothing(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: testenv.Redis(t).Addr()})
	t.Cleanup(func() { rdb.Close() })
	if err := scripts.Load("semaphore_poll.lua", "fence.lua", "budget.lua").Load(t.Context(), rdb).Err(); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	hook := &lateJoin{cancel: stop, release: make(chan struct{}), result: make(chan []any, 1)}
	rdb.AddHook(hook)
	w := newWaitLine(t, rdb)
	var o outcome
	if _, err := w.c.Semaphore(w.key, 1, time.Minute).Wait(ctx, "a", lease.WaitConfig{Done: o.done}); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait returned %v, want context.Canceled", err)
	}
	o.want(t, lease.TicketCancelled)
	close(hook.release)
	if got := <-hook.result; fmt.Sprint(got) != "[3]" {
		t.Fatalf("the late join answered %v, want [3] (CANCELLED)", got)
	}
	// newWaitLine's cleanup checks that nothing is held or queued.
}

// While acquire callers (queued jobs, Acquire) and Wait's line both wait
// for a full key, free slots alternate between them: neither side gets two
// in a row. Without the turn, the caller that polls fastest (here Acquire,
// every few ms, against the line's 50 ms) would take nearly every slot.
func TestJobsAndWaitersAlternateOnAFullKey(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: testenv.Redis(t).Addr()})
	t.Cleanup(func() { rdb.Close() })
	w := newWaitLine(t, rdb)
	const grants = 24
	ctx, stop := context.WithCancel(t.Context())
	defer stop()

	var mu sync.Mutex
	var order []byte // 'J' for an Acquire, 'L' for the line, in grant order
	hold := func(side byte) bool {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, side)
		return len(order) < grants
	}
	sem := w.c.Semaphore(w.key, 1, 10*time.Second)
	var wg sync.WaitGroup
	for g := range 3 { // the line: three waiters, each back in line after its turn
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				p, err := sem.Wait(ctx, fmt.Sprintf("waiter-%d-%d", g, i), lease.WaitConfig{Poll: lease.MinPoll})
				if err != nil {
					return
				}
				more := hold('L')
				time.Sleep(10 * time.Millisecond) // holds the slot while the other side asks
				_ = p.Release()
				if !more {
					stop()
				}
			}
		})
	}
	wg.Go(func() { // the jobs' side: tries every 2 ms
		for i := 0; ctx.Err() == nil; i++ {
			l, err := w.c.Acquire(ctx, w.key, fmt.Sprintf("job-%d", i), 1, 10*time.Second)
			if err != nil {
				time.Sleep(2 * time.Millisecond)
				continue
			}
			more := hold('J')
			time.Sleep(10 * time.Millisecond)
			_ = w.c.Release(context.WithoutCancel(ctx), l)
			if !more {
				stop()
			}
		}
	})
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("grants in order: %s", order)
	// The first grants may go to either side, before both wait.
	for i := 3; i < len(order); i++ {
		if order[i] == order[i-1] {
			t.Fatalf("grant %d went to the same side as the one before (%s): free slots must alternate", i+1, order)
		}
	}
}

// resentJoin delays the reply of the waiter's join (the first poll script
// it sends) until its ticket has expired and the key has room, then runs
// the script again and answers with that run's reply: what a waiter paused
// while its join's reply was on the way sees, as go-redis resends a script
// whose reply timed out.
type resentJoin struct {
	once    sync.Once
	rdb     redis.UniversalClient
	expired func() // called once the ticket has expired, before the resend
}

func (h *resentJoin) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *resentJoin) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *resentJoin) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		// EVALSHA sha 12 KEYS...: the poll script, whose fourth key is the
		// ticket's state.
		if err := next(ctx, cmd); err != nil || !strings.HasPrefix(cmd.Name(), "eval") || len(args) < 7 || fmt.Sprint(args[2]) != "12" {
			return err
		}
		resend := false
		h.once.Do(func() { resend = true })
		if !resend {
			return nil
		}
		state := fmt.Sprint(args[6])
		for h.rdb.Exists(ctx, state).Val() == 1 {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			time.Sleep(10 * time.Millisecond)
		}
		h.expired()
		return next(ctx, cmd)
	}
}

// A waiter whose join was answered only after its ticket expired (the
// process paused with the reply on the way, and go-redis resent the join)
// has lost its place, as one paused after its join has: the resend joined
// it again and was granted the free slot, which Wait gives back.
func TestWaitJoinAnsweredAfterItsTicketExpiredIsLost(t *testing.T) {
	t.Parallel()
	base := testenv.Redis(t).Client(t)
	w := newWaitLine(t, base)
	blocker := mustAcquire(t, w.c, w.key, "blocker", 1, time.Minute)
	rdb := redis.NewClient(&redis.Options{Addr: testenv.Redis(t).Addr()})
	t.Cleanup(func() { rdb.Close() })
	rdb.AddHook(&resentJoin{rdb: base, expired: func() {
		if err := w.c.Release(t.Context(), blocker); err != nil {
			t.Error(err)
		}
	}})
	c, err := lease.New(store.New(rdb, store.Config{Prefix: w.ks.Prefix()}), lease.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var o outcome
	p, err := c.Semaphore(w.key, 1, time.Minute).Wait(t.Context(), "a",
		lease.WaitConfig{Poll: lease.MinPoll, TicketTTL: 300 * time.Millisecond, Done: o.done})
	if err == nil {
		_ = p.Release()
	}
	if !errors.Is(err, lease.ErrTicketLost) {
		t.Fatalf("wait returned %v, want ErrTicketLost", err)
	}
	o.want(t, lease.TicketExpired)
	if n := w.held(t); n != 0 {
		t.Fatalf("%d slots held after the waiter lost its place", n)
	}
}
