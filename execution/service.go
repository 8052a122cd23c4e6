package execution

import (
	"context"
	"log/slog"
	"sync"

	"github.com/leasehold/leasehold/internal/testsignal"
)

// The worker's services: its background duties, each a Run(ctx) error
// that does its duty until ctx is done and then returns, as River's
// maintenance services and oklog/run's actors do. Worker.Run starts them
// all through one services group. (The confirmer is not one: it is a
// stage of fetch, fed by it, and ends when fetch closes its channel, as
// it must before the runners it starts jobs on are told to exit.)
const (
	serviceHeartbeats    = "heartbeats"     // Worker.heartbeats: renews the leases
	serviceFinisher      = "finisher"       // Worker.finisher: writes the finishes
	serviceReaper        = "reaper"         // Reaper.Run: the queues' due work and folds
	serviceCancelWatcher = "cancel watcher" // cancel.Watcher.Run: fast cancels over NATS
	serviceLimits        = "limits"         // Worker.keepLimits: refreshes the limits and paused queues
	serviceRegistry      = "registry"       // Worker.publish: the worker's entry in the registry of live workers
)

// services runs a worker's services, each on a goroutine of its own, and
// waits for them.
type services struct {
	log *slog.Logger
	// started holds, by service name, a signal fired as that service
	// starts; set by tests only (export_test.go).
	started map[string]*testsignal.Signal
	wg      sync.WaitGroup
}

// start runs the service name, run, until ctx is done. An error it returns
// before then is logged, and the worker runs on without that duty.
func (s *services) start(ctx context.Context, name string, run func(context.Context) error) {
	s.wg.Go(func() {
		s.started[name].Fire()
		if err := run(ctx); err != nil && ctx.Err() == nil {
			s.log.ErrorContext(ctx, "worker service stopped", "service", name, "error", err)
		}
	})
}

// wait waits for every service started to return.
func (s *services) wait() { s.wg.Wait() }
