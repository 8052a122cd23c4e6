package execution

import (
	"context"
	"time"

	"github.com/leasehold/leasehold/internal/testsignal"
)

// ClaimScript is the claim script, for tests that watch for it on the wire
// or need it cached in Redis.
var ClaimScript = claimScript

// PeekScript is the peek script, for tests that watch for it on the wire.
var PeekScript = peekScript

// FinishScript is the finish script, for benchmarks that count its runs.
var FinishScript = finishScript

// WithIdleSignal returns cfg with sig fired each time the worker goes idle
// (subscribed to wake-ups, nothing to claim, about to wait).
func WithIdleSignal(cfg Config, sig *testsignal.Signal) Config {
	cfg.idle = sig
	return cfg
}

// WithAlongFor returns cfg with a claim's peek standing in for the next
// claim's own for d (see fused), not defaultAlongFor.
func WithAlongFor(cfg Config, d time.Duration) Config {
	cfg.alongFor = d
	return cfg
}

// Fold runs one fold of w's first queue (fold.go), for benchmarks that
// measure it alone.
func Fold(ctx context.Context, w *Worker, after time.Duration) (bool, error) {
	return w.queues[0].fold(ctx, after)
}

// Pack packs ids, folded jobs of w's first queue, as its reaper does
// after a fold (fold.go).
func Pack(ctx context.Context, w *Worker, ids ...string) error {
	return w.queues[0].pack(ctx, ids)
}

// The names of the worker's services (service.go), for WithStartedSignal.
const (
	ServiceHeartbeats    = serviceHeartbeats
	ServiceFinisher      = serviceFinisher
	ServiceReaper        = serviceReaper
	ServiceCancelWatcher = serviceCancelWatcher
	ServiceLimits        = serviceLimits
)

// WithStartedSignal returns cfg with sig fired as the worker's service
// named service starts.
func WithStartedSignal(cfg Config, service string, sig *testsignal.Signal) Config {
	started := map[string]*testsignal.Signal{service: sig}
	for name, s := range cfg.started {
		if name != service {
			started[name] = s
		}
	}
	cfg.started = started
	return cfg
}
