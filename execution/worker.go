package execution

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasehold/leasehold/cancel"
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/telemetry"
	"github.com/leasehold/leasehold/internal/testsignal"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/lease"
	"github.com/leasehold/leasehold/ratelimit/usage"
)

// Config configures a Worker. Zero values mean the documented defaults.
type Config struct {
	// Prefix starts every Redis key; default keys.DefaultPrefix.
	Prefix string
	// Queues the worker claims from, in turn; default ["default"].
	Queues []string
	// Concurrency is how many executions run at once; default 32.
	Concurrency int
	// Heartbeat is how often leases are renewed; default 2s.
	Heartbeat time.Duration
	// LeaseTTL is how long a lease lives without a heartbeat; default 10s.
	// It must cover at least two heartbeats.
	LeaseTTL time.Duration
	// ShutdownGrace is how long running executions may finish after Run's
	// context is done, before they are cancelled and handed back; default 30s.
	ShutdownGrace time.Duration
	// Poll is how often an idle worker looks for work without a wake-up,
	// jittered by ±50%; default 1s.
	Poll time.Duration
	// Retention is how long terminal jobs stay readable; default
	// job.DefaultRetention. Use the job store's value.
	Retention time.Duration
	// FoldAfter is how long after a job ends the reaper folds it: its
	// events and long fields into its folded key, its hash into a listpack
	// (see fold.go); default DefaultFoldAfter.
	// Readers find the events either way; a reader still waiting for the
	// events of a job that ended that long ago waits out its wait.
	FoldAfter time.Duration
	// Backoff is the wait before retry number attempt; default DefaultBackoff.
	// A handler's RetryAfterError makes it longer, never shorter.
	Backoff func(attempt int) time.Duration
	// MaxEvents caps the events one execution may emit; default
	// DefaultMaxEvents. Past it Emit fails (ErrTooManyEvents), so a handler
	// cannot loop on Redis writes for the whole of its timeout.
	MaxEvents int
	// ID names the worker in executions; default host-pid-random. At most
	// 128 letters, digits and . _ - : @ (the scripts write it into state
	// events' JSON as it is).
	ID string
	// NATS carries wake-ups and fast cancels; nil means polling alone.
	NATS *nats.Conn
	// CancelSubject is the NATS subject cancel requests are published on;
	// default the cancel package's.
	CancelSubject string
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Usage, when set, has the claim and finish scripts count each
	// tenant's executions started and their outcomes (usage.Lifecycle) in
	// the queue's usage, in the step that starts or ends each, kept for
	// its Retention; default nil: not counted.
	Usage *usage.Counters
	// MeterProvider gets the worker's metrics (metrics.go); default
	// otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// TracerProvider makes each execution's spans, in its job's trace;
	// default otel.GetTracerProvider().
	TracerProvider trace.TracerProvider

	// idle fires each time the worker, its wake-up subscriptions made,
	// found nothing to claim and is about to wait; set by tests only
	// (export_test.go).
	idle *testsignal.Signal
	// started holds, by service name (service.go), a signal fired as the
	// service starts; set by tests only (export_test.go).
	started map[string]*testsignal.Signal
	// alongFor replaces defaultAlongFor (see fused); set by tests only
	// (export_test.go), which need a claim to follow another within it
	// however loaded the machine.
	alongFor time.Duration
}

// DefaultMaxEvents is the default Config.MaxEvents: far more than an LLM
// stream batched into output events needs (llm.chat emits at most about 20 a
// second), and a bound on the writes of a handler that loops.
const DefaultMaxEvents = 100_000

// DefaultBackoff waits 1s before the first retry and doubles each time up
// to 5 minutes, with jitter (50–100% of that) so retries of jobs that
// failed together do not come back together.
func DefaultBackoff(attempt int) time.Duration {
	d := time.Second << min(max(attempt-1, 0), 9)
	d = min(d, 5*time.Minute)
	return d/2 + rand.N(d/2+1)
}

