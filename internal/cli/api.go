package cli

import (
	"cmp"
	"context"
	"log/slog"
	"net"

	"github.com/oklog/run"

	"github.com/leasehold/leasehold/internal/httpapi"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/schedule"
)

// API adds to g what every API process runs, the dev mode's too: the HTTP
// API on ln, /metrics, /healthz and /readyz on opsLn, the scheduler, and
// the webhook drainer of cfg's queues. Schedule fires are held to cfg's
// submission rate and tenant cap, as submissions are. On an error it
// closes both listeners.
func API(ctx context.Context, g *run.Group, ln, opsLn net.Listener, cfg httpapi.Config, webhooks WebhookFlags) (err error) {
	defer func() {
		if err != nil {
			ln.Close()
			opsLn.Close()
		}
	}()
	handler, err := httpapi.New(cfg)
	if err != nil {
		return err
	}
	ops, err := httpapi.Ops(cfg)
	if err != nil {
		return err
	}
	log := cmp.Or(cfg.Logger, slog.Default())
	queues := cfg.Queues
	if len(queues) == 0 {
		queues = []string{job.DefaultQueue}
	}
	fire, stopFiring, err := Scheduler(ctx, cfg.Redis, cfg.Prefix, cfg.NATS, schedule.Limits{
		Rate: cfg.Rate, Cap: job.Cap{Max: cfg.TenantMaxJobs, MaxBytes: cfg.TenantMaxRetainedBytes, Queues: queues}}, log, cfg.MeterProvider)
	if err != nil {
		return err
	}
	deliver, stopDelivering, err := webhooks.Drainer(ctx, cfg.Redis, cfg.Prefix, queues, cfg.Webhooks, cfg.MeterProvider, log)
	if err != nil {
		return err
	}
	g.Add(Serve(ctx, ln, handler, log)) // graceful shutdown, then cut streams and waits
	g.Add(Serve(ctx, opsLn, ops, log))
	g.Add(fire, stopFiring)
	g.Add(deliver, stopDelivering) // no process of its own is needed for it
	return nil
}
