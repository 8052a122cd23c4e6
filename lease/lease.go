package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/keys"
	"github.com/leasehold/leasehold/internal/scripts"
)

var (
	acquireScript = scripts.Load("lease_acquire.lua")
	renewScript   = scripts.Load("lease_renew.lua")
	countScript   = scripts.Load("lease_count.lua")
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
	// Prefix starts every key; default keys.DefaultPrefix.
	Prefix string
	// Clock reads the holder's own time for trust windows; default time.Now.
	// Redis never sees it: expiry and reaping use Redis TIME.
	Clock func() time.Time
}

// Client acquires, renews and releases leases in Redis. It is safe for
// concurrent use.
type Client struct {
	rdb   redis.UniversalClient
	keys  keys.Space
	clock func() time.Time
}

// New returns a Client on rdb, which may be a Redis Cluster client: every
// script touches keys of one hash slot.
func New(rdb redis.UniversalClient, cfg Config) (*Client, error) {
	if rdb == nil {
		return nil, errors.New("lease: nil redis client")
	}
	clock := cfg.Clock
	if clock == nil {
		clock = time.Now
	}
	return &Client{rdb: rdb, keys: keys.New(cfg.Prefix), clock: clock}, nil
}

// Acquire takes a slot of key for holder if fewer than limit leases are
// live, reaping expired ones first. Acquiring again with the same holder
// (a retry after a lost reply) keeps its one slot and moves its expiry; it
// is issued a new token. When key is full, Acquire returns a *FullError.
func (c *Client) Acquire(ctx context.Context, key, holder string, limit int, ttl time.Duration) (Lease, error) {
	if err := validate(key, holder, ttl); err != nil {
		return Lease{}, err
	}
	if limit < 1 {
		return Lease{}, fmt.Errorf("lease: limit %d: must be at least 1", limit)
	}
	sent := c.clock()
	res, err := acquireScript.Run(ctx, c.rdb,
		[]string{c.keys.LeaseSet(key), c.keys.LeaseFence(key)},
		holder, ttl.Milliseconds(), limit).Int64Slice()
	if err != nil {
		return Lease{}, fmt.Errorf("lease: acquire %q: %w", key, err)
	}
	if res[0] == 0 {
		return Lease{}, &FullError{Key: key, Limit: limit, RetryAfter: time.Duration(res[1]) * time.Millisecond}
	}
	return Lease{
		Key:          key,
		Holder:       holder,
		Token:        fencing.Token(res[1]),
		TTL:          ttl,
		TrustedUntil: sent.Add(ttl),
	}, nil
}

// Renew moves l's expiry to a TTL from now and returns l with its trust
// window extended. If the lease is gone it returns ErrLost and never adds
// it back.
func (c *Client) Renew(ctx context.Context, l Lease) (Lease, error) {
	if err := validate(l.Key, l.Holder, l.TTL); err != nil {
		return l, err
	}
	sent := c.clock()
	expires, err := renewScript.Run(ctx, c.rdb, []string{c.keys.LeaseSet(l.Key)}, l.Holder, l.TTL.Milliseconds()).Int64()
	if err != nil {
		return l, fmt.Errorf("lease: renew %q: %w", l.Key, err)
	}
	if expires == 0 {
		return l, ErrLost
	}
	l.TrustedUntil = sent.Add(l.TTL)
	return l, nil
}

// Release frees l's slot. It is idempotent, and a release that comes after
// the lease was reaped removes nothing but l's own member: it can never free
// a slot that someone else holds now.
func (c *Client) Release(ctx context.Context, l Lease) error {
	if err := c.rdb.ZRem(ctx, c.keys.LeaseSet(l.Key), l.Holder).Err(); err != nil {
		return fmt.Errorf("lease: release %q: %w", l.Key, err)
	}
	return nil
}

// InUse returns the number of live leases on key.
func (c *Client) InUse(ctx context.Context, key string) (int, error) {
	if err := validateKey(key); err != nil {
		return 0, err
	}
	n, err := countScript.Run(ctx, c.rdb, []string{c.keys.LeaseSet(key)}).Int()
	if err != nil {
		return 0, fmt.Errorf("lease: count %q: %w", key, err)
	}
	return n, nil
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