// Worker claims jobs from its queues and runs their handlers, up to
// Concurrency at a time, keeping each execution's lease alive.
type Worker struct {
	cfg      Config
	log      *slog.Logger
	queues   []*queue
	handlers map[string]Handler
	watcher  *cancel.Watcher
	reaper   *Reaper
	limits   *limits
	paused   paused
	metrics  *metrics
	tracer   trace.Tracer

	rdb      redis.UniversalClient
	st       *store.Store
	slots    chan struct{}   // one token per running execution
	wake     chan struct{}   // a job may be waiting
	waker    *Waker          // wakes other workers' idle loops
	finishes chan *finishing // for the finisher, which batches them

	mu      sync.Mutex
	running map[*Execution]*running
	done    sync.WaitGroup // the runners

	handBack     chan struct{} // closed by HandBack: the grace ends at once
	handBackOnce sync.Once

	// Executions run on runners, goroutines that stay for the next
	// execution (see start). Run makes them anew; only fetch uses them.
	runnable chan *running // to an idle runner; closed when Run stops claiming
	runners  int           // started so far
}

// running is an execution in flight and what the worker needs to stop it.
type running struct {
	e    *Execution
	ctx  context.Context // the handler's, before its timeout
	stop context.CancelCauseFunc
	// trust fences the execution: it fires when no heartbeat has succeeded
	// for a whole lease TTL since the last one was sent.
	trust *time.Timer

	mu           sync.Mutex
	trustedUntil time.Time // when trust fires, for the finish retries

	cancelSeen cancelSeen // for the cancel latency metrics
}

// extend moves the end of the trust window to a TTL after sent.
func (r *running) extend(sent time.Time, ttl time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.trustedUntil = sent.Add(ttl)
	r.trust.Reset(time.Until(r.trustedUntil))
}

func (r *running) trusted(at time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return at.Before(r.trustedUntil)
}

func (r *running) trustEnds() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.trustedUntil
}

// NewWorker returns a worker on rdb. Register handlers with Handle, then
// call Run.
func NewWorker(rdb redis.UniversalClient, cfg Config) (*Worker, error) {
	if rdb == nil {
		return nil, errors.New("execution: nil redis client")
	}
	if len(cfg.Queues) == 0 {
		cfg.Queues = []string{job.DefaultQueue}
	}
	cfg.Concurrency = cmp.Or(cfg.Concurrency, 32)
	cfg.Heartbeat = cmp.Or(cfg.Heartbeat, 2*time.Second)
	cfg.LeaseTTL = cmp.Or(cfg.LeaseTTL, 10*time.Second)
	cfg.ShutdownGrace = cmp.Or(cfg.ShutdownGrace, 30*time.Second)
	cfg.Poll = cmp.Or(cfg.Poll, time.Second)
	cfg.Retention = cmp.Or(cfg.Retention, job.DefaultRetention)
	cfg.MaxEvents = cmp.Or(cfg.MaxEvents, DefaultMaxEvents)
	cfg.FoldAfter = cmp.Or(cfg.FoldAfter, DefaultFoldAfter)
	if cfg.Backoff == nil {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.ID == "" {
		host, _ := os.Hostname()
		host = strings.Map(func(r rune) rune {
			if validID(string(r)) {
				return r
			}
			return '-'
		}, host)
		cfg.ID = fmt.Sprintf("%.100s-%d-%04x", cmp.Or(host, "worker"), os.Getpid(), rand.N(1<<16))
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = otel.GetMeterProvider()
	}
	switch {
	case cfg.Concurrency < 1:
		return nil, fmt.Errorf("execution: concurrency %d: must be at least 1", cfg.Concurrency)
	case cfg.Heartbeat <= 0 || cfg.LeaseTTL < 2*cfg.Heartbeat:
		return nil, fmt.Errorf("execution: lease TTL %v must cover at least two heartbeats of %v", cfg.LeaseTTL, cfg.Heartbeat)
	case cfg.ShutdownGrace < 0 || cfg.Poll < 0 || cfg.Retention < 0 || cfg.FoldAfter < 0:
		return nil, errors.New("execution: negative duration in config")
	case cfg.MaxEvents < 0:
		return nil, fmt.Errorf("execution: max events %d: must not be negative", cfg.MaxEvents)
	case !validID(cfg.ID):
		return nil, fmt.Errorf("execution: worker id %q: use at most 128 letters, digits and . _ - : @", cfg.ID)
	}
	w := &Worker{
		cfg:      cfg,
		log:      cfg.Logger.With("worker", cfg.ID),
		handlers: map[string]Handler{},
		rdb:      rdb,
		st:       store.New(rdb, store.Config{Prefix: cfg.Prefix}),
		slots:    make(chan struct{}, cfg.Concurrency),
		wake:     make(chan struct{}, 1),
		waker:    NewWaker(cfg.NATS, cfg.Prefix, cfg.Logger),
		finishes: make(chan *finishing),
		running:  map[*Execution]*running{},
		handBack: make(chan struct{}),
		limits:   &limits{},
		tracer:   telemetry.Tracer(cfg.TracerProvider),
	}
	metrics, err := newMetrics(cfg.MeterProvider, w)
	if err != nil {
		return nil, fmt.Errorf("execution: metrics: %w", err)
	}
	w.metrics = metrics
	ks := keys.New(cfg.Prefix)
	var usageTTL time.Duration // 0: not counted
	if cfg.Usage != nil {
		usageTTL = cfg.Usage.Retention()
	}
	for _, name := range cfg.Queues {
		if err := job.ValidateQueue(name); err != nil {
			return nil, fmt.Errorf("execution: %w", err)
		}
		q := &queue{name: name, st: w.st, rdb: rdb, keys: ks, ttl: cfg.LeaseTTL,
			retention: cfg.Retention, backoff: cfg.Backoff, maxEvents: cfg.MaxEvents, limits: w.limits,
			back: 2 * cfg.Poll, usageTTL: usageTTL, metrics: w.metrics, alongFor: cmp.Or(cfg.alongFor, defaultAlongFor)}
		q.hints.Store(&hints{costs: &laneCosts{}}) // the first claim finds nothing left
		w.queues = append(w.queues, q)
	}
	w.reaper = &Reaper{queues: w.queues, interval: cfg.Heartbeat, foldAfter: cfg.FoldAfter, log: w.log}
	if cfg.NATS != nil {
		watcher, err := cancel.NewWatcher(w.st, cfg.NATS, cancel.WatcherConfig{
			Subject: cfg.CancelSubject, Logger: cfg.Logger,
			// The heartbeat reads the job's cancel state, which is the truth;
			// the watcher is only the fast path, so its own polling can be rare.
			Poll:      cfg.LeaseTTL,
			Fired:     w.cancelFired,
			Requested: w.cancelRequested,
		})
		if err != nil {
			return nil, fmt.Errorf("execution: %w", err)
		}
		w.watcher = watcher
	}
	return w, nil
}

// ID is the worker's name, as it appears in executions.
func (w *Worker) ID() string { return w.cfg.ID }

// validID reports whether id is a worker id Config.ID allows.
func validID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, r := range id {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("._-:@", r)) {
			return false
		}
	}
	return true
}

