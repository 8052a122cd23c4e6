package cancel_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/cancel"
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
)

func TestWatchIsCancelledOverNATS(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rdb := testenv.Redis(t).Client(t)
	wnc := testenv.NATS(t).Conn(t)
	f := e.flags(t, rdb, testenv.NATS(t).Conn(t))
	// Polls once an hour, and the read of fresh ids is over before the
	// request: only the read the NATS message prompts can cancel.
	w := e.watcher(t, rdb, wnc, time.Hour)
	e.subscribed(t, testenv.NATS(t))

	ctx, stop := w.Watch(context.Background(), "job-1")
	defer stop()
	e.fresh(t, f, w)
	start := time.Now()
	if err := f.Request(t.Context(), "job-1", time.Minute); err != nil {
		t.Fatal(err)
	}
	// Generous: a loaded machine is slow, and the hour-long poll already
	// proves which path delivered.
	cancelled(t, ctx, 5*time.Second, "job-1")
	t.Logf("request to cancelled context over NATS: %v", time.Since(start))
}

// A NATS message is not a cancel request: anyone who can publish on the
// subject could send one. Only the flag in Redis cancels.
func TestForgedMessageCancelsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rdb := testenv.Redis(t).Client(t)
	wnc, pnc := testenv.NATS(t).Conn(t), testenv.NATS(t).Conn(t)
	f := e.flags(t, rdb, pnc)
	w := e.watcher(t, rdb, wnc, time.Hour)
	e.subscribed(t, testenv.NATS(t))

	forged, stopForged := w.Watch(context.Background(), "job-1")
	defer stopForged()
	real, stopReal := w.Watch(context.Background(), "job-2")
	defer stopReal()
	e.fresh(t, f, w)
	if err := pnc.Publish(e.subject, []byte("job-1")); err != nil {
		t.Fatal(err)
	}
	// Published after the forgery on the same connection, so delivered
	// after it: once job-2 is cancelled, job-1's message was acted on.
	if err := f.Request(t.Context(), "job-2", time.Minute); err != nil {
		t.Fatal(err)
	}
	cancelled(t, real, 5*time.Second, "job-2")
	if forged.Err() != nil {
		t.Fatalf("a NATS message with no flag behind it cancelled job-1: %v", context.Cause(forged))
	}
	// The real request still gets through.
	if err := f.Request(t.Context(), "job-1", time.Minute); err != nil {
		t.Fatal(err)
	}
	cancelled(t, forged, 5*time.Second, "job-1")
}

func TestWatchIsCancelledByFlagWhenNATSIsDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rdb := testenv.Redis(t).Client(t)
	srv := testenv.StartNATS(t)
	wnc, rnc := srv.Conn(t), srv.Conn(t)
	f := e.flags(t, rdb, rnc)
	w := e.watcher(t, rdb, wnc, 50*time.Millisecond)
	ctx, stop := w.Watch(context.Background(), "job-1")
	defer stop()

	srv.Stop(t)
	disconnected(t, wnc, rnc)
	if err := f.Request(t.Context(), "job-1", time.Minute); err != nil {
		t.Fatalf("Request with NATS down: %v", err)
	}
	cancelled(t, ctx, 5*time.Second, "job-1")
}

func TestMessageLostInAnOutageIsNotNeeded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rdb := testenv.Redis(t).Client(t)
	srv := testenv.StartNATS(t)
	wnc, rnc := srv.Conn(t), srv.Conn(t)
	f := e.flags(t, rdb, rnc)
	// The hour-long poll never comes: what cancels is the sweep of the
	// flags the watcher makes when its connection is back.
	w := e.watcher(t, rdb, wnc, time.Hour)
	ctx, stop := w.Watch(context.Background(), "job-1")
	defer stop()
	e.subscribed(t, srv)
	e.fresh(t, f, w)

	srv.Stop(t)
	disconnected(t, wnc, rnc)
	if err := f.Request(t.Context(), "job-1", time.Minute); err != nil {
		t.Fatal(err)
	}
	if len(e.logs.Lines("level=WARN", "not published", "cancel_id=job-1")) == 0 {
		t.Fatalf("the request was published during the outage; this test needs it lost. log:\n%s", e.logs)
	}
	if ctx.Err() != nil {
		t.Fatalf("cancelled before NATS came back: %v", context.Cause(ctx))
	}
	srv.Start(t)
	cancelled(t, ctx, 5*time.Second, "job-1")
}

