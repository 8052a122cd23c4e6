package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/testsignal"
	"github.com/leasehold/leasehold/job"
)

// ErrTimedOut means Wait gave up after its MaxWait without a slot.
var ErrTimedOut = errors.New("lease: wait timed out")

// ErrTicketLost means a waiter's ticket expired before it was granted: the
// waiter could not heartbeat it for a ticket TTL (paused, or cut off from
// Redis) and has lost its place in line.
var ErrTicketLost = errors.New("lease: ticket lost")

// MinPoll is the shortest poll interval Wait uses, whatever it is asked.
const MinPoll = 50 * time.Millisecond

// TicketState is where a waiter's ticket is in its life.
type TicketState int

// A ticket is PENDING from the moment it joins the line until it ends in one
// of the other states.
const (
	TicketPending   TicketState = iota
	TicketGranted               // the waiter holds a slot
	TicketCancelled             // the waiter's context ended first
	TicketTimedOut              // MaxWait passed first
	TicketExpired               // the ticket expired unheartbeated; see ErrTicketLost
)

func (s TicketState) String() string {
	switch s {
	case TicketPending:
		return "PENDING"
	case TicketGranted:
		return "GRANTED"
	case TicketCancelled:
		return "CANCELLED"
	case TicketTimedOut:
		return "TIMED_OUT"
	case TicketExpired:
		return "EXPIRED"
	}
	return fmt.Sprintf("TicketState(%d)", int(s))
}

// WaitConfig configures one Wait. The zero value waits until ctx is done,
// polling only.
type WaitConfig struct {
	// MaxWait is how long to wait for a slot before giving up with
	// ErrTimedOut; default 0, no limit but ctx.
	MaxWait time.Duration
	// NATS, when set, carries wake-ups: a released slot wakes the line at
	// once. Default nil: waiters only poll.
	NATS *nats.Conn
	// Poll is how often a waiter looks at the line without a wake-up;
	// default 250ms, never less than MinPoll. Each poll waits a random
	// 0-20 % more, so waiters do not poll in step.
	Poll time.Duration
	// TicketTTL is how long a ticket stays in line without a heartbeat:
	// the time after which a dead waiter stops holding up those behind it.
	// Default 3s, and at least 3 polls: a waiter heartbeats at every poll.
	TicketTTL time.Duration
	// Budget is the key's budget: the head of the line is granted a slot
	// only when the budget has room too, and reserves Tokens of its TPM.
	// A permit of a key with a budget is ended with Permit.Settle. Default
	// none: the line counts concurrency only.
	Budget job.Budget
	// Tokens is the holder's estimated tokens, for the TPM of Budget and of
	// the keys of Also.
	Tokens int64
	// Also are other keys the holder needs a slot of with the semaphore's,
	// all or none, each with its limit and budget (their Holders and
	// Tokens are the holder's). The line is the semaphore key's: at its
	// head the holder takes these first, then the semaphore's slot, and
	// gives them back if that is refused. A head refused one of them goes
	// to the back of the line, so that it holds up nobody while keys that
	// others do not need are full. Default none.
	Also []Ask
	// Done, when set, is called exactly once with the ticket's terminal
	// state, before Wait returns; not at all when Wait refuses its
	// arguments, as no ticket was taken.
	Done func(TicketState)

	// waiting fires each time the waiter, in line and subscribed to
	// wake-ups, is about to sleep until one or its next poll; set by
	// tests only (export_test.go).
	waiting *testsignal.Signal
}

// Permit is a slot taken by Wait, with the slots of its Also keys. Their
// leases are renewed in the background until Release or Settle, one of
// which the holder must call on every path.
type Permit struct {
	w       *waiter
	ctx     context.Context
	keepers []*Keeper // the semaphore key's first, then Also's

	stopKeeping context.CancelFunc
	kept        chan error

	release sync.Once
	err     error
}

// Context is the Wait context, cancelled with cause ErrLost if the permit's
// lease is lost (its renewals failed for a whole TTL): the holder must stop.
func (p *Permit) Context() context.Context { return p.ctx }

// Lease returns the permit's lease of the semaphore key as of its last
// renewal.
func (p *Permit) Lease() Lease { return p.keepers[0].Lease() }

// Token is the permit's fencing token.
func (p *Permit) Token() fencing.Token { return p.Lease().Token }