// Running is how many executions the worker is running now.
func (w *Worker) Running() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.running)
}

// HandBack ends the shutdown grace: once Run's ctx is done, running
// executions are cancelled with ErrShutdown and their jobs handed back
// at once, instead of after ShutdownGrace. It is what a second Ctrl-C
// asks for.
func (w *Worker) HandBack() { w.handBackOnce.Do(func() { close(w.handBack) }) }

// Handle registers h for jobs of kind. Call it before Run: the worker
// claims jobs of the kinds it has handlers for, and no others.
func (w *Worker) Handle(kind string, h Handler) { w.handlers[kind] = h }

// Kinds are the kinds the worker serves, sorted.
func (w *Worker) Kinds() []string { return slices.Sorted(maps.Keys(w.handlers)) }

// serveKinds tells the queues the kinds their claims take: those of the
// handlers registered.
func (w *Worker) serveKinds() {
	kinds := w.Kinds()
	for _, q := range w.queues {
		q.kinds, q.served = make([]any, len(kinds)), make(map[string]bool, len(kinds))
		for i, k := range kinds {
			q.kinds[i], q.served[k] = k, true
		}
	}
}

// Run claims and runs jobs until ctx is done. Then it stops claiming at once,
// lets running executions finish for ShutdownGrace, cancels the rest with
// ErrShutdown and hands their jobs back to their queues, and returns when
// every execution has ended.
func (w *Worker) Run(ctx context.Context) error {
	w.serveKinds()
	// Handlers run under workCtx, which outlives ctx by the grace period.
	workCtx, stopWork := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopWork(nil)
	// The services run under bgCtx, which ends once every execution has,
	// but the reaper, which stops with claiming.
	bgCtx, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	svc := &services{log: w.log, started: w.cfg.started}
	defer svc.wait()
	defer stopBackground()

	svc.start(bgCtx, serviceHeartbeats, w.heartbeats)
	svc.start(bgCtx, serviceFinisher, w.finisher)
	svc.start(bgCtx, serviceRegistry, w.publish)
	svc.start(ctx, serviceReaper, w.reaper.Run)
	if w.watcher != nil {
		svc.start(bgCtx, serviceCancelWatcher, w.watcher.Run)
		for _, q := range w.queues {
			sub, err := w.cfg.NATS.QueueSubscribe(q.keys.WakeSubject(q.name), "leasehold-workers", func(*nats.Msg) { w.poke() })
			if err != nil {
				w.log.WarnContext(ctx, "no wake-ups; polling only", "queue", q.name, "error", err)
				continue
			}
			defer func() { _ = sub.Unsubscribe() }() // the connection may be gone at shutdown
		}
	}

	w.runnable, w.runners = make(chan *running), 0
	// Never claim without the limits (an empty copy would admit
	// everything) and the paused queues.
	if w.refreshLimits(ctx) == nil {
		svc.start(bgCtx, serviceLimits, w.keepLimits)
		w.fetch(ctx, workCtx, bgCtx)
	}
	close(w.runnable) // runners exit

	drained := make(chan struct{})
	go func() { w.done.Wait(); close(drained) }()
	grace := time.NewTimer(w.cfg.ShutdownGrace)
	defer grace.Stop()
	select {
	case <-drained:
	case <-grace.C:
		w.log.InfoContext(ctx, "shutdown grace over; handing back running jobs")
		stopWork(ErrShutdown)
		<-drained
	case <-w.handBack:
		w.log.InfoContext(ctx, "handing back running jobs now")
		stopWork(ErrShutdown)
		<-drained
	}
	return nil
}

