// Command worker claims Leasehold jobs from Redis and runs them: the
// built-in kinds (echo, sleep, llm.chat) and the remote handlers named in
// LEASEHOLD_HANDLERS. A Go program with kinds of its own embeds the same
// worker with package leasehold instead.
// Run as many replicas as you need; each is stateless. It serves GET
// /metrics, /healthz and /readyz on --metrics-addr.
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/oklog/run"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/cli"
	"github.com/leasehold/leasehold/internal/telemetry"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/kinds"
	"github.com/leasehold/leasehold/kinds/remote"
	"github.com/leasehold/leasehold/schedule"
)

func main() { os.Exit(cli.Code("worker", runWorker(context.Background(), os.Args[1:], os.Stderr))) }

func runWorker(ctx context.Context, args []string, stderr io.Writer) error {
	fs := cli.NewFlags("worker", stderr)
	redisFlags := fs.Redis("Redis URL")
	natsURL := fs.URL("nats-url", "LEASEHOLD_NATS_URL", "nats://127.0.0.1:4222", "NATS URL")
	prefix := fs.String("prefix", "LEASEHOLD_PREFIX", "", "Redis key prefix (default leasehold:)")
	queues := fs.String("queues", "LEASEHOLD_QUEUES", "default", "comma-separated queues to serve")
	concurrency := fs.Int("concurrency", "LEASEHOLD_CONCURRENCY", 32, "executions run at once")
	heartbeat := fs.Duration("heartbeat", "LEASEHOLD_HEARTBEAT", 2*time.Second, "lease heartbeat interval")
	leaseTTL := fs.Duration("lease-ttl", "LEASEHOLD_LEASE_TTL", 10*time.Second, "lease TTL")
	grace := fs.Duration("shutdown-grace", "LEASEHOLD_SHUTDOWN_GRACE", 30*time.Second, "time running executions get to finish after SIGTERM")
	llmURL := fs.URL("llm-base-url", "LEASEHOLD_LLM_BASE_URL", "", "OpenAI-compatible API for llm.chat, e.g. https://api.openai.com/v1")
	llmKey := fs.Secret("llm-api-key", "LEASEHOLD_LLM_API_KEY", "API key for the llm.chat upstream")
	notifyFlag := fs.String("notify-allow", "LEASEHOLD_NOTIFY_ALLOW", "", "comma-separated URL prefixes a sleep job's notify_url may start with; a job naming another fails (default none)")
	handlers := fs.Handlers()
	webhookFlags := fs.Webhooks()
	retention := fs.Retention()
	metricsAddr := fs.String("metrics-addr", "LEASEHOLD_METRICS_ADDR", "127.0.0.1:9090", "listen address of /metrics, /healthz and /readyz")
	rate := fs.Rate("schedule fires (as the API's)")
	tenantMaxRetained := fs.Int("tenant-max-retained-bytes", "LEASEHOLD_TENANT_MAX_RETAINED_BYTES", 0, "bytes each tenant's jobs Redis keeps, as the API's; a schedule fire past it waits (default 0: no quota)")
	tenantMaxJobs := fs.Int("tenant-max-jobs", "LEASEHOLD_TENANT_MAX_JOBS", 0, "each tenant's jobs not ended, as the API's; a schedule fire over it waits (default 0: no cap)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	notifyAllow, err := kinds.ParseNotifyAllow(*notifyFlag)
	if err != nil {
		return fmt.Errorf("LEASEHOLD_NOTIFY_ALLOW (--notify-allow): %w", err)
	}
	webhooks, err := webhookFlags.Policy(false)
	if err != nil {
		return err
	}
	remotes, err := remote.ParseHandlers(*handlers)
	if err != nil {
		return err
	}
	log := cli.Logger(stderr)
	stopTracing, err := telemetry.Setup(ctx, "leasehold-worker", log)
	if err != nil {
		return err
	}
	defer stopTracing()

	rdb, err := cli.Redis(ctx, redisFlags.Config(), log)
	if err != nil {
		return err
	}
	defer rdb.Close()
	nc, err := cli.NATS(*natsURL, "leasehold-worker", log)
	if err != nil {
		return err
	}
	defer nc.Close()

	meters, metrics, err := cli.Metrics()
	if err != nil {
		return err
	}
	defer meters.Shutdown(context.WithoutCancel(ctx))

	c, err := leasehold.NewClient(rdb, leasehold.Config{
		Worker: execution.Config{
			Prefix:        *prefix,
			NATS:          nc,
			Queues:        cli.List(*queues),
			Concurrency:   *concurrency,
			Heartbeat:     *heartbeat,
			LeaseTTL:      *leaseTTL,
			ShutdownGrace: *grace,
			Retention:     *retention,
			Logger:        log,
			MeterProvider: meters,
		},
		Handlers: remotes,
		Sleep:    kinds.SleepConfig{Allow: notifyAllow, Logger: log},
		LLM:      kinds.LLMConfig{BaseURL: *llmURL, APIKey: *llmKey},
	})
	if err != nil {
		return err
	}
	limiter, err := rate.Limiter(rdb, *prefix, log, meters)
	if err != nil {
		return err
	}
	limits := schedule.Limits{Rate: limiter, Cap: job.Cap{Max: int64(*tenantMaxJobs), MaxBytes: int64(*tenantMaxRetained), Queues: cli.List(*queues)}}
	fire, stopFiring, err := cli.Scheduler(ctx, rdb, *prefix, nc, limits, log, meters)
	if err != nil {
		return err
	}
	deliver, stopDelivering, err := webhookFlags.Drainer(ctx, rdb, *prefix, cli.List(*queues), webhooks, meters, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *metricsAddr)
	if err != nil {
		return err
	}
	log.Info("worker started", "worker", c.WorkerID(), "remote_kinds", len(remotes), "queues", *queues, "concurrency", *concurrency, "metrics_addr", ln.Addr().String())

	var g run.Group
	h := &health{rdb: rdb}
	workCtx, stop := context.WithCancel(ctx)
	worked := make(chan struct{})
	g.Add(func() error {
		defer close(worked)
		h.running.Store(true)
		return c.Run(workCtx)
	}, func(error) {
		h.running.Store(false) // not ready from the first moment of the shutdown
		stop()
	})
	serve, shutdown := cli.Serve(ctx, ln, h.handler(metrics), log)
	// /metrics and /readyz stay up while the worker drains; they go when it is done.
	g.Add(serve, func(err error) { go func() { <-worked; shutdown(err) }() })
	g.Add(fire, stopFiring)        // every worker fires due schedules: no leader
	g.Add(deliver, stopDelivering) // and delivers its queues' webhooks
	g.Add(run.SignalHandler(ctx, syscall.SIGINT, syscall.SIGTERM))
	return g.Run()
}
