package lease

import (
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/testsignal"
)

// WithWaitingSignal returns cfg with sig fired each time the waiter is
// about to sleep (in line, subscribed to wake-ups) until a wake-up or its
// next poll.
func WithWaitingSignal(cfg WaitConfig, sig *testsignal.Signal) WaitConfig {
	cfg.waiting = sig
	return cfg
}

// Data is the store c reads and writes through.
func (c *Client) Data() *store.Store { return c.store }