// refreshLimits loads the concurrency limits and the paused queues,
// retrying until it succeeds or ctx is done.
func (w *Worker) refreshLimits(ctx context.Context) error {
	for {
		err := w.refreshShared(ctx)
		if err == nil || ctx.Err() != nil {
			return err
		}
		w.log.WarnContext(ctx, "cannot read concurrency limits; not claiming yet", "error", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(w.cfg.Poll):
		}
	}
}

// keepLimits refreshes the limits and the paused queues every heartbeat
// interval, so a change made through the API takes effect within seconds,
// until ctx is done.
func (w *Worker) keepLimits(ctx context.Context) error {
	ticker := time.NewTicker(w.cfg.Heartbeat)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		if err := w.refreshShared(ctx); err != nil && ctx.Err() == nil {
			w.log.WarnContext(ctx, "cannot refresh concurrency limits; keeping the last ones", "error", err)
		}
	}
}

func (w *Worker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// fetch claims jobs while there are free slots, until ctx is done.
// Handlers run under workCtx, and their finishes are written under bgCtx.
// A claim that owes a WAIT for replicas goes to the confirmer, which
// starts its jobs once the WAIT returns; fetch claims on meanwhile.
func (w *Worker) fetch(ctx, workCtx, bgCtx context.Context) {
	confirms := make(chan *confirming, w.cfg.Concurrency) // a claim holds at least a slot
	confirmed := make(chan struct{})
	go func() { defer close(confirmed); w.confirmer(workCtx, bgCtx, confirms) }()
	defer func() { close(confirms); <-confirmed }()
	next := 0 // queue to try first, in turn, so no queue starves another
	var linger time.Duration
	for {
		free := w.take(ctx, linger)
		if free == 0 {
			return
		}
		began := time.Now()
		claimed, busy := 0, false
		for i := range w.queues {
			if claimed == free {
				break
			}
			q := w.queues[(next+i)%len(w.queues)]
			if w.paused.has(q.name) {
				continue
			}
			sent := time.Now()
			execs, more, conf, err := q.claim(ctx, w.cfg.ID, free-claimed)
			w.metrics.claimed(ctx, q.name, time.Since(sent))
			if err != nil && ctx.Err() == nil {
				w.log.WarnContext(ctx, "claim failed", "queue", q.name, "error", err)
			}
			if conf != nil {
				confirms <- &confirming{conf: conf, execs: execs, sent: sent}
			} else {
				for _, e := range execs {
					w.start(workCtx, bgCtx, e, sent)
				}
			}
			claimed += len(execs)
			busy = busy || more
		}
		next++
		for range free - claimed {
			<-w.slots
		}
		linger = 0
		if claimed > 0 {
			linger = min(time.Since(began)/10, maxLinger)
		}
		if claimed == 0 && !busy {
			w.idle(ctx)
		}
	}
}

// maxLinger bounds how long take lingers for more slots, and gather for
// more finishes.
const maxLinger = 2 * time.Millisecond

// take takes free slots for the next claim, and returns how many (0 once
// ctx is done): at least one, waiting for it, then all that are free, and
// then, for up to linger, those that free until all are.
//
// A claim costs Redis about as much for one job as for ten (the peek, the
// claim script's fixed work, the round trips): a worker whose handlers
// are short would otherwise claim a few jobs as the first of the last
// claim's handlers return, while the others return during that claim and
// wait for the next, and it would spend on small claims what could run
// jobs. fetch lingers a tenth of its last claim's time (a claim's
// handlers that return together return within it), which a job of the
// slot freed first waits more, at most; after a claim that found nothing,
// not at all.
func (w *Worker) take(ctx context.Context, linger time.Duration) int {
	select {
	case w.slots <- struct{}{}:
	case <-ctx.Done():
		return 0
	}
	free := 1
	for free < w.cfg.Concurrency {
		select {
		case w.slots <- struct{}{}:
			free++
			continue
		default:
		}
		break
	}
	if free == w.cfg.Concurrency || linger <= 0 {
		return free
	}
	until := time.NewTimer(linger)
	defer until.Stop()
	for free < w.cfg.Concurrency {
		select {
		case w.slots <- struct{}{}:
			free++
		case <-until.C:
			return free
		case <-ctx.Done():
			for range free {
				<-w.slots
			}
			return 0
		}
	}
	return free
}

// confirming is a claim's jobs waiting for its WAIT (see confirmation).
type confirming struct {
	conf  *confirmation
	execs []*Execution
	sent  time.Time // when the claim began
}

// confirmer sends the WAITs claims owe, and starts their jobs once their
// replicas have them, until confirms is closed and drained. The claims
// that came while a WAIT was out share the next one: sent on the
// connection of the last of them, it covers the writes of all (fetch
// claims one after another, and every claim here wrote its jobs). A claim
// not confirmed does not start its jobs: their leases expire, and the
// reaper retries them, as after a worker's crash.
//
// While claims owe WAITs, the confirmer is the one caller of start.
func (w *Worker) confirmer(workCtx, bgCtx context.Context, confirms <-chan *confirming) {
	for c := range confirms {
		batch := []*confirming{c}
	more:
		for len(batch) < cap(confirms) {
			select {
			case c, ok := <-confirms:
				if !ok {
					break more
				}
				batch = append(batch, c)
			default:
				break more
			}
		}
		// Claimed jobs are started even as the worker stops, as fetch's own.
		err := batch[len(batch)-1].conf.owed.Confirm(context.WithoutCancel(bgCtx), batch[len(batch)-1].conf.conn)
		for _, c := range batch {
			c.conf.close()
			if err != nil {
				w.log.WarnContext(bgCtx, "claim not confirmed by replicas; its jobs are not run, and will be retried", "executions", len(c.execs), "error", err)
				for range c.execs {
					<-w.slots
				}
				continue
			}
			for _, e := range c.execs {
				w.start(workCtx, bgCtx, e, c.sent)
			}
		}
	}
}

// idle waits for a wake-up or the next jittered poll, or until a budget
// that refused a queue's last claim has room again, if sooner: the claims
// a throttle held come back as it ends, on every worker.
func (w *Worker) idle(ctx context.Context) {
	wait := w.cfg.Poll/2 + rand.N(w.cfg.Poll+1)
	for _, q := range w.queues {
		if d := time.Until(q.hints.Load().room); d > 0 {
			wait = min(wait, d) // past: the last claim came after it
		}
	}
	poll := time.NewTimer(wait)
	defer poll.Stop()
	w.cfg.idle.Fire()
	select {
	case <-ctx.Done():
	case <-w.wake:
	case <-poll.C:
	}
}

// start runs e on a runner. sent is when its claim began, the start of
// its receive span.
//
// Runners are goroutines that run one execution after another, started as
// needed up to twice Concurrency: an execution then costs no new
// goroutine, and no growing of a fresh stack. A runner gives its slot back
// when its handler returns (see execute), and then waits for the finish to
// be written: the next claim's round trips overlap that write instead of
// following it. So up to Concurrency runners run handlers and up to
// Concurrency more wait for finishes; once all are started, start waits
// for one of them. start is called by one goroutine: fetch, or, while
// claims owe WAITs, the confirmer.
func (w *Worker) start(workCtx, bgCtx context.Context, e *Execution, sent time.Time) {
	ctx, stop := context.WithCancelCause(workCtx)
	ctx = w.traceStart(ctx, e, sent)
	r := &running{e: e, ctx: ctx, stop: stop, trustedUntil: e.granted.Add(w.cfg.LeaseTTL)}
	r.trust = time.AfterFunc(time.Until(r.trustedUntil), func() { stop(lease.ErrLost) })
	w.mu.Lock()
	w.running[e] = r
	w.mu.Unlock()
	if w.runners == 2*w.cfg.Concurrency {
		w.runnable <- r
		return
	}
	select {
	case w.runnable <- r:
	default:
		w.runners++
		w.done.Add(1)
		go w.runner(bgCtx, w.runnable, r)
	}
}

// runner runs r, then the executions start hands it on runnable, until
// Run stops claiming and closes it. bgCtx is the finisher's.
func (w *Worker) runner(bgCtx context.Context, runnable <-chan *running, r *running) {
	defer w.done.Done()
	for ok := true; ok; r, ok = <-runnable {
		w.execute(r.ctx, bgCtx, r)
	}
}

func (w *Worker) execute(ctx, bgCtx context.Context, r *running) {
	e := r.e
	defer func() {
		r.trust.Stop()
		r.stop(nil)
		w.mu.Lock()
		delete(w.running, e)
		w.mu.Unlock()
	}()
	if w.watcher != nil {
		var unwatch context.CancelFunc
		ctx, unwatch = w.watcher.Watch(ctx, e.JobID)
		defer unwatch()
	}

	runCtx, stopRun := context.WithTimeout(ctx, e.Timeout)
	var o outcome
	switch err := context.Cause(runCtx); {
	case !r.trusted(time.Now()):
		// A claim slower than the TTL (its worker paused between taking
		// the key slots and the job) ends the trust window before the
		// handler starts, and the trust timer's own goroutine may not have
		// fired yet: the handler must not run, not even for the moment
		// until it does. It never ran, so the attempt is not spent.
		w.execLog(e).WarnContext(ctx, "claim took longer than the lease TTL; the job is handed back unrun", "lease_ttl", w.cfg.LeaseTTL)
		o = outcome{state: StateHandedOff, unrun: true}
	case err != nil:
		o = w.outcome(runCtx, nil, err)
		o.unrun = true
	default:
		result, err := w.call(runCtx, e)
		o = w.outcome(runCtx, result, err)
	}
	stopRun()
	// The handler has returned: the next claim need not wait for this
	// finish, unless e holds a slot of a limited key, which the finish
	// releases (a claim sent before would find the key full, and its lane
	// would wait for the next poll).
	limited := w.limited(e)
	if !limited {
		<-w.slots
	}

	traced := w.traceFinish(ctx, e, o)
	state, err := w.finish(bgCtx, r, o)
	if limited {
		<-w.slots
	}
	w.metrics.ended(ctx, r, o, state, err)
	traced(state, err)
	switch {
	case errors.Is(err, ErrNotOwner):
		w.execLog(e).WarnContext(ctx, "finish refused: another execution owns the job now", "outcome", o.state)
	case err != nil:
		w.execLog(e).ErrorContext(ctx, "finish failed; the lease will expire and the job be retried", "outcome", o.state, "error", err)
	default:
		if w.log.Enabled(ctx, slog.LevelDebug) {
			w.execLog(e).DebugContext(ctx, "execution finished", "outcome", o.state, "state", state)
		}
		// A job handed back, or a slot freed on a limited key, may let an
		// idle worker claim now.
		if state == job.StateQueued || limited {
			w.waker.Wake(ctx, e.Queue)
		}
	}
}

// execLog is the logger of e's lines. It is built only when a line is
// written: most executions write none, and the attributes cost
// allocations on every one.
func (w *Worker) execLog(e *Execution) *slog.Logger {
	return w.log.With("job_id", e.JobID, "execution_id", e.ID, "fencing_token", uint64(e.token), "attempt", e.attempt)
}

// limited says whether any of e's concurrency keys has a limit.
func (w *Worker) limited(e *Execution) bool {
	for _, k := range e.keys {
		if w.limits.of(k) >= 0 {
			return true
		}
	}
	return false
}

// call runs e's handler, turning a panic or a missing handler into an error.
func (w *Worker) call(ctx context.Context, e *Execution) (result any, err error) {
	h, ok := w.handlers[e.Kind]
	if !ok {
		return nil, &job.Error{Code: job.CodeUnknownKind, Message: fmt.Sprintf("no handler for kind %q", e.Kind)}
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v\n%s", p, debug.Stack()) // cut to MaxErrorMessage by outcome
		}
	}()
	return h(ctx, e)
}