// Release stops renewing, frees the slots and wakes the line; what they
// reserved of budgets stands (OutcomeOther). It is idempotent, with
// Settle: later calls return the first call's result.
func (p *Permit) Release() error { return p.Settle(OutcomeOther, -1, 0) }

// Settle is Release that settles what the slots reserved of their keys'
// budgets (see Settlement): how the holder's use ended, the tokens it
// spent (-1: not known, the estimate stands) and, for a pushback, how long
// the upstream asked to be left alone. A pushback concerns the semaphore
// key alone, the upstream's: the keys of Also settle it as OutcomeOther.
func (p *Permit) Settle(outcome Outcome, tokens int64, retryAfter time.Duration) error {
	p.release.Do(func() {
		p.stopKeeping()
		for range p.keepers {
			<-p.kept
		}
		rctx, stop := context.WithTimeout(context.WithoutCancel(p.ctx), 5*time.Second)
		defer stop()
		p.err = p.w.end(rctx, true, outcome, tokens, retryAfter)
		p.w.wake()
	})
	return p.err
}

// Wait takes a slot for holder (and of the keys of cfg.Also), waiting in line behind those who asked
// first, across every process that shares the Redis: a later waiter is never
// granted a slot while an earlier one still waits, unless the earlier one's
// ticket expired (its process died). holder must be unique among the
// semaphore's holders.
//
// Wait returns a *Permit, ErrTimedOut after cfg.MaxWait, ErrTicketLost, or
// the cause of ctx when ctx ends first. On every error path the ticket has
// left the line, and a slot granted in a race with the error has been
// released. Acquire and Do do not queue: they take a free slot even while
// others wait.
func (s *Semaphore) Wait(ctx context.Context, holder string, cfg WaitConfig) (*Permit, error) {
	if err := validate(s.key, holder, s.ttl); err != nil {
		return nil, err
	}
	if s.limit < 1 && s.limit != -1 {
		return nil, fmt.Errorf("lease: limit %d: must be at least 1, or -1 for none", s.limit)
	}
	if cfg.MaxWait < 0 {
		return nil, fmt.Errorf("lease: max wait %v: must not be negative", cfg.MaxWait)
	}
	poll := max(cmp.Or(cfg.Poll, 250*time.Millisecond), MinPoll)
	w := &waiter{
		s:         s,
		ticket:    uuid.NewString(),
		holder:    holder,
		nc:        cfg.NATS,
		ticketTTL: max(cmp.Or(cfg.TicketTTL, 3*time.Second), 3*poll),
		waiting:   cfg.waiting,
		budget:    cfg.Budget,
		tokens:    cfg.Tokens,
	}
	for _, a := range cfg.Also {
		if err := validate(a.Key, holder, s.ttl); err != nil {
			return nil, err
		}
		a.Holders, a.Tokens = []string{holder}, []int64{cfg.Tokens}
		w.also = append(w.also, a)
	}
	w.wakeSubject = s.c.store.LineWakeSubject(s.key)

	state, p, err := w.wait(ctx, poll, cfg.MaxWait)
	if cfg.Done != nil {
		cfg.Done(state)
	}
	return p, err
}

// waiter is one Wait's ticket.
type waiter struct {
	s           *Semaphore
	ticket      string
	holder      string
	ticketTTL   time.Duration
	nc          *nats.Conn
	wakeSubject string
	waiting     *testsignal.Signal
	budget      job.Budget
	tokens      int64
	also        []Ask
	// alsoHeld are the leases of also while the waiter holds them: from
	// the head of the line until it is granted its slot or gives them back.
	alsoHeld []Lease
}

