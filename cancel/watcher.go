package cancel

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/internal/store"
	"github.com/nats-io/nats.go"
)

const defaultPoll = 2 * time.Second

// flushTimeout bounds the wait for NATS to confirm the subscription before a
// sweep of the flags. Past it the sweep runs anyway: the poll covers the rest.
const flushTimeout = time.Second

// WatcherConfig configures a Watcher. The zero value is ready to use.
type WatcherConfig struct {
	// Subject is the NATS subject requests arrive on; default
	// "leasehold.cancel". It must be the subject requests are published on.
	Subject string
	// Poll is how often the flags of all watched ids are read from Redis, in
	// one pipelined round trip; default 2s. It bounds cancellation latency
	// when a NATS message is lost or NATS is down.
	Poll time.Duration
	// Logger receives warnings about failed polls; default slog.Default().
	Logger *slog.Logger
	// Fired, if set, is called just before the contexts watching id are
	// cancelled, with the path that told: "nats" or "flag". Workers measure
	// cancel latency by path with it. It must not block.
	Fired func(id, via string)
	// Requested, if set, is asked about the ids whose flag is found set,
	// and only those it answers true for are cancelled. The flag is a
	// cache of the request, whose truth is elsewhere (a job's record):
	// a flag written late, after the job it stopped was run again, must
	// not stop the new run. An error leaves the ids to the next poll.
	Requested func(ctx context.Context, ids []string) ([]bool, error)
}

// Watcher turns cancel requests into cancelled contexts. One Watcher serves a
// whole process: one NATS subscription and one poll loop, however many ids
// are watched. It is safe for concurrent use.
type Watcher struct {
	store   *store.Store
	nc      *nats.Conn
	subject string
	poll    time.Duration
	log     *slog.Logger
	fired   func(id, via string)
	asked   func(ctx context.Context, ids []string) ([]bool, error) // WatcherConfig.Requested

	// wake tells Run that fresh or told has ids to check; one pending
	// signal is enough.
	wake chan struct{}

	// live says the subscription is known to be on the server (Run set it
	// after subscribing and after each reconnect): while it is and the
	// connection is up, every request published reaches tell.
	live atomic.Bool

	mu sync.Mutex
	// watches are by id; no empty lists. Most ids have one watch: a list
	// costs less than a set. A watch whose parent ended stays until its
	// stop or the next poll (see watched).
	watches map[string][]*watch
	fresh   map[string]struct{} // watched ids whose flag Run has not read yet
	// told are watched ids a NATS message named since Run last read their
	// flags. A message only hastens that read: anyone who can publish on
	// the subject could send one, and only the flag in Redis says a cancel
	// was requested.
	told map[string]struct{}
	// early are the ids messages named while nobody watched them (see
	// Watch), in two generations of up to earlyMax ids each: the current
	// one since early.since, and the one before it.
	early struct {
		now, before map[string]struct{}
		since       time.Time
	}
}

// earlyFor is how long a message that named an id nobody watched is kept
// for a Watch of that id (at least earlyFor, at most twice that): longer
// than a worker takes from its claim to watching the claimed job, a WAIT
// for replicas included. earlyMax bounds each generation, so a flood of
// messages costs a bounded memory; an id past it is found by the poll.
const (
	earlyFor = 10 * time.Second
	earlyMax = 4096
)

type watch struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// NewWatcher returns a Watcher that reads flags from st, which must have
// the prefix requests are written under, and listens on nc. nc may be nil:
// then the Watcher works by polling alone.
func NewWatcher(st *store.Store, nc *nats.Conn, cfg WatcherConfig) (*Watcher, error) {
	if st == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalid)
	}
	subject := cmp.Or(cfg.Subject, defaultSubject)
	if err := validSubject(subject); err != nil {
		return nil, err
	}
	if cfg.Poll < 0 {
		return nil, fmt.Errorf("%w: poll %v: must not be negative", ErrInvalid, cfg.Poll)
	}
	return &Watcher{
		store:   st,
		nc:      nc,
		subject: subject,
		poll:    cmp.Or(cfg.Poll, defaultPoll),
		log:     cmp.Or(cfg.Logger, slog.Default()),
		fired:   cfg.Fired,
		asked:   cfg.Requested,
		wake:    make(chan struct{}, 1),
		watches: make(map[string][]*watch),
		fresh:   make(map[string]struct{}),
		told:    make(map[string]struct{}),
	}, nil
}

