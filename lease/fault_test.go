package lease_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/lease"
)

// Helper subprocesses read their orders from these.
const (
	envPrefix = "LEASE_TEST_PREFIX"
	envKey    = "LEASE_TEST_KEY"
	envTTL    = "LEASE_TEST_TTL"
	envLimit  = "LEASE_TEST_LIMIT"
	envName   = "LEASE_TEST_NAME"
)

func helperClient() (*lease.Client, func()) {
	rdb := testenv.HelperRedis()
	c, err := lease.New(store.New(rdb, store.Config{Prefix: os.Getenv(envPrefix)}), lease.Config{})
	if err != nil {
		panic(err)
	}
	return c, func() { rdb.Close() }
}

// helperHold acquires a lease, says so, and keeps it alive until killed.
func helperHold() int {
	c, closeClient := helperClient()
	defer closeClient()
	ttl, _ := time.ParseDuration(os.Getenv(envTTL))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	limit, _ := strconv.Atoi(os.Getenv(envLimit))
	l, err := c.Acquire(ctx, os.Getenv(envKey), "subprocess", limit, ttl)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("held", l.Token)
	lost, lose := context.WithCancelCause(ctx)
	defer lose(nil)
	if err := c.Keeper(l, 0, lose).Run(lost); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// Test 1: a holder killed with SIGKILL never releases; its slot is free
// again within its TTL plus one acquire. A live holder shares the key, so
// the set itself never expires: only reaping can free the slot.
func TestCrashedHolderSlotIsReclaimedWithinTTL(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t).Client(t)
	prefix := testenv.Prefix(t)
	c, err := lease.New(store.New(rdb, store.Config{Prefix: prefix}), lease.Config{})
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 600 * time.Millisecond
	mustAcquire(t, c, "k", "live", 2, time.Hour)
	p := testenv.StartHelper(t, "hold", envPrefix+"="+prefix, envKey+"=k", envTTL+"="+ttl.String(), envLimit+"=2")
	p.Line(t, "held ", 10*time.Second)

	// The keeper renews, so the holder keeps its slot well past one TTL.
	deadline := time.Now().Add(2 * ttl)
	for time.Now().Before(deadline) {
		mustBeFull(t, c, "k", "b", 2, ttl)
		time.Sleep(ttl / 10)
	}

	p.Kill(t)
	killed := time.Now()
	testenv.Eventually(t, 10*time.Second, func() bool {
		_, err := c.Acquire(t.Context(), "k", "b", 2, ttl)
		return err == nil
	}, "the killed holder's slot was never reclaimed")
	if took := time.Since(killed); took > ttl+500*time.Millisecond {
		t.Fatalf("slot reclaimed %v after the kill, want within ttl %v plus one acquire", took, ttl)
	}
}

// holding is one holder's trust window: from the moment Acquire returned to
// the moment it stopped trusting the lease (release, loss, or the end of
// its trust window).
type holding struct {
	start, end time.Time
}

// tracker collects holdings from goroutines and helper subprocesses.
type tracker struct {
	mu   sync.Mutex
	open map[string]holding // end is the current TrustedUntil
	done []holding
}

func (tr *tracker) acquired(holder string, start, until time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.open[holder] = holding{start: start, end: until}
}

func (tr *tracker) extended(holder string, until time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if h, ok := tr.open[holder]; ok {
		h.end = until
		tr.open[holder] = h
	}
}

func (tr *tracker) ended(holder string, end time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if h, ok := tr.open[holder]; ok {
		delete(tr.open, holder)
		h.end = minTime(h.end, end)
		tr.done = append(tr.done, h)
	}
}

// maxOverlap closes every open holding at its trust end (a killed holder
// trusted its lease until then) and returns the largest number of holdings
// that overlapped at any instant.
func (tr *tracker) maxOverlap() (int, int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	all := append([]holding(nil), tr.done...)
	for _, h := range tr.open {
		all = append(all, h)
	}
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, h := range all {
		if h.end.After(h.start) {
			edges = append(edges, edge{h.start, +1}, edge{h.end, -1})
		}
	}
	// At equal instants an end comes before a start: [start, end) windows.
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at.Equal(edges[j].at) {
			return edges[i].delta < edges[j].delta
		}
		return edges[i].at.Before(edges[j].at)
	})
	n, peak := 0, 0
	for _, e := range edges {
		n += e.delta
		peak = max(peak, n)
	}
	return peak, len(all)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// hammer acquires, renews, releases and abandons leases on key until ctx is