func (w *waiter) wait(ctx context.Context, poll, maxWait time.Duration) (TicketState, *Permit, error) {
	var deadline <-chan time.Time
	if maxWait > 0 {
		timer := time.NewTimer(maxWait)
		defer timer.Stop()
		deadline = timer.C
	}
	woken := make(chan struct{}, 1)
	joined, back := false, false
	for {
		sent := w.s.c.clock()
		g, err := w.poll(ctx, !joined, len(w.also) == 0 || w.alsoHeld != nil, back)
		if !joined && err == nil && w.s.c.clock().Sub(sent) >= w.ticketTTL {
			// The join was answered a ticket TTL or more after it was
			// sent: the ticket may have expired before the waiter learnt
			// it was in line, and a join resent meanwhile (go-redis
			// resends a script whose reply timed out) joins it again at
			// the back, or is even granted. Either way the waiter did
			// not hold its place: it is lost, as a paused waiter's is.
			return w.leave(ctx, TicketExpired, fmt.Errorf("lease: wait %q: %w", w.s.key, ErrTicketLost))
		}
		if back && err == nil {
			w.wake() // the ticket behind it heads the line now
		}
		back = false
		switch {
		case err == nil && g.state == TicketGranted:
			if g.more {
				w.wake()
			}
			return TicketGranted, w.permit(ctx, sent, g), nil
		case err == nil && g.state != TicketPending:
			// Only this waiter ends its ticket, so another end means the
			// ticket expired, or a leave raced ahead of this poll.
			return w.leave(ctx, TicketExpired, fmt.Errorf("lease: wait %q: %w", w.s.key, ErrTicketLost))
		case err != nil && ctx.Err() == nil && !joined:
			// Nothing is known to be in line; leave anyway, in case the
			// join ran and only its reply was lost.
			return w.leave(ctx, TicketCancelled, fmt.Errorf("lease: wait %q: %w", w.s.key, err))
		}
		// A failed heartbeat is retried at the next poll; the ticket
		// survives a few of them.
		if !joined {
			joined = true
			if unsubscribe := w.subscribe(woken); unsubscribe != nil {
				defer unsubscribe()
				if !g.ready {
					continue // a release may have come before the subscription
				}
			}
		}
		switch {
		case w.alsoHeld != nil:
			// The key refused the slot after all: give the others back
			// while waiting, as a waiter holds nothing.
			if err := w.end(ctx, false, OutcomeUnused, -1, 0); err != nil {
				return w.leave(ctx, TicketCancelled, fmt.Errorf("lease: wait %q: %w", w.s.key, err))
			}
		case g.ready:
			took, err := w.takeAlso(ctx)
			if took {
				continue // now the slot of the line's key
			}
			back = err == nil // refused: let the next in line go first
		}
		tick := time.NewTimer(jitter(poll)) // ticketTTL is at least 3 polls
		w.waiting.Fire()
		select {
		case <-ctx.Done():
			tick.Stop()
			return w.leave(ctx, TicketCancelled, fmt.Errorf("lease: wait %q: %w", w.s.key, context.Cause(ctx)))
		case <-deadline:
			tick.Stop()
			return w.leave(ctx, TicketTimedOut, fmt.Errorf("lease: wait %q for %v: %w", w.s.key, maxWait, ErrTimedOut))
		case <-woken:
			tick.Stop()
		case <-tick.C:
		}
	}
}

func jitter(d time.Duration) time.Duration {
	return d + rand.N(d/5+1)
}

type pollResult struct {
	state TicketState
	token fencing.Token
	more  bool // others wait and slots are free: wake them
	// ready says the ticket heads the line and the key has room, but it
	// was not granted: it did not ask to be (the keys of Also first).
	ready bool
}

// poll joins the line (the first time), heartbeats, goes to the back of
// the line when back, and takes a slot if grant, this ticket heads the
// line and the key has room.
func (w *waiter) poll(ctx context.Context, join, grant, back bool) (pollResult, error) {
	st, err := w.s.c.store.PollTicket(ctx, store.TicketPoll{Key: w.s.key, Ticket: w.ticket, Holder: w.holder,
		TicketTTL: w.ticketTTL, LeaseTTL: w.s.ttl, Limit: w.s.limit, Budget: storedBudget(w.budget), Tokens: w.tokens,
		Join: join, Grant: grant, Back: back})
	switch {
	case err != nil:
		return pollResult{}, err
	case st.Pending:
		return pollResult{state: TicketPending, ready: st.Ready}, nil
	case st.Token != 0:
		return pollResult{state: TicketGranted, token: st.Token, more: st.More}, nil
	}
	return pollResult{state: TicketExpired}, nil
}

// leave ends the ticket in state and cleans up after it: out of the line,
// and a slot granted to a poll whose reply never arrived released. It runs
// on every path out of a Wait that did not hand a permit over, and is
// idempotent.
func (w *waiter) leave(ctx context.Context, state TicketState, cause error) (TicketState, *Permit, error) {
	ctx, stop := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer stop()
	// An expired ticket ends CANCELLED too: any end stops a late join.
	was, err := w.s.c.store.LeaveLine(ctx, store.TicketLeave{Key: w.s.key, Ticket: w.ticket,
		TimedOut: state == TicketTimedOut, TicketTTL: w.ticketTTL})
	if err != nil {
		// The ticket expires within a ticket TTL, and a slot granted to it
		// within a lease TTL: nothing stays held for good.
		return state, nil, errors.Join(cause, err)
	}
	if was == "GRANTED" || w.alsoHeld != nil {
		err = w.end(ctx, was == "GRANTED", OutcomeUnused, -1, 0)
	}
	if was == "GRANTED" || was == "PENDING" {
		w.wake() // a slot is free, or it may have headed the line while one was
	}
	return state, nil, errors.Join(cause, err)
}