// outcome decides how an execution ended. A handler that returned a result
// succeeded, even if its context was cancelled as it finished: the work is
// done. An error is read in the light of why the context ended, if it did.
func (w *Worker) outcome(ctx context.Context, result any, err error) outcome {
	if err == nil {
		b, merr := json.Marshal(result)
		if merr != nil {
			return outcome{state: StateFailed, err: &job.Error{Code: job.CodeHandlerError, Message: "result is not JSON: " + merr.Error()}}
		}
		return outcome{state: StateSucceeded, result: b}
	}
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, cancel.ErrRequested):
		return outcome{state: StateCancelled}
	case errors.Is(cause, ErrShutdown):
		return outcome{state: StateHandedOff}
	case errors.Is(cause, lease.ErrLost):
		return outcome{state: StateFailed, retryable: true, err: &job.Error{Code: job.CodeLeaseLost, Message: "lease lost while running"}}
	case errors.Is(cause, context.DeadlineExceeded):
		return outcome{state: StateTimedOut, retryable: true, err: &job.Error{Code: job.CodeTimeout, Message: "execution timed out"}}
	}
	if jerr, ok := errors.AsType[*job.Error](err); ok && jerr.Code == job.CodeUnknownKind {
		return outcome{state: StateFailed, retryable: true, err: jerr}
	}
	_, permanent := errors.AsType[*PermanentError](err)
	if we, ok := errors.AsType[*WaitError](err); ok {
		if verr := job.ValidateSignalName(we.For); verr != nil {
			return outcome{state: StateFailed, err: &job.Error{Code: job.CodeHandlerError, Message: "wait: " + verr.Error()}}
		}
		// A waiting job is kept whole in Redis and is no ended job that
		// the retention removes: its wait ends within the retention, so
		// that a tenant's input cannot keep it for ever.
		return outcome{state: StateWaiting, wait: &WaitError{For: we.For, Timeout: min(we.Timeout, w.cfg.Retention)}}
	}
	if pb, ok := errors.AsType[*PushbackError](err); ok {
		return outcome{state: StatePushback, minBackoff: pb.RetryAfter, pushedBack: pb.Keys,
			err: &job.Error{Code: job.CodeUpstreamLimited, Message: errorMessage("pushback: " + err.Error())}}
	}
	o := outcome{state: StateFailed, retryable: !permanent, err: &job.Error{Code: job.CodeHandlerError, Message: errorMessage(err.Error())}}
	if ra, ok := errors.AsType[*RetryAfterError](err); ok {
		o.minBackoff = ra.After
	}
	return o
}

