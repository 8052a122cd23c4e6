package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/job"
)

// ErrLost means a lease is gone: released, reaped after it expired, or not
// renewed for a whole TTL. Its holder must stop: someone else may hold the
// slot now.
var ErrLost = errors.New("lease: lost")

// ErrFull means every slot of a lease key is taken. The error returned is a
// *FullError, which says when to try again.
var ErrFull = errors.New("lease: full")

// FullError is returned by Acquire when the key has no room.
type FullError struct {
	Key        string
	Limit      int
	RetryAfter time.Duration // until the earliest lease expires, unless renewed
}

func (e *FullError) Error() string {
	return fmt.Sprintf("lease: %q full (limit %d), earliest expiry in %v", e.Key, e.Limit, e.RetryAfter)
}

// Is makes errors.Is(err, ErrFull) true.
func (e *FullError) Is(target error) bool { return target == ErrFull }

// Lease is one holder's occupancy of one slot of a key.
type Lease struct {
	Key    string
	Holder string
	Token  fencing.Token // strictly greater than every token issued before on Key
	TTL    time.Duration

	// TrustedUntil is, on the holder's clock, when the holder must assume it
	// has lost the lease if no renew succeeds before: the time the last
	// successful acquire or renew was sent, plus TTL. Redis computed the
	// lease's expiry from its own clock when the request arrived, so
	// TrustedUntil never outlasts the expiry others see.
	TrustedUntil time.Time
}

// Config configures a Client. The zero value is ready to use.
type Config struct {
	// Clock reads the holder's own time for trust windows; default time.Now.
	// Redis never sees it: expiry and reaping use Redis TIME.
	Clock func() time.Time
}

// Client acquires, renews and releases leases in Redis. It is safe for
// concurrent use.
type Client struct {
	store *store.Store
	clock func() time.Time
}

// New returns a Client of st's leases, which may be on a Redis Cluster:
// every operation touches keys of one hash slot.
func New(st *store.Store, cfg Config) (*Client, error) {
	if st == nil {
		return nil, errors.New("lease: nil store")
	}
	clock := cfg.Clock
	if clock == nil {
		clock = time.Now
	}
	return &Client{store: st, clock: clock}, nil
}

// Acquire takes a slot of key for holder if fewer than limit leases are
// live, reaping expired ones first. Acquiring again with the same holder
// (a retry after a lost reply) keeps its one slot and moves its expiry; it
// is issued a new token. When key is full, Acquire returns a *FullError.
//
// Acquire shares the key's slots with every other path: the leases queued
// jobs take (package execution) and Semaphore.Wait's line. While tickets
// wait in that line, Acquire gets every other free slot at most.
func (c *Client) Acquire(ctx context.Context, key, holder string, limit int, ttl time.Duration) (Lease, error) {
	if err := validate(key, holder, ttl); err != nil {
		return Lease{}, err
	}
	if limit < 1 {
		return Lease{}, fmt.Errorf("lease: limit %d: must be at least 1", limit)
	}
	sent := c.clock()
	g, err := c.AcquireAll(ctx, ttl, acquireMark, []Ask{{Key: key, Limit: limit, Holders: []string{holder}}})
	if err != nil {
		return Lease{}, err
	}
	if g[0].Tokens[0] == 0 {
		return Lease{}, &FullError{Key: key, Limit: limit, RetryAfter: g[0].RetryAfter}
	}
	return Lease{
		Key:          key,
		Holder:       holder,
		Token:        g[0].Tokens[0],
		TTL:          ttl,
		TrustedUntil: sent.Add(ttl),
	}, nil
}

// acquireMark is how long a refused Acquire counts as waiting, for the
// alternation with Wait's line: a caller that wants the slot comes back
// sooner than that.
const acquireMark = time.Second

// Ask asks for slots of one key for several holders, in order.
type Ask struct {
	Key     string
	Limit   int // -1: the key has no limit, every holder gets a slot
	Holders []string
	// Budget is the key's budget; a holder gets a slot only if it has room
	// too, and what it reserves must be settled (Settle).
	Budget job.Budget
	// Tokens holds each holder's estimated tokens, when Budget has a TPM.
	Tokens []int64
}

// GrantsAll says the ask is granted to every holder, whatever the key
// holds: the key has neither a limit nor a budget.
func (a Ask) GrantsAll() bool { return a.Limit < 0 && a.Budget.IsZero() }

// Grant is what one Ask got.
type Grant struct {
	// Tokens holds each holder's fencing token, 0 for a holder refused
	// for want of room.
	Tokens []fencing.Token
	// RetryAfter is, when a holder was refused, the time until the key's
	// budget has room again if it refused (ByBudget: the throttle ends, the
	// window frees room), else until the key's earliest lease expires.
	RetryAfter time.Duration
	// Waiters says tickets wait in the key's line (Semaphore.Wait): a
	// release should wake them.
	Waiters bool
	// ByBudget says the key's budget refused a holder that its limit had
	// room for: the key was throttled, its rpm or tpm full, or its
	// effective limit reached.
	ByBudget bool
}

