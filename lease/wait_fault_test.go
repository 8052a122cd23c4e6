package lease_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/lease"
)

// waitProcs are "wait" helper subprocesses sharing one line.
type waitProcs struct {
	w     *waitLine
	procs map[string]*testenv.Process
	limit int
}

func startWaitProcs(t *testing.T, w *waitLine, limit int, ttl, ticketTTL, hold time.Duration, names ...string) *waitProcs {
	t.Helper()
	wp := &waitProcs{w: w, procs: map[string]*testenv.Process{}, limit: limit}
	wp.add(t, ttl, ticketTTL, hold, names...)
	return wp
}

// add starts more processes in wp's line, with a ticket TTL of their own.
func (wp *waitProcs) add(t *testing.T, ttl, ticketTTL, hold time.Duration, names ...string) {
	t.Helper()
	for _, name := range names {
		wp.procs[name] = testenv.StartHelper(t, "wait", envPrefix+"="+wp.w.ks.Prefix(), envKey+"="+wp.w.key,
			envLimit+"="+strconv.Itoa(wp.limit), envTTL+"="+ttl.String(), envTicketTTL+"="+ticketTTL.String(),
			envHold+"="+hold.String(), envName+"="+name)
	}
}

// survivorTTL is the ticket TTL of a waiter whose ticket a test needs to
// outlive another's short one: long enough for its heartbeats to get
// through a loaded machine's stalls, which a few hundred milliseconds
// are not.
const survivorTTL = 30 * time.Second

// join sends holder to the named process to wait in line, and waits until
// its ticket is in line.
func (wp *waitProcs) join(t *testing.T, name, holder string) {
	t.Helper()
	before := wp.w.waiting(t)
	if err := wp.w.rdb.RPush(t.Context(), wp.w.ks.Prefix()+"orders:"+name, holder).Err(); err != nil {
		t.Fatal(err)
	}
	wp.w.waitInLine(t, before+1)
}

// grant is a "granted" or "done" line of a helper.
type grant struct {
	holder     string
	token      int64
	start, end time.Time
}

// TestWaitGrantsInArrivalOrderAcrossProcesses: three processes put twelve
// tickets in line, interleaved, while the key is full; once it frees up,
// fencing tokens (issued by Redis in grant order) must follow the order of
// arrival. The lease set is sampled at every step and the holders' windows
// checked for overlap beyond the limit.
func TestWaitGrantsInArrivalOrderAcrossProcesses(t *testing.T) {
	t.Parallel()
	for _, limit := range []int{1, 2} {
		t.Run(fmt.Sprint("limit", limit), func(t *testing.T) {
			t.Parallel()
			w := newWaitLine(t, testenv.Redis(t).Client(t))
			names := []string{"a", "b", "c"}
			wp := startWaitProcs(t, w, limit, time.Minute, 2*time.Second, 20*time.Millisecond, names...)
			var blockers []lease.Lease
			for i := range limit {
				blockers = append(blockers, mustAcquire(t, w.c, w.key, fmt.Sprint("blocker", i), limit, time.Minute))
			}
			var arrival []string
			for round := range 4 {
				for _, name := range names {
					holder := fmt.Sprintf("%s%d", name, round)
					wp.join(t, name, holder)
					arrival = append(arrival, holder)
				}
			}

			var mu sync.Mutex
			grants := map[string]*grant{}
			var wg sync.WaitGroup
			for _, p := range wp.procs {
				wg.Go(func() {
					for line := range p.Lines() {
						f := strings.Fields(line)
						mu.Lock()
						switch {
						case len(f) == 4 && f[0] == "granted":
							token, _ := strconv.ParseInt(f[2], 10, 64)
							ns, _ := strconv.ParseInt(f[3], 10, 64)
							grants[f[1]] = &grant{holder: f[1], token: token, start: time.Unix(0, ns)}
						case len(f) == 3 && f[0] == "done":
							ns, _ := strconv.ParseInt(f[2], 10, 64)
							if g := grants[f[1]]; g != nil {
								g.end = time.Unix(0, ns)
							}
						case f[0] == "left":
							t.Errorf("helper line %q: a waiter left the line", line)
						}
						mu.Unlock()
					}
				})
			}
			ended := func() int {
				mu.Lock()
				defer mu.Unlock()
				n := 0
				for _, g := range grants {
					if !g.end.IsZero() {
						n++
					}
				}
				return n
			}

			for _, b := range blockers {
				if err := w.c.Release(t.Context(), b); err != nil {
					t.Fatal(err)
				}
			}
			deadline := time.Now().Add(30 * time.Second)
			for ended() < len(arrival) {
				if n := w.held(t); n > int64(limit) {
					t.Fatalf("%d slots held, limit %d", n, limit)
				}
				if time.Now().After(deadline) {
					t.Fatalf("only %d of %d waiters were served", ended(), len(arrival))
				}
				time.Sleep(time.Millisecond)
			}
			testenv.Eventually(t, 5*time.Second, func() bool { return w.held(t) == 0 }, "permits still held after every holder released")
			for _, p := range wp.procs {
				p.Signal(t, syscall.SIGTERM)
				if code := p.Wait(t, 10*time.Second); code != 0 {
					t.Fatalf("helper exited %d", code)
				}
			}
			wg.Wait()

			var served []*grant
			for _, g := range grants {
				served = append(served, g)
			}
			slices.SortFunc(served, func(a, b *grant) int { return int(a.token - b.token) })
			var order []string
			for _, g := range served {
				order = append(order, g.holder)
			}
			if !slices.Equal(order, arrival) {
				t.Fatalf("granted in order %v, arrived in order %v", order, arrival)
			}
			for i, g := range served {
				overlapping := 1
				for _, o := range served[:i] {
					if o.end.After(g.start) {
						overlapping++
					}
				}
				if overlapping > limit {
					t.Fatalf("%s was granted while %d holders were still using theirs, limit %d", g.holder, overlapping-1, limit)
				}
			}
		})
	}
}