// Run subscribes to the subject and polls the flags of watched ids until ctx
// is done; then it unsubscribes and returns nil. Call it once per Watcher.
// It fails only when it cannot subscribe (nc closed).
func (w *Watcher) Run(ctx context.Context) error {
	// nil when there is no NATS: a nil channel never fires.
	var connected chan nats.Status
	if w.nc != nil {
		// Registered before subscribing, so no reconnect can slip between.
		connected = w.nc.StatusChanged(nats.CONNECTED)
		defer w.nc.RemoveStatusListener(connected)
		sub, err := w.nc.Subscribe(w.subject, func(m *nats.Msg) { w.tell(string(m.Data)) })
		if err != nil {
			return fmt.Errorf("cancel: subscribe %q: %w", w.subject, err)
		}
		defer func() {
			if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
				w.log.WarnContext(ctx, "cancel: unsubscribe", attrErr, err)
			}
		}()
		w.live.Store(w.settle(ctx))
	}
	// Ids watched before Run started may have been requested already.
	w.check(ctx, w.watched(), "flag")

	tick := time.NewTicker(w.poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			w.check(ctx, w.watched(), "flag")
		case <-w.wake:
			// A request made before its id was watched sent its message to
			// nobody; read the flags of new ids now rather than a Poll later.
			fresh, told := w.take()
			w.check(ctx, fresh, "flag")
			w.check(ctx, told, "nats")
		case <-connected:
			// Messages published while the connection was down are lost;
			// their flags are not. Until the server has the subscription
			// again, Watch reads each new id's flag itself.
			w.live.Store(false)
			w.live.Store(w.settle(ctx))
			w.check(ctx, w.watched(), "flag")
		}
	}
}

// settle waits until the server has the subscription (nats.go resends it on
// reconnect, just after reporting CONNECTED), so that every request is either
// in the flags the next check reads or delivered as a message: none falls in
// between. It reports whether the server confirmed it; when not, the next
// poll covers the gap.
func (w *Watcher) settle(ctx context.Context) bool {
	fctx, stop := context.WithTimeout(ctx, flushTimeout)
	defer stop()
	return w.nc.FlushWithContext(fctx) == nil
}

// Watch returns a context that is cancelled with cause ErrRequested once
// the flag of id is found set (and WatcherConfig.Requested, if set, says
// the request stands): read at every poll, and at once when a NATS
// message names id (the message alone cancels nothing). The returned func (call it stop) unregisters id and
// cancels the context with cause context.Canceled; calling it again does
// nothing. As with context.WithCancel, call stop when the work is done. Watch
// never touches Redis: an id requested before Watch is caught by Run
// straight after, or at the next poll at the latest. Run must be running for
// anything to be cancelled. A watch whose parent ends is told of no request
// from then on, and Run stops polling its id at the next poll.
//
// Run reads a new id's flag at once only when a request before the Watch
// may be there to find: a message named id within earlyFor, or the
// subscription was not live (no NATS, not subscribed yet, reconnecting).
// A request while it is live reaches tell, before the Watch or after it,
// so a worker that watches every job it claims reads no flag for the jobs
// nobody cancels (one Redis command less per execution). A message lost
// all the same (NATS dropped it) leaves the flag to the poll, as for any
// watched id.
func (w *Watcher) Watch(parent context.Context, id string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	wt := &watch{ctx: ctx, cancel: cancel}

	// Asked before w.mu is taken: the connection has a lock of its own.
	deaf := !w.live.Load() || !w.nc.IsConnected()
	w.mu.Lock()
	w.watches[id] = append(w.watches[id], wt)
	_, early := w.early.now[id]
	if _, before := w.early.before[id]; before || early || deaf {
		w.fresh[id] = struct{}{}
	}
	fresh := len(w.fresh) > 0
	w.mu.Unlock()
	if fresh {
		w.signal()
	}
	return ctx, func() {
		w.unregister(id, wt)
		cancel(nil)
	}
}