// errorMessage is a handler's error text as the job keeps it: at most
// MaxErrorMessage bytes, valid UTF-8.
func errorMessage(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= MaxErrorMessage {
		return s
	}
	// Room for the note with as many digits as len(s) has: the bytes cut
	// have no more.
	keep := MaxErrorMessage - len(fmt.Sprintf("… (%d bytes cut)", len(s)))
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return fmt.Sprintf("%s… (%d bytes cut)", s[:keep], len(s)-keep)
}

// finish records o, retrying a failed write until the trust window ends:
// after that the lease may have expired and the reaper decides. ctx is the
// finisher's (not the execution's, which a cancelled or handed-back job has
// already ended): once it is done, nobody writes finishes any more.
func (w *Worker) finish(ctx context.Context, r *running, o outcome) (job.State, error) {
	const retry = 200 * time.Millisecond
	for {
		f := &finishing{e: r.e, o: o, done: make(chan struct{})}
		select {
		case w.finishes <- f:
		case <-ctx.Done():
			return "", fmt.Errorf("finish: %w", ctx.Err())
		}
		<-f.done
		if f.err == nil || errors.Is(f.err, ErrNotOwner) || !r.trusted(time.Now().Add(retry)) {
			return f.state, f.err
		}
		select {
		case <-time.After(retry):
		case <-ctx.Done():
			return f.state, f.err
		}
	}
}