// takeAlso takes the holder's slots of the keys of Also, all or none, and
// says whether it got them; what it got of a refused set it gives back.
func (w *waiter) takeAlso(ctx context.Context) (bool, error) {
	sent := w.s.c.clock()
	grants, errs := w.s.c.AcquireEach(ctx, w.s.ttl, acquireMark, w.also)
	held := make([]Lease, 0, len(w.also))
	for i, g := range grants {
		if errs[i] == nil && g.Tokens[0] != 0 {
			held = append(held, Lease{Key: w.also[i].Key, Holder: w.holder, Token: g.Tokens[0], TTL: w.s.ttl, TrustedUntil: sent.Add(w.s.ttl)})
		}
	}
	w.alsoHeld = held
	if len(held) == len(w.also) {
		return true, nil
	}
	err := errors.Join(errs...)
	return false, errors.Join(err, w.end(ctx, false, OutcomeUnused, -1, 0))
}

// end releases the holder's slots, the line key's when line, and those of
// Also it holds, settling what each reserved of its budget as outcome with
// tokens spent (see Settlement).
func (w *waiter) end(ctx context.Context, line bool, outcome Outcome, tokens int64, retryAfter time.Duration) error {
	var errs []error
	settle := func(key string, limit int, b job.Budget, outcome Outcome) {
		if b.IsZero() {
			errs = append(errs, w.s.c.Release(ctx, Lease{Key: key, Holder: w.holder}))
			return
		}
		s := Settlement{Holder: w.holder, Outcome: outcome, Tokens: tokens, Estimate: w.tokens, RetryAfter: retryAfter}
		_, err := w.s.c.Settle(ctx, key, limit, b, []Settlement{s})
		errs = append(errs, err)
	}
	if line {
		settle(w.s.key, w.s.limit, w.budget, outcome)
	}
	if outcome == OutcomePushback {
		outcome = OutcomeOther
	}
	for _, l := range w.alsoHeld {
		for _, a := range w.also {
			if a.Key == l.Key {
				settle(a.Key, a.Limit, a.Budget, outcome)
			}
		}
	}
	w.alsoHeld = nil
	return errors.Join(errs...)
}

// permit hands the granted slots over with keepers renewing their leases.
func (w *waiter) permit(ctx context.Context, sent time.Time, g pollResult) *Permit {
	leases := append([]Lease{{Key: w.s.key, Holder: w.holder, Token: g.token, TTL: w.s.ttl, TrustedUntil: sent.Add(w.s.ttl)}}, w.alsoHeld...)
	pctx, lost := context.WithCancelCause(ctx)
	keepCtx, stopKeeping := context.WithCancel(pctx)
	p := &Permit{
		w:           w,
		ctx:         pctx,
		stopKeeping: func() { stopKeeping(); lost(nil) },
		kept:        make(chan error, len(leases)),
	}
	for _, l := range leases {
		k := w.s.c.Keeper(l, 0, lost)
		p.keepers = append(p.keepers, k)
		go func() { p.kept <- k.Run(keepCtx) }()
	}
	return p
}

// subscribe listens for wake-ups on the key's subject; it returns nil when
// there is no NATS connection to listen on.
func (w *waiter) subscribe(woken chan struct{}) func() {
	if w.nc == nil {
		return nil
	}
	sub, err := w.nc.Subscribe(w.wakeSubject, func(*nats.Msg) {
		select {
		case woken <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil // polling alone still gets there
	}
	return func() {
		// The connection may be closed or reconnecting; the server drops
		// the subscription with the connection either way.
		_ = sub.Unsubscribe()
	}
}

// wake tells the line a slot may be free. Best effort: pollers find it
// anyway. While NATS is reconnecting, nats.go would buffer the message and
// send it late, when it means nothing, so it is not sent at all.
func (w *waiter) wake() {
	if w.nc == nil || w.nc.Status() != nats.CONNECTED {
		return
	}
	_ = w.nc.Publish(w.wakeSubject, nil)
}