func TestWatchAfterFlagWasSet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rdb := testenv.Redis(t).Client(t)
	f := e.flags(t, rdb, nil)
	// No NATS, and the regular poll is an hour away: only the read of newly
	// watched ids can find the flag.
	w := e.watcher(t, rdb, nil, time.Hour)
	if err := f.Request(t.Context(), "job-1", time.Minute); err != nil {
		t.Fatal(err)
	}
	ctx, stop := w.Watch(context.Background(), "job-1")
	defer stop()
	cancelled(t, ctx, 5*time.Second, "job-1")
}

func TestWatchPollsAlone(t *testing.T) {
	t.Parallel()
	for _, b := range testenv.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			f := e.flags(t, b.Client, nil)
			w := e.watcher(t, b.Client, nil, 20*time.Millisecond)

			// Ids spread over the cluster's slots; one poll reads them all.
			ctxs := make([]context.Context, 20)
			for i := range ctxs {
				ctx, stop := w.Watch(context.Background(), "job-"+strconv.Itoa(i))
				defer stop()
				ctxs[i] = ctx
			}
			for i := 0; i < len(ctxs); i += 2 {
				if err := f.Request(t.Context(), "job-"+strconv.Itoa(i), time.Minute); err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; i < len(ctxs); i += 2 {
				cancelled(t, ctxs[i], 5*time.Second, "job-"+strconv.Itoa(i))
			}
			for i := 1; i < len(ctxs); i += 2 {
				if ctxs[i].Err() != nil {
					t.Fatalf("job-%d was never requested but is cancelled: %v", i, context.Cause(ctxs[i]))
				}
			}
		})
	}
}

func TestOnlyRequestedIDsAreCancelled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rdb := testenv.Redis(t).Client(t)
	f := e.flags(t, rdb, testenv.NATS(t).Conn(t))
	w := e.watcher(t, rdb, testenv.NATS(t).Conn(t), 10*time.Millisecond)

	requested, stopRequested := w.Watch(context.Background(), "requested")
	defer stopRequested()
	other, stopOther := w.Watch(context.Background(), "other")
	defer stopOther()
	if err := f.Request(t.Context(), "requested", time.Minute); err != nil {
		t.Fatal(err)
	}
	cancelled(t, requested, 5*time.Second, "requested")
	// Absence can only be waited for: many polls and any message have come by now.
	deadline := time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(deadline) {
		if other.Err() != nil {
			t.Fatalf("an id nobody requested was cancelled: %v", context.Cause(other))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestStopAndParentEndAWatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rdb := testenv.Redis(t).Client(t)
	w := e.watcher(t, rdb, nil, time.Hour)

	ctx, stop := w.Watch(context.Background(), "job-1")
	stop()
	stop() // idempotent
	if cause := context.Cause(ctx); cause != context.Canceled {
		t.Fatalf("cause after stop = %v, want context.Canceled", cause)
	}

	// A parent that ends cancels the watch too, with the parent's cause.
	parent, stopParent := context.WithCancelCause(context.Background())
	ctx, stop = w.Watch(parent, "job-2")
	defer stop()
	shutdown := errors.New("shutting down")
	stopParent(shutdown)
	if cause := context.Cause(ctx); cause != shutdown {
		t.Fatalf("cause after the parent ended = %v, want %v", cause, shutdown)
	}
}

func TestEveryWatchOfAnIDIsCancelled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rdb := testenv.Redis(t).Client(t)
	f := e.flags(t, rdb, testenv.NATS(t).Conn(t))
	w := e.watcher(t, rdb, testenv.NATS(t).Conn(t), 10*time.Millisecond)

	parent, stopParent := context.WithCancel(context.Background())
	defer stopParent()
	var ctxs []context.Context
	for _, p := range []context.Context{context.Background(), context.Background(), parent} {
		ctx, stop := w.Watch(p, "job-1")
		defer stop()
		ctxs = append(ctxs, ctx)
	}
	if err := f.Request(t.Context(), "job-1", time.Minute); err != nil {
		t.Fatal(err)
	}
	for i, ctx := range ctxs {
		cancelled(t, ctx, 5*time.Second, "watch "+strconv.Itoa(i))
	}
}