// finisher writes finishes as they come, batching those that arrive while
// a write is in flight, and then for a moment more (gather), into one
// round trip. It runs until ctx is done, which is after every execution
// has ended.
func (w *Worker) finisher(ctx context.Context) error {
	const maxBatch = 256
	var linger time.Duration
	for {
		var batch []*finishing
		select {
		case <-ctx.Done():
			return nil
		case f := <-w.finishes:
			batch = append(batch, f)
		}
		w.mu.Lock()
		running := len(w.running) // every execution finishing is among them
		w.mu.Unlock()
		batch = w.gather(batch, min(running, maxBatch), linger)
		// Finishes are written even as the worker stops: a cancelled job must
		// still be recorded.
		fctx, stop := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		began := time.Now()
		finishAll(fctx, w.rdb, batch)
		linger = min(time.Since(began)/10, maxLinger)
		stop()
		for _, f := range batch {
			close(f.done)
		}
	}
}

// gather adds to batch the finishes waiting, then, for up to linger, those
// that arrive until it holds want (the executions running), and returns
// it. A finish costs Redis about as much for one job as for ten, as a
// claim does (see take), and the handlers of one claim's short jobs
// return one after another: without the linger, the first of them went
// alone, or with a few: at concurrency 10 a worker sent about two
// finishes a claim of ten, where it now sends little more than one.
// finisher lingers a tenth of its last write's time, which a finish waits
// more, at most.
func (w *Worker) gather(batch []*finishing, want int, linger time.Duration) []*finishing {
	for len(batch) < want {
		select {
		case f := <-w.finishes:
			batch = append(batch, f)
			continue
		default:
		}
		break
	}
	if len(batch) >= want || linger <= 0 {
		return batch
	}
	until := time.NewTimer(linger)
	defer until.Stop()
	for len(batch) < want {
		select {
		case f := <-w.finishes:
			batch = append(batch, f)
		case <-until.C:
			return batch
		}
	}
	return batch
}