// signal wakes Run without blocking.
func (w *Watcher) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// tell notes that a NATS message named id, so Run reads its flag now. An
// id nobody watches is kept for a Watch of it a little later (see Watch):
// a flood of messages costs at most one read per watched id and wake, and
// a bounded memory.
func (w *Watcher) tell(id string) {
	w.mu.Lock()
	_, ok := w.watches[id]
	if ok {
		w.told[id] = struct{}{}
	} else {
		w.keepEarly(id, time.Now())
	}
	w.mu.Unlock()
	if ok {
		w.signal()
	}
}

// keepEarly adds id to the current generation of early ids, which starts
// anew, the last one kept as the one before, every earlyFor. w.mu must be
// held.
func (w *Watcher) keepEarly(id string, now time.Time) {
	e := &w.early
	if e.now == nil || now.Sub(e.since) >= earlyFor {
		e.before, e.now, e.since = e.now, make(map[string]struct{}), now
	}
	if len(e.now) < earlyMax {
		e.now[id] = struct{}{}
	}
}

func (w *Watcher) unregister(id string, wt *watch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	list := slices.DeleteFunc(w.watches[id], func(x *watch) bool { return x == wt })
	w.keep(id, list)
}

// keep stores id's list of watches, or forgets id when the list is empty.
// w.mu must be held.
func (w *Watcher) keep(id string, list []*watch) {
	if len(list) > 0 {
		w.watches[id] = list
		return
	}
	delete(w.watches, id)
	delete(w.fresh, id)
	delete(w.told, id)
}

// fire cancels every watch of id with ErrRequested and unregisters them.
func (w *Watcher) fire(id, via string) {
	w.mu.Lock()
	list := live(w.watches[id])
	delete(w.watches, id)
	delete(w.fresh, id)
	delete(w.told, id)
	w.mu.Unlock()
	if len(list) > 0 && w.fired != nil {
		w.fired(id, via)
	}
	for _, wt := range list {
		wt.cancel(ErrRequested)
	}
	if len(list) > 0 {
		w.log.Debug("cancel: watched contexts cancelled", attrID, id, attrVia, via, attrCount, len(list))
	}
}

// watched returns every watched id, after forgetting the watches whose
// parent ended: their ids need no polling, and their stops may never come.
func (w *Watcher) watched() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	clear(w.fresh) // about to read them all
	clear(w.told)
	for id, list := range w.watches {
		w.keep(id, live(list))
	}
	return slices.Collect(maps.Keys(w.watches))
}

// live drops from list, in place, the watches whose parent ended: as
// though each had been unregistered when it ended.
func live(list []*watch) []*watch {
	return slices.DeleteFunc(list, func(wt *watch) bool { return wt.ctx.Err() != nil })
}

// take returns the fresh ids and the told ones that are not fresh too, and
// forgets both.
func (w *Watcher) take() (fresh, told []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fresh = slices.Collect(maps.Keys(w.fresh))
	for id := range w.told {
		if _, ok := w.fresh[id]; !ok {
			told = append(told, id)
		}
	}
	clear(w.fresh)
	clear(w.told)
	return fresh, told
}

// check reads the flags of ids in one pipelined round trip and fires those
// that are set, saying via which path told. Reads that fail are logged and
// retried at the next poll.
func (w *Watcher) check(ctx context.Context, ids []string, via string) {
	if len(ids) == 0 {
		return
	}
	flagged, err := w.store.CancelFlagged(ctx, ids...)
	if err != nil && ctx.Err() == nil {
		w.log.WarnContext(ctx, "cancel: reading flags failed; retrying at the next poll", attrCount, len(ids), attrErr, err)
	}
	// On a cluster some nodes may have answered when others did not.
	var set []string
	for i, yes := range flagged {
		if yes {
			set = append(set, ids[i])
		}
	}
	if len(set) > 0 && w.asked != nil {
		requested, err := w.asked(ctx, set)
		if err == nil && len(requested) != len(set) {
			err = fmt.Errorf("%d answers for %d ids", len(requested), len(set))
		}
		if err != nil {
			if ctx.Err() == nil {
				w.log.WarnContext(ctx, "cancel: asking whether flagged ids are requested failed; retrying at the next poll", attrCount, len(set), attrErr, err)
			}
			return
		}
		for i := range set {
			if !requested[i] {
				set[i] = ""
			}
		}
	}
	for _, id := range set {
		if id != "" {
			w.fire(id, via)
		}
	}
}
