package lease

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Keeper renews one lease every interval and fences its holder: it cancels
// the holder's context with cause ErrLost when a renew finds the lease gone,
// or when no renew has succeeded for a whole TTL (the holder may be cut off
// from Redis while its lease expires there). Either way the holder stops
// before anyone else can be granted its slot.
type Keeper struct {
	c        *Client
	interval time.Duration
	lost     context.CancelCauseFunc

	mu    sync.Mutex
	lease Lease
}

// Keeper returns a keeper of l that renews every interval (default TTL/3:
// the TTL covers three heartbeats, so one late or lost renew is not fatal)
// and calls lost with ErrLost when the lease is lost.
func (c *Client) Keeper(l Lease, interval time.Duration, lost context.CancelCauseFunc) *Keeper {
	if interval <= 0 {
		interval = l.TTL / 3
	}
	return &Keeper{c: c, interval: interval, lost: lost, lease: l}
}

// Lease returns the lease as of its last successful renew.
func (k *Keeper) Lease() Lease {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lease
}

// Run renews until ctx is done (nil) or the lease is lost (ErrLost, after
// calling lost).
func (k *Keeper) Run(ctx context.Context) error {
	ticker := time.NewTicker(k.interval)
	defer ticker.Stop()
	for {
		l := k.Lease()
		trust := time.NewTimer(l.TrustedUntil.Sub(k.c.clock()))
		select {
		case <-ctx.Done():
			trust.Stop()
			return nil
		case <-trust.C:
			return k.fail()
		case <-ticker.C:
			trust.Stop()
		}
		// A renew that would answer after the trust window is useless: the
		// holder must already have stopped by then.
		rctx, stop := context.WithTimeout(ctx, l.TrustedUntil.Sub(k.c.clock()))
		renewed, err := k.c.Renew(rctx, l)
		stop()
		switch {
		case err == nil:
			k.mu.Lock()
			k.lease = renewed
			k.mu.Unlock()
		case errors.Is(err, ErrLost):
			return k.fail()
		case ctx.Err() != nil:
			return nil
		}
		// Any other error (Redis unreachable, slow) is retried at the next
		// tick; the trust timer fences the holder if none succeeds in time.
	}
}

func (k *Keeper) fail() error {
	k.lost(ErrLost)
	return ErrLost
}