// heartbeats renews every running execution's lease each interval, one
// round trip per queue, until ctx is done. The queues' heartbeats of an
// interval run side by side: each may wait on Redis for up to a TTL (see
// heartbeat), and one waiting on a slow Cluster node must not delay the
// sending of the others'. (The next interval's wait for it: the queues'
// executions renewed in this one stay trusted for a TTL after their send.)
func (w *Worker) heartbeats(ctx context.Context) error {
	ticker := time.NewTicker(w.cfg.Heartbeat)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		byQueue := map[*queue][]*running{}
		w.mu.Lock()
		for _, r := range w.running {
			byQueue[r.e.q] = append(byQueue[r.e.q], r)
		}
		w.mu.Unlock()
		var beats sync.WaitGroup
		for q, rs := range byQueue {
			beats.Go(func() { w.heartbeat(ctx, q, rs) })
		}
		beats.Wait()
	}
}

func (w *Worker) heartbeat(ctx context.Context, q *queue, rs []*running) {
	execs := make([]*Execution, len(rs))
	until := time.Now()
	for i, r := range rs {
		execs[i] = r.e
		if end := r.trustEnds(); end.After(until) {
			until = end
		}
	}
	// A reply after the last of these trust windows ends renews nothing
	// the worker still trusts (as lease.Keeper's renew); until then a slow
	// heartbeat is still worth its wait. A timeout of one interval failed
	// every heartbeat of a Redis slower than that (a loaded machine, a
	// slow fsync), and handlers whose leases Redis renewed all along were
	// stopped at the end of their TTL as lost.
	sent := time.Now()
	hctx, stop := context.WithDeadline(ctx, until)
	defer stop()
	statuses, err := q.heartbeat(hctx, execs)
	if err != nil {
		// The trust timers stop the handlers if this goes on for a TTL.
		w.log.WarnContext(ctx, "heartbeat failed", "queue", q.name, "executions", len(rs), "error", err)
		traceRenewFailed(rs, err)
		return
	}
	for i, s := range statuses {
		r := rs[i]
		switch s {
		case store.ExecutionLost:
			r.stop(lease.ErrLost)
		case store.ExecutionCancelRequested:
			r.cancelSeen.note(cancelPathFlag)
			r.e.traceCancel(cancelPathFlag)
			r.stop(cancel.ErrRequested)
			fallthrough
		case store.ExecutionHeld:
			w.metrics.renewed(ctx, q.name, r, w.cfg.LeaseTTL)
			r.e.traceRenewed()
			r.extend(sent, w.cfg.LeaseTTL)
		}
	}
}

// Wake tells one idle worker of queue (a NATS queue group) under prefix
// ("" for the default) that a job may be waiting. Losing the message costs
// only latency: idle workers also poll.
func Wake(nc *nats.Conn, prefix, queue string) error {
	return nc.Publish(keys.New(prefix).WakeSubject(queue), nil)
}