func TestWatchConcurrently(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rdb := testenv.Redis(t).Client(t)
	f := e.flags(t, rdb, testenv.NATS(t).Conn(t))
	wnc := testenv.NATS(t).Conn(t)
	w := e.watcher(t, rdb, wnc, 10*time.Millisecond)
	e.subscribed(t, testenv.NATS(t))

	const n = 200
	id := func(i int) string { return "job-" + strconv.Itoa(i) }
	requested := func(i int) bool { return i%2 == 0 }
	ctxs := make([]context.Context, n)
	stops := make([]context.CancelFunc, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { ctxs[i], stops[i] = w.Watch(context.Background(), id(i)) })
	}
	wg.Wait()

	// While requests arrive, other goroutines keep watching and unwatching
	// ids nobody requests: none of those may ever see ErrRequested.
	churn, stopChurn := context.WithCancel(context.Background())
	var churners sync.WaitGroup
	defer churners.Wait()
	defer stopChurn()
	for g := range 8 {
		churners.Go(func() {
			for k := 0; churn.Err() == nil; k++ {
				i := (2*(g*1000+k) + 1) % n // odd: never requested
				ctx, stop := w.Watch(context.Background(), id(i))
				stop()
				if cause := context.Cause(ctx); cause != context.Canceled {
					t.Errorf("churn watch of %s: cause %v, want context.Canceled", id(i), cause)
					return
				}
			}
		})
	}
	for i := range n {
		if requested(i) {
			wg.Go(func() {
				if err := f.Request(t.Context(), id(i), time.Minute); err != nil {
					t.Error(err)
				}
			})
		}
	}

	// At every step: no id that was not requested is cancelled.
	check := func() (done int) {
		for i, ctx := range ctxs {
			if ctx.Err() == nil {
				continue
			}
			if !requested(i) {
				t.Fatalf("%s was never requested but is cancelled: %v", id(i), context.Cause(ctx))
			}
			done++
		}
		return done
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return check() == n/2 }, "not every requested id was cancelled")
	wg.Wait()
	deadline := time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(deadline) {
		check()
		time.Sleep(5 * time.Millisecond)
	}
	got := 0
	for i, ctx := range ctxs {
		if context.Cause(ctx) == cancel.ErrRequested {
			got++
		}
		stops[i]()
	}
	if got != n/2 {
		t.Fatalf("%d contexts cancelled with ErrRequested, want exactly %d", got, n/2)
	}
}