// A waiter killed with SIGKILL never leaves the line itself: its ticket
// expires and the next waiter is served after about a ticket TTL.
func TestKilledWaiterLeavesTheLineByExpiry(t *testing.T) {
	t.Parallel()
	w := newWaitLine(t, testenv.Redis(t).Client(t))
	const ticketTTL = 600 * time.Millisecond
	wp := startWaitProcs(t, w, 1, time.Minute, ticketTTL, time.Millisecond, "doomed")
	wp.add(t, time.Minute, survivorTTL, time.Millisecond, "next")
	blocker := mustAcquire(t, w.c, w.key, "blocker", 1, time.Minute)
	wp.join(t, "doomed", "d")
	wp.join(t, "next", "n")
	wp.procs["doomed"].Kill(t)
	killed := time.Now()
	if err := w.c.Release(t.Context(), blocker); err != nil {
		t.Fatal(err)
	}
	wp.procs["next"].Line(t, "granted n ", 10*time.Second)
	took := time.Since(killed)
	t.Logf("the line moved on %v after the kill", took)
	if took > ticketTTL+time.Second {
		t.Fatalf("the line moved on %v after the kill, want about the ticket TTL %v", took, ticketTTL)
	}
	wp.procs["next"].Line(t, "done n ", 10*time.Second)
	testenv.Eventually(t, 5*time.Second, func() bool { return w.held(t) == 0 && w.waiting(t) == 0 }, "line not empty")
}

// A graceful shutdown (SIGTERM) cancels every ticket in line at once: the
// line is empty as soon as the process has exited, not a ticket TTL later,
// and nothing is held.
func TestShutdownCancelsTicketsInLine(t *testing.T) {
	t.Parallel()
	w := newWaitLine(t, testenv.Redis(t).Client(t))
	wp := startWaitProcs(t, w, 1, time.Minute, time.Hour, time.Millisecond, "p")
	blocker := mustAcquire(t, w.c, w.key, "blocker", 1, time.Minute)
	for i := range 3 {
		wp.join(t, "p", fmt.Sprint("h", i))
	}
	p := wp.procs["p"]
	p.Signal(t, syscall.SIGTERM)
	left := 0
	for line := range p.Lines() {
		if strings.HasPrefix(line, "left ") {
			if !strings.HasSuffix(line, " CANCELLED") {
				t.Errorf("helper said %q, want CANCELLED", line)
			}
			left++
		}
	}
	if code := p.Wait(t, 10*time.Second); code != 0 {
		t.Fatalf("helper exited %d", code)
	}
	if left != 3 {
		t.Fatalf("%d waiters reported leaving, want 3", left)
	}
	if n := w.waiting(t); n != 0 {
		t.Fatalf("%d tickets still in line after shutdown", n)
	}
	if err := w.c.Release(t.Context(), blocker); err != nil {
		t.Fatal(err)
	}
}

// A waiter paused (SIGSTOP) past its ticket TTL loses its place: the line
// moves on without it, and once resumed it learns its ticket is gone.
func TestPausedWaiterLosesItsPlace(t *testing.T) {
	t.Parallel()
	w := newWaitLine(t, testenv.Redis(t).Client(t))
	const ticketTTL = 300 * time.Millisecond
	wp := startWaitProcs(t, w, 1, time.Minute, ticketTTL, time.Millisecond, "paused")
	wp.add(t, time.Minute, survivorTTL, time.Millisecond, "next")
	blocker := mustAcquire(t, w.c, w.key, "blocker", 1, time.Minute)
	wp.join(t, "paused", "p")
	wp.join(t, "next", "n")
	wp.procs["paused"].Stop(t)
	if err := w.c.Release(t.Context(), blocker); err != nil {
		t.Fatal(err)
	}
	// Generous waits: on a loaded machine a helper may not run for seconds.
	wp.procs["next"].Line(t, "granted n ", 30*time.Second)
	wp.procs["paused"].Cont(t)
	if got := wp.procs["paused"].Line(t, "left p ", 30*time.Second); got != "EXPIRED" {
		t.Fatalf("the paused waiter left in state %s, want EXPIRED", got)
	}
	wp.procs["next"].Line(t, "done n ", 30*time.Second)
	testenv.Eventually(t, 5*time.Second, func() bool { return w.held(t) == 0 && w.waiting(t) == 0 }, "line not empty")
}
