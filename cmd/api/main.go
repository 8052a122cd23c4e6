// Command api serves Leasehold's HTTP API (docs/openapi.yaml) on Redis and
// NATS. It is stateless: run as many replicas as you need behind a load
// balancer. It refuses to start without API keys; the dev mode, which
// generates one, lives in cmd/leasehold.
package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/oklog/run"

	"github.com/leasehold/leasehold/internal/cli"
	"github.com/leasehold/leasehold/internal/httpapi"
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/telemetry"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/kinds"
	"github.com/leasehold/leasehold/schedule"
)

func main() { os.Exit(cli.Code("api", runAPI(context.Background(), os.Args[1:], os.Stderr))) }

func runAPI(ctx context.Context, args []string, stderr io.Writer) error {
	fs := cli.NewFlags("api", stderr)
	addr := fs.String("addr", "LEASEHOLD_ADDR", "127.0.0.1:8080", "listen address")
	redisFlags := fs.Redis("Redis URL")
	natsURL := fs.URL("nats-url", "LEASEHOLD_NATS_URL", "nats://127.0.0.1:4222", "NATS URL")
	apiKeys := fs.Secret("api-keys", "LEASEHOLD_API_KEYS", "comma-separated tenant:key pairs; the tenant admin acts on every tenant's jobs (required)")
	prefix := fs.String("prefix", "LEASEHOLD_PREFIX", "", "Redis key prefix (default leasehold:)")
	maxBody := fs.Int("max-body", "LEASEHOLD_MAX_BODY", httpapi.DefaultMaxBody, "largest request body, in bytes")
	maxBatchBody := fs.Int("max-batch-body", "LEASEHOLD_MAX_BATCH_BODY", httpapi.DefaultMaxBatchBody, "largest body of a batch submission (POST /v1/jobs/batch), in bytes")
	maxBatches := fs.Int("max-batches", "LEASEHOLD_MAX_BATCHES", httpapi.DefaultMaxBatches, "batch bodies this process holds at once, of all tenants; past it a batch gets 503")
	maxTenantBatches := fs.Int("max-tenant-batches", "LEASEHOLD_MAX_TENANT_BATCHES", httpapi.DefaultMaxTenantBatches, "batch bodies this process holds at once for one tenant; past it a batch gets 429")
	bodyTimeout := fs.Duration("body-timeout", "LEASEHOLD_BODY_TIMEOUT", httpapi.DefaultBodyTimeout, "how long a request body may take to arrive before the request is answered 408")
	redisTimeout := fs.Duration("redis-timeout", "LEASEHOLD_REDIS_TIMEOUT", httpapi.DefaultRedisTimeout, "how long a request waits for Redis before it is answered 503")
	rate := fs.Rate("submissions and schedule fires")
	metricsAddr := fs.String("metrics-addr", "LEASEHOLD_METRICS_ADDR", "127.0.0.1:9091", "listen address of /metrics, /healthz and /readyz, apart from the public port")
	queues := fs.String("queues", "LEASEHOLD_QUEUES", job.DefaultQueue, "comma-separated queues the API accepts jobs for; another is a 400")
	accepted := fs.String("kinds", "LEASEHOLD_KINDS", "", "comma-separated kinds the API accepts jobs of; another is a 400 (default: any kind)")
	maxStreams := fs.Int("max-streams", "LEASEHOLD_MAX_STREAMS", httpapi.DefaultMaxStreams, "each tenant's event streams and ?wait= requests open at once on this process; over it 429")
	tenantMaxRetained := fs.Int("tenant-max-retained-bytes", "LEASEHOLD_TENANT_MAX_RETAINED_BYTES", 0, "bytes each tenant's jobs Redis keeps (not ended, and ended within the retention) over the accepted queues; past it a submission gets 429 (default 0: no quota)")
	tenantMaxJobs := fs.Int("tenant-max-jobs", "LEASEHOLD_TENANT_MAX_JOBS", 0, "each tenant's jobs not ended (queued, running, retrying, waiting) over the accepted queues; over it a submission gets 429 (default 0: no cap)")
	tenantMaxSchedules := fs.Int("tenant-max-schedules", "LEASEHOLD_TENANT_MAX_SCHEDULES", schedule.DefaultTenantMax, "each tenant's schedules; past it creating one more gets 429 until one is deleted")
	notifyFlag := fs.String("notify-allow", "LEASEHOLD_NOTIFY_ALLOW", "", "comma-separated URL prefixes a sleep job's notify_url may start with; any other is refused (default none)")
	retention := fs.Retention()
	webhookFlags := fs.Webhooks()
	llmURL := fs.URL("llm-base-url", "LEASEHOLD_LLM_BASE_URL", "", "OpenAI-compatible API that POST /v1/chat/completions forwards to, as the workers' llm.chat, e.g. https://api.openai.com/v1")
	llmKey := fs.Secret("llm-api-key", "LEASEHOLD_LLM_API_KEY", "API key for the chat completions upstream")
	limitsFlag := fs.String("limits", "LEASEHOLD_LIMITS", "", "comma-separated key=N concurrency limits, e.g. model:gpt-4o=200,tenant:*=10 (* = one limit for each value), with optional ;rpm=N;tpm=N;adaptive budgets; written to Redis at start, keys not named are left as they are")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *tenantMaxSchedules < 1 {
		return fmt.Errorf("LEASEHOLD_TENANT_MAX_SCHEDULES (--tenant-max-schedules) %d: want at least 1", *tenantMaxSchedules)
	}
	limits, err := job.ParseLimits(*limitsFlag)
	if err != nil {
		return fmt.Errorf("LEASEHOLD_LIMITS (--limits): %w", err)
	}
	notifyAllow, err := kinds.ParseNotifyAllow(*notifyFlag)
	if err != nil {
		return fmt.Errorf("LEASEHOLD_NOTIFY_ALLOW (--notify-allow): %w", err)
	}
	webhooks, err := webhookFlags.Policy(false)
	if err != nil {
		return err
	}
	keys, err := httpapi.ParseKeys(*apiKeys)
	if err != nil {
		return fmt.Errorf("%w (set LEASEHOLD_API_KEYS or --api-keys; the dev mode generates a key)", err)
	}
	log := cli.Logger(stderr)
	stopTracing, err := telemetry.Setup(ctx, "leasehold-api", log)
	if err != nil {
		return err
	}
	defer stopTracing()

	rdb, err := cli.Redis(ctx, redisFlags.Config(), log)
	if err != nil {
		return err
	}
	defer rdb.Close()
	// Event streams and ?wait= wait in XREAD BLOCK, each on a connection of
	// its own for as long as it lasts: they get a pool of their own, as
	// large as the caps allow, so they never take the connections ordinary
	// requests need.
	blockingCfg := redisFlags.Config()
	blockingCfg.PoolSize = max(1, *maxStreams) * keys.Len()
	blocking, err := cli.NewRedisClient(blockingCfg)
	if err != nil {
		return err
	}
	defer blocking.Close()
	nc, err := cli.NATS(*natsURL, "leasehold-api", log)
	if err != nil {
		return err
	}
	defer nc.Close()

	meters, metrics, err := cli.Metrics()
	if err != nil {
		return err
	}
	defer meters.Shutdown(context.WithoutCancel(ctx))

	limiter, err := rate.Limiter(rdb, *prefix, log, meters)
	if err != nil {
		return err
	}

	scfg := store.Config{Prefix: *prefix, Retention: *retention, OnlyLimitedKeys: true}
	if err := scfg.Validate(); err != nil {
		return err
	}
	jobs := store.New(rdb, scfg)
	if err := writeLimits(ctx, jobs, limits, *redisTimeout); err != nil {
		return err
	}
	if len(limits) > 0 {
		log.Info("concurrency limits written", "limits", len(limits))
	}

	cfg := httpapi.Config{
		Store:                  jobs,
		Rate:                   limiter,
		Redis:                  rdb,
		Blocking:               blocking,
		MaxStreams:             *maxStreams,
		TenantMaxJobs:          int64(*tenantMaxJobs),
		TenantMaxRetainedBytes: int64(*tenantMaxRetained),
		TenantMaxSchedules:     *tenantMaxSchedules,
		NATS:                   nc,
		Prefix:                 *prefix,
		Keys:                   keys,
		MaxBody:                int64(*maxBody),
		MaxBatchBody:           int64(*maxBatchBody),
		MaxBatches:             *maxBatches,
		MaxTenantBatches:       *maxTenantBatches,
		BodyTimeout:            *bodyTimeout,
		NotifyAllow:            notifyAllow,
		Webhooks:               webhooks,
		Queues:                 cli.List(*queues),
		Kinds:                  cli.List(*accepted),
		RedisTimeout:           *redisTimeout,
		LLM:                    httpapi.LLMConfig{BaseURL: *llmURL, APIKey: *llmKey},
		Logger:                 log,
		MeterProvider:          meters,
		Metrics:                metrics,
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	opsLn, err := net.Listen("tcp", *metricsAddr)
	if err != nil {
		ln.Close()
		return err
	}
	log.Info("api listening", "addr", ln.Addr().String(), "metrics_addr", opsLn.Addr().String(), "tenants", keys.Len())

	var g run.Group
	if err := cli.API(ctx, &g, ln, opsLn, cfg, webhookFlags); err != nil {
		return err
	}
	g.Add(run.SignalHandler(ctx, syscall.SIGINT, syscall.SIGTERM))
	return g.Run()
}

// writeLimits writes the limits of --limits to Redis, where every worker
// reads them. Limits it does not name, set before or through the API, are
// left as they are: removing one is a DELETE /v1/limits/{key}.
func writeLimits(ctx context.Context, jobs *store.Store, limits map[string]job.KeyLimit, timeout time.Duration) error {
	ctx, stop := context.WithTimeout(ctx, max(timeout, 5*time.Second))
	defer stop()
	for _, key := range slices.Sorted(maps.Keys(limits)) {
		if err := jobs.SetKeyLimit(ctx, key, limits[key]); err != nil {
			return fmt.Errorf("LEASEHOLD_LIMITS (--limits): %w", err)
		}
	}
	return nil
}