// done, reporting every trust window through the three callbacks.
func hammer(ctx context.Context, c *lease.Client, key, name string, limit int, ttl time.Duration,
	acquired func(string, time.Time, time.Time), extended func(string, time.Time), ended func(string, time.Time)) error {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(len(name))))
	for n := 0; ctx.Err() == nil; n++ {
		holder := name + "-" + strconv.Itoa(n)
		l, err := c.Acquire(ctx, key, holder, limit, ttl)
		var full *lease.FullError
		if errors.As(err, &full) {
			time.Sleep(time.Duration(rng.Int64N(int64(min(full.RetryAfter, 5*time.Millisecond)) + 1)))
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		acquired(holder, time.Now(), l.TrustedUntil)
		lost := false
		for range rng.IntN(3) {
			time.Sleep(time.Duration(rng.Int64N(int64(ttl / 6))))
			sent := time.Now()
			if !sent.Before(l.TrustedUntil) {
				lost = true // paused past the trust window: stop trusting
				break
			}
			renewed, err := c.Renew(ctx, l)
			if err != nil {
				ended(holder, sent)
				lost = true
				break
			}
			l = renewed
			extended(holder, l.TrustedUntil)
		}
		switch {
		case lost:
			ended(holder, l.TrustedUntil)
		case rng.IntN(5) == 0:
			// Crash without releasing: the lease must expire on its own.
			ended(holder, l.TrustedUntil)
		default:
			ended(holder, time.Now())
			if err := c.Release(context.WithoutCancel(ctx), l); err != nil && ctx.Err() == nil {
				return err
			}
		}
	}
	return nil
}

// helperStress hammers the key and prints every trust window event for the
// parent to check.
func helperStress() int {
	c, closeClient := helperClient()
	defer closeClient()
	ttl, _ := time.ParseDuration(os.Getenv(envTTL))
	limit, _ := strconv.Atoi(os.Getenv(envLimit))
	var mu sync.Mutex // one line at a time on stdout
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	err := hammer(context.Background(), c, os.Getenv(envKey), os.Getenv(envName), limit, ttl,
		func(h string, start, until time.Time) { say("acq %s %d %d", h, start.UnixNano(), until.UnixNano()) },
		func(h string, until time.Time) { say("ext %s %d", h, until.UnixNano()) },
		func(h string, end time.Time) { say("end %s %d", h, end.UnixNano()) })
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// feed applies a helper's event lines to the tracker.
func (tr *tracker) feed(line string) {
	f := strings.Fields(line)
	at := func(s string) time.Time {
		n, _ := strconv.ParseInt(s, 10, 64)
		return time.Unix(0, n)
	}
	switch {
	case len(f) == 4 && f[0] == "acq":
		tr.acquired(f[1], at(f[2]), at(f[3]))
	case len(f) == 3 && f[0] == "ext":
		tr.extended(f[1], at(f[2]))
	case len(f) == 3 && f[0] == "end":
		tr.ended(f[1], at(f[2]))
	}
}

// Test 6: 64 goroutines and 2 subprocesses hammer one limit-5 key while the
// subprocesses are killed with SIGKILL and paused with SIGSTOP. An observer
// samples the lease set at every step; at the end every trust window, the
// dead subprocesses' included, is checked for overlap beyond the limit, at
// every instant. (Not while it runs: a subprocess's end reaches the
// tracker through a pipe, after the slot it freed may have been taken, so
// the tracker's view of "now" can count a holder that has already let go.)
func TestStressNeverOversells(t *testing.T) {
	t.Parallel()
	const (
		limit    = 5
		ttl      = 300 * time.Millisecond
		duration = 10 * time.Second
	)
	rdb := testenv.Redis(t).Client(t)
	c, ks := newClient(t, rdb)
	prefix := ks.Prefix()
	tr := &tracker{open: map[string]holding{}}
	ctx, stop := context.WithTimeout(t.Context(), duration)
	defer stop()

	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			if err := hammer(ctx, c, "k", fmt.Sprint("g", g), limit, ttl, tr.acquired, tr.extended, tr.ended); err != nil {
				t.Error(err)
			}
		})
	}
	for s := range 2 {
		wg.Go(func() {
			for gen := 0; ctx.Err() == nil; gen++ {
				p := testenv.StartHelper(t, "stress", envPrefix+"="+prefix, envKey+"=k",
					envTTL+"="+ttl.String(), envLimit+"="+strconv.Itoa(limit), fmt.Sprintf("%s=p%d.%d", envName, s, gen))
				fed := make(chan struct{})
				go func() {
					defer close(fed)
					for line := range p.Lines() {
						tr.feed(line)
					}
				}()
				select {
				case <-ctx.Done():
				case <-time.After(time.Duration(500+rand.IntN(1500)) * time.Millisecond):
				}
				if gen%2 == 1 && ctx.Err() == nil {
					p.Stop(t) // paused past its leases' TTL
					time.Sleep(2 * ttl)
					p.Cont(t)
					time.Sleep(ttl)
				}
				p.Kill(t)
				<-fed
			}
		})
	}

	samples := 0
	for ; ctx.Err() == nil; samples++ {
		n, err := rdb.ZCard(ctx, ks.LeaseSet("k")).Result()
		if err != nil && ctx.Err() == nil {
			t.Error(err)
			break
		}
		if n > limit {
			t.Errorf("lease set holds %d members, limit %d", n, limit)
			break
		}
		time.Sleep(time.Millisecond)
	}
	stop()
	wg.Wait()
	peak, holdings := tr.maxOverlap()
	t.Logf("%d samples, %d holdings, peak %d trusted at once", samples, holdings, peak)
	if peak > limit {
		t.Fatalf("%d trust windows overlapped, limit %d", peak, limit)
	}
	if holdings < 100 {
		t.Fatalf("only %d holdings in %v: the test did not exercise the lease", holdings, duration)
	}
}