// AcquireAll runs every ask in one round trip (a pipeline, split per node
// on a Redis Cluster: each ask is one script on its key's slot). Each ask
// is atomic on its own; a holder that needs slots of several keys, all or
// none, releases what it got when one is refused. mark is how long a
// refusal counts this caller as waiting (see Acquire): longer than the
// caller takes to come back.
func (c *Client) AcquireAll(ctx context.Context, ttl, mark time.Duration, asks []Ask) ([]Grant, error) {
	grants, errs := c.AcquireEach(ctx, ttl, mark, asks)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return grants, nil
}

// AcquireEach is AcquireAll that answers each ask on its own, with the
// error that kept it from Redis: one key's failure need not fail the
// others' asks (on a Redis Cluster each key's lease set is on a shard of
// its own, which may be down alone). An ask that failed has the zero
// Grant: its holders got no slot.
func (c *Client) AcquireEach(ctx context.Context, ttl, mark time.Duration, asks []Ask) ([]Grant, []error) {
	stored := make([]store.LeaseAsk, len(asks))
	for i, a := range asks {
		stored[i] = a.stored()
	}
	sg, errs := c.store.AcquireLeases(ctx, ttl, mark, stored)
	grants := make([]Grant, len(sg))
	for i, g := range sg {
		grants[i] = Grant(g)
	}
	return grants, errs
}

func (a Ask) stored() store.LeaseAsk {
	return store.LeaseAsk{Key: a.Key, Limit: a.Limit, Holders: a.Holders, Budget: storedBudget(a.Budget), Tokens: a.Tokens}
}

func storedBudget(b job.Budget) store.LeaseBudget {
	return store.LeaseBudget{RPM: b.RPM, TPM: b.TPM, Adaptive: b.Adaptive}
}

// Renew moves l's expiry to a TTL from now and returns l with its trust
// window extended. If the lease is gone it returns ErrLost and never adds
// it back.
func (c *Client) Renew(ctx context.Context, l Lease) (Lease, error) {
	if err := validate(l.Key, l.Holder, l.TTL); err != nil {
		return l, err
	}
	sent := c.clock()
	gone, err := c.RenewAll(ctx, l.TTL, map[string][]string{l.Key: {l.Holder}})
	if err != nil {
		return l, err
	}
	if len(gone) > 0 {
		return l, ErrLost
	}
	l.TrustedUntil = sent.Add(l.TTL)
	return l, nil
}

// RenewAll renews the leases held (key → holders) by ttl from now, in one
// round trip, and returns the holders whose leases were gone: those must
// stop. It never adds a lease back.
func (c *Client) RenewAll(ctx context.Context, ttl time.Duration, held map[string][]string) (gone map[string][]string, err error) {
	return c.store.RenewLeases(ctx, ttl, held)
}

// Release frees l's slot. It is idempotent, and a release that comes after
// the lease was reaped removes nothing but l's own member: it can never free
// a slot that someone else holds now.
func (c *Client) Release(ctx context.Context, l Lease) error {
	return c.store.ReleaseLeases(ctx, l.Key, l.Holder)
}

// InUse returns the number of live leases on key.
func (c *Client) InUse(ctx context.Context, key string) (int, error) {
	if err := validateKey(key); err != nil {
		return 0, err
	}
	n, _, err := c.store.LeaseCount(ctx, key)
	return n, err
}

// Room reports whether key has a free slot under limit now, and when it
// has none, the time until its earliest lease expires. It takes nothing:
// a slot free now may be taken before the caller asks for it.
func (c *Client) Room(ctx context.Context, key string, limit int) (ok bool, retryAfter time.Duration, err error) {
	if err := validateKey(key); err != nil {
		return false, 0, err
	}
	return c.store.LeaseRoom(ctx, key, limit)
}

func validate(key, holder string, ttl time.Duration) error {
	if err := validateKey(key); err != nil {
		return err
	}
	if holder == "" || len(holder) > 256 {
		return fmt.Errorf("lease: holder must be 1 to 256 bytes, got %d", len(holder))
	}
	if ttl < time.Millisecond {
		return fmt.Errorf("lease: ttl %v: must be at least 1ms", ttl)
	}
	return nil
}

// validateKey refuses braces, which would change the key's hash tag.
func validateKey(key string) error {
	if key == "" || len(key) > 256 {
		return fmt.Errorf("lease: key must be 1 to 256 bytes, got %d", len(key))
	}
	if strings.ContainsAny(key, "{}") {
		return fmt.Errorf("lease: key %q: braces are not allowed", key)
	}
	return nil
}