func TestRunFailsOnAClosedConnection(t *testing.T) {
	t.Parallel()
	nc := testenv.NATS(t).Conn(t)
	nc.Close()
	w, err := cancel.NewWatcher(store.New(testenv.Redis(t).Client(t), store.Config{}), nc, cancel.WatcherConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(t.Context()); err == nil {
		t.Fatal("Run on a closed NATS connection returned nil; it must say it cannot subscribe")
	}
}

// A watch whose parent has ended is as good as stopped: a request for its
// id, even one found right after it was watched, tells no one.
func TestWatchWhoseParentEndedIsNotTold(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rdb := testenv.Redis(t).Client(t)
	f := e.flags(t, rdb, nil)
	var mu sync.Mutex
	var told []string
	// No polls: only the read of each id right after it is watched.
	w, err := cancel.NewWatcher(store.New(rdb, store.Config{Prefix: e.prefix}), nil, cancel.WatcherConfig{Poll: time.Hour, Logger: e.log,
		Fired: func(id, _ string) {
			mu.Lock()
			defer mu.Unlock()
			told = append(told, id)
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stopRun := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	defer func() {
		stopRun()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	// requested watches id, requested before, and waits until it is told:
	// Run has then read every id watched before it.
	requested := func(parent context.Context, id string) {
		t.Helper()
		if err := f.Request(t.Context(), id, time.Minute); err != nil {
			t.Fatal(err)
		}
		ctx, stop := w.Watch(parent, id)
		t.Cleanup(stop)
		if parent.Err() == nil {
			cancelled(t, ctx, 5*time.Second, id)
		}
	}
	requested(context.Background(), "started") // Run's first read is done
	ended, end := context.WithCancel(context.Background())
	end()
	requested(ended, "ended")
	requested(context.Background(), "after-1")
	requested(context.Background(), "after-2") // the read of "ended" is done
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"started", "after-1", "after-2"}; !slices.Equal(told, want) {
		t.Fatalf("told %v, want %v", told, want)
	}
}

// A request published before its id is watched reaches the Watcher while
// nobody watches the id; the Watch that comes after is cancelled at once,
// by a read of the flag that message prompts (the poll is an hour away).
func TestWatchAfterARequestItsWatcherHeard(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rdb := testenv.Redis(t).Client(t)
	f := e.flags(t, rdb, testenv.NATS(t).Conn(t))
	w := e.watcher(t, rdb, testenv.NATS(t).Conn(t), time.Hour)
	e.subscribed(t, testenv.NATS(t))
	e.fresh(t, f, w) // the subscription is live

	// The probe's message comes after job-1's on the same subscription: once
	// the probe is cancelled, the Watcher has heard of job-1.
	probe, stopProbe := w.Watch(context.Background(), "probe-2")
	defer stopProbe()
	for _, id := range []string{"job-1", "probe-2"} {
		if err := f.Request(t.Context(), id, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	cancelled(t, probe, 5*time.Second, "probe-2")
	ctx, stop := w.Watch(context.Background(), "job-1")
	defer stop()
	cancelled(t, ctx, 5*time.Second, "job-1")
}

// flagReads records the cancel flags a client reads (EXISTS).
type flagReads struct {
	mu   sync.Mutex
	keys []string
}

func (r *flagReads) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *flagReads) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.note(cmd)
		return next(ctx, cmd)
	}
}
func (r *flagReads) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			r.note(cmd)
		}
		return next(ctx, cmds)
	}
}
func (r *flagReads) note(cmd redis.Cmder) {
	if cmd.Name() != "exists" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range cmd.Args()[1:] {
		r.keys = append(r.keys, fmt.Sprint(a))
	}
}

// read reports whether the flag of id (under prefix) was read.
func (r *flagReads) read(prefix, id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.keys, keys.New(prefix).CancelFlag(id))
}

// While the subscription is live, a watched id nobody requested costs no
// Redis read: a request would reach the Watcher as a message, before the
// Watch or after it. With no NATS, every new id's flag is read at once.
func TestWatchOfAnIDNobodyRequestedReadsNothing(t *testing.T) {
	t.Parallel()
	for _, withNATS := range []bool{true, false} {
		t.Run(fmt.Sprintf("nats=%v", withNATS), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			rdb := testenv.Redis(t).Client(t)
			reads := &flagReads{}
			wrdb := testenv.Redis(t).Client(t)
			wrdb.AddHook(reads)
			var nc *nats.Conn
			if withNATS {
				nc = testenv.NATS(t).Conn(t)
			}
			f := e.flags(t, rdb, nc)
			w := e.watcher(t, wrdb, nc, time.Hour)
			if withNATS {
				e.subscribed(t, testenv.NATS(t))
				e.fresh(t, f, w) // the subscription is live
			}
			ctx, stop := w.Watch(context.Background(), "quiet-1")
			defer stop()
			// Run reads the flags of the ids watched before the probe in the
			// probe's read or earlier (see fresh).
			e.fresh(t, f, w)
			if got := reads.read(e.prefix, "quiet-1"); got != !withNATS {
				t.Fatalf("flag of an id nobody requested read: %v, want %v", got, !withNATS)
			}
			if ctx.Err() != nil {
				t.Fatalf("cancelled: %v", context.Cause(ctx))
			}
		})
	}
}
