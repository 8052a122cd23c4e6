package httpapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasehold/leasehold/cancel"
	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/replicas"
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/kinds"
	"github.com/leasehold/leasehold/lease"
	"github.com/leasehold/leasehold/ratelimit"
	"github.com/leasehold/leasehold/ratelimit/usage"
	"github.com/leasehold/leasehold/schedule"
	"github.com/leasehold/leasehold/webhook"
)

// Defaults of Config.
const (
	DefaultMaxBody          = 1 << 20
	DefaultMaxBatchBody     = 16 << 20
	DefaultRedisTimeout     = 2 * time.Second
	DefaultKeepAlive        = 15 * time.Second
	DefaultBodyTimeout      = 30 * time.Second
	DefaultMaxStreams       = 100
	DefaultMaxBatches       = 8
	DefaultMaxTenantBatches = 2
)

// MaxWait is the longest ?wait= a GET of a job may ask for.
const MaxWait = 60 * time.Second

// Log attribute keys.
const (
	attrJobID = "job_id"
	attrQueue = "queue"
	attrErr   = "err"
	attrRoute = "route"
)

// Config configures the API. Zero values mean the defaults.
type Config struct {
	// Redis holds the jobs. Required: /readyz pings it, and it backs the
	// default Store and Flags. Give it ContextTimeoutEnabled, or a Redis
	// that accepts connections but does not answer holds requests for the
	// client's read timeout instead of RedisTimeout.
	Redis redis.UniversalClient
	// Blocking serves the reads that wait for events (event streams and
	// ?wait=), each of which holds a connection for as long as it waits;
	// default Redis. Give it a pool of its own, of MaxStreams connections
	// per tenant, so that waiting clients never take the connections
	// ordinary requests need.
	Blocking redis.UniversalClient
	// MaxStreams caps each tenant's event streams and ?wait= requests open
	// at once on this process; default DefaultMaxStreams (100). Over it a
	// request is answered 429 with Retry-After.
	MaxStreams int
	// Store reads and writes jobs; default store.New(Redis,
	// store.Config{Prefix: Prefix, TracerProvider: TracerProvider,
	// OnlyLimitedKeys: true, UsageRetention: the usage counters'}). A Store
	// given here should set OnlyLimitedKeys too: without it a tenant's
	// concurrency_keys may name any key, and each creates lease keys.
	Store *store.Store
	// Flags requests cancellation of running jobs; default
	// cancel.New of a store of Redis under Prefix, NATS and Logger.
	Flags *cancel.Flags
	// NATS wakes an idle worker after each new job; default nil: no
	// wake-ups, workers find new jobs when they poll.
	NATS *nats.Conn
	// Prefix starts every Redis key and NATS wake-up subject; default
	// keys.DefaultPrefix ("leasehold:"). It must be the Store's, the Flags'
	// and the workers' prefix.
	Prefix string
	// Keys are the API keys and the tenants they stand for. Required: at
	// least one (see ParseKeys).
	Keys Keys
	// MaxBody is the largest request body, in bytes; default DefaultMaxBody
	// (1 MiB). Larger bodies are answered 413.
	MaxBody int64
	// MaxBatchBody is the largest body of a batch submission
	// (POST /v1/jobs/batch), in bytes; default DefaultMaxBatchBody
	// (16 MiB). Larger bodies are answered 413. Each of its items may be
	// MaxBody, as its own POST /v1/jobs.
	MaxBatchBody int64
	// MaxBatches bounds the batch bodies this process holds at once, of
	// all tenants, and MaxTenantBatches those of one tenant; defaults
	// DefaultMaxBatches (8) and DefaultMaxTenantBatches (2). Past the
	// tenant's a batch is answered 429, past the process's 503, both with
	// Retry-After, before its body is read: at most MaxBatches bodies of
	// MaxBatchBody bytes are in memory at once.
	MaxBatches, MaxTenantBatches int
	// BodyTimeout is how long a request body may take to arrive, from when
	// the handler starts reading it; default DefaultBodyTimeout (30s). Past
	// it the request is answered 408.
	BodyTimeout time.Duration
	// Queues are the queues the API accepts jobs for; a submission naming
	// another (or naming none, when job.DefaultQueue is not among them) is
	// refused (400). Default [job.DefaultQueue].
	Queues []string
	// Kinds, when set, are the kinds the API accepts jobs of; a submission
	// (a batch's item, a schedule's job) of another is refused (400).
	// Default none: any kind.
	Kinds []string
	// TenantMaxJobs caps each tenant's jobs not ended (queued, running,
	// retrying or waiting), summed over Queues; default 0: no cap. A submission over
	// it is answered 429 with Retry-After; an idempotent replay is still
	// answered with its job. Concurrent submissions to different queues may
	// pass the cap by as many as are in flight (see store.Store.SubmitWithin).
	TenantMaxJobs int64
	// TenantMaxRetainedBytes caps the bytes each tenant's jobs, not ended
	// and ended within their retention, are charged (job.Cap.MaxBytes),
	// summed over Queues; default 0: no quota. A submission or retry past
	// it is answered 429 with Retry-After, as for TenantMaxJobs.
	TenantMaxRetainedBytes int64
	// TenantMaxSchedules is how many schedules each tenant may have;
	// default schedule.DefaultTenantMax (1,000). A new one past it is
	// answered 429; deleting one frees its place.
	TenantMaxSchedules int
	// NotifyAllow says where a sleep job's notify_url may point; a job
	// whose notify_url it does not allow is refused (400). Default nowhere.
	NotifyAllow kinds.NotifyAllow
	// Webhooks says which webhooks a job (or a schedule's job) may have:
	// a URL its Allow allows, of a tenant with a secret; any other is
	// refused (400). Default none: every webhook is refused.
	Webhooks webhook.Policy
	// RedisTimeout bounds the Redis work of one request, default
	// DefaultRedisTimeout (2s); a blocking read gets its wait on top, a
	// batch submission 5 ms per item. Past
	// it the request is answered 503.
	RedisTimeout time.Duration
	// KeepAlive is how long an event stream stays silent before it sends a
	// comment line; default DefaultKeepAlive (15s).
	KeepAlive time.Duration
	// Rate limits each tenant's job submissions (POST /v1/jobs, and each item of POST /v1/jobs/batch), one unit
	// per new job; default nil: unlimited. A refusal is answered 429 with
	// Retry-After; a limiter error (Redis did not answer) 503, never 429.
	// The tenant name is the subject. Wrap it in ratelimit.Shadow to try a
	// limit without enforcing it, and in ratelimit.Fallback to keep limiting
	// per process while Redis is down.
	Rate ratelimit.Limiter
	// Usage counts each tenant's jobs submitted, and GET /v1/usage reads
	// it; default usage.New(Redis, usage.Config{Prefix: Prefix}). Workers
	// count executions and tokens in the same counters.
	Usage *usage.Counters
	// LLM is the upstream of POST /v1/chat/completions; default none: the
	// endpoint answers 501.
	LLM LLMConfig
	// Logger; default slog.Default().
	Logger *slog.Logger
	// MeterProvider makes the API's instruments (requests, latency, job
	// counts); default otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// TracerProvider makes a span per request, named by its route, and
	// the default Store's job spans; default otel.GetTracerProvider(). A
	// traceparent header on a request makes it a child of the caller's span.
	TracerProvider trace.TracerProvider
	// Metrics serves GET /metrics on the handler Ops returns, never on the
	// public one; default promhttp.Handler(), the default Prometheus
	// registry, which an OpenTelemetry Prometheus exporter made without
	// WithRegisterer feeds.
	Metrics http.Handler
}

// server holds what every handler needs.
type server struct {
	rdb          redis.UniversalClient
	store        *store.Store
	blocking     *store.Store // the Store's reads, on Config.Blocking
	streams      *slots
	batches      *slots
	flags        *cancel.Flags
	nc           *nats.Conn
	waker        *execution.Waker
	prefix       string
	keys         Keys
	rate         ratelimit.Limiter
	usage        *usage.Counters
	maxBody      int64
	maxBatchBody int64
	notifyAllow  kinds.NotifyAllow
	webhooks     webhook.Policy
	queues       []string
	kinds        []string
	tenantCap    int64
	tenantQuota  int64 // Config.TenantMaxRetainedBytes
	bodyTimeout  time.Duration
	redisTimeout time.Duration
	keepAlive    time.Duration
	log          *slog.Logger
	metrics      *instruments
	rateMetrics  *rateInstruments
	schedules    *schedule.Store
	leases       *lease.Client
	llm          LLMConfig
	serving      serving // the kinds live workers serve, for blocked_by
}

// New returns the API's handler.
func New(cfg Config) (http.Handler, error) {
	switch {
	case cfg.Redis == nil:
		return nil, errors.New("httpapi: nil redis client")
	case cfg.Keys.Len() == 0:
		return nil, errors.New("httpapi: no API keys")
	case cfg.MaxBody < 0 || cfg.MaxBatchBody < 0 || cfg.BodyTimeout < 0 || cfg.RedisTimeout < 0 || cfg.KeepAlive < 0 || cfg.MaxStreams < 0 || cfg.TenantMaxJobs < 0 || cfg.TenantMaxRetainedBytes < 0 ||
		cfg.TenantMaxSchedules < 0 || cfg.MaxBatches < 0 || cfg.MaxTenantBatches < 0:
		return nil, errors.New("httpapi: negative MaxBody, MaxBatchBody, BodyTimeout, RedisTimeout, KeepAlive, MaxStreams, TenantMaxJobs, TenantMaxRetainedBytes, TenantMaxSchedules, MaxBatches or MaxTenantBatches")
	}
	s := &server{
		rdb:          cfg.Redis,
		store:        cfg.Store,
		flags:        cfg.Flags,
		nc:           cfg.NATS,
		prefix:       cfg.Prefix,
		keys:         cfg.Keys,
		rate:         cfg.Rate,
		usage:        cfg.Usage,
		maxBody:      cmp.Or(cfg.MaxBody, DefaultMaxBody),
		maxBatchBody: cmp.Or(cfg.MaxBatchBody, DefaultMaxBatchBody),
		notifyAllow:  cfg.NotifyAllow,
		webhooks:     cfg.Webhooks,
		queues:       cfg.Queues,
		kinds:        cfg.Kinds,
		tenantCap:    cfg.TenantMaxJobs,
		tenantQuota:  cfg.TenantMaxRetainedBytes,
		streams:      newSlots(cmp.Or(cfg.MaxStreams, DefaultMaxStreams), 0, errTooManyStreams, nil),
		batches: newSlots(cmp.Or(cfg.MaxTenantBatches, DefaultMaxTenantBatches), cmp.Or(cfg.MaxBatches, DefaultMaxBatches),
			errTooManyBatches, errBatchesFull),
		bodyTimeout:  cmp.Or(cfg.BodyTimeout, DefaultBodyTimeout),
		redisTimeout: cmp.Or(cfg.RedisTimeout, DefaultRedisTimeout),
		keepAlive:    cmp.Or(cfg.KeepAlive, DefaultKeepAlive),
		log:          cmp.Or(cfg.Logger, slog.Default()),
		llm:          cfg.LLM,
	}
	s.waker = execution.NewWaker(cfg.NATS, cfg.Prefix, s.log)
	if len(s.queues) == 0 {
		s.queues = []string{job.DefaultQueue}
	}
	for _, q := range s.queues {
		if err := job.ValidateQueue(q); err != nil {
			return nil, fmt.Errorf("httpapi: %w", err)
		}
	}
	for _, k := range s.kinds {
		if err := job.ValidateKind(k); err != nil {
			return nil, fmt.Errorf("httpapi: %w", err)
		}
	}
	var err error
	if s.usage == nil {
		if s.usage, err = usage.New(store.New(cfg.Redis, store.Config{Prefix: cfg.Prefix}), usage.Config{}); err != nil {
			return nil, fmt.Errorf("httpapi: %w", err)
		}
	}
	if s.store == nil {
		s.store = store.New(cfg.Redis, store.Config{Prefix: cfg.Prefix, TracerProvider: cfg.TracerProvider,
			OnlyLimitedKeys: true, UsageRetention: s.usage.Retention()})
	}
	s.blocking = s.store
	if cfg.Blocking != nil {
		s.blocking = store.New(cfg.Blocking, store.Config{Prefix: cfg.Prefix, TracerProvider: cfg.TracerProvider})
	}
	if s.flags == nil {
		if s.flags, err = cancel.New(store.New(cfg.Redis, store.Config{Prefix: cfg.Prefix}), cfg.NATS, cancel.Config{Logger: s.log}); err != nil {
			return nil, fmt.Errorf("httpapi: %w", err)
		}
	}
	if s.leases, err = lease.New(store.New(cfg.Redis, store.Config{Prefix: cfg.Prefix}), lease.Config{}); err != nil {
		return nil, fmt.Errorf("httpapi: %w", err)
	}
	if s.schedules, err = schedule.NewStore(store.New(cfg.Redis, store.Config{Prefix: cfg.Prefix}), schedule.Config{Jobs: s.store, Waker: s.waker, TenantMax: cfg.TenantMaxSchedules}); err != nil {
		return nil, fmt.Errorf("httpapi: %w", err)
	}
	mp := cfg.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if s.metrics, err = newInstruments(mp, s.jobCounts, s.store.Limits); err != nil {
		return nil, fmt.Errorf("httpapi: metrics: %w", err)
	}
	if s.rateMetrics, err = newRateInstruments(mp); err != nil {
		return nil, fmt.Errorf("httpapi: metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/jobs", methods{
		http.MethodGet:  s.authed(s.listJobs),
		http.MethodPost: s.authed(s.submitJob),
	})
	mux.Handle("/v1/jobs/batch", methods{http.MethodPost: s.authed(s.submitBatch)})
	mux.Handle("/v1/jobs/retry", methods{http.MethodPost: s.authed(s.retryJobs)})
	mux.Handle("/v1/jobs/{id}", methods{
		http.MethodGet:    s.authed(s.getJob),
		http.MethodDelete: s.authed(s.deleteJob),
	})
	mux.Handle("/v1/jobs/{id}/cancel", methods{http.MethodPost: s.authed(s.cancelJob)})
	mux.Handle("/v1/jobs/{id}/retry", methods{http.MethodPost: s.authed(s.retryJob)})
	mux.Handle("/v1/jobs/{id}/signal", methods{http.MethodPost: s.authed(s.signalJob)})
	mux.Handle("/v1/jobs/{id}/events", methods{http.MethodGet: s.authed(s.streamEvents)})
	mux.Handle("/v1/queues", methods{http.MethodGet: s.authed(s.listQueues)})
	mux.Handle("/v1/queues/{name}/pause", methods{http.MethodPost: s.authed(s.pauseQueue(true))})
	mux.Handle("/v1/queues/{name}/resume", methods{http.MethodPost: s.authed(s.pauseQueue(false))})
	mux.Handle("/v1/queues/{name}/stats", methods{http.MethodGet: s.authed(s.queueFinished)})
	mux.Handle("/v1/chat/completions", methods{http.MethodPost: s.chatCompletions})
	mux.Handle("/v1/usage", methods{http.MethodGet: s.authed(s.getUsage)})
	mux.Handle("/v1/workers", methods{http.MethodGet: s.authed(s.listWorkers)})
	mux.Handle("/v1/limits", methods{http.MethodGet: s.authed(s.listLimits)})
	mux.Handle("/v1/limits/{key...}", methods{
		http.MethodGet:    s.authed(s.limitHistory),
		http.MethodPut:    s.authed(s.putLimit),
		http.MethodPatch:  s.authed(s.patchLimit),
		http.MethodDelete: s.authed(s.deleteLimit),
	})
	mux.Handle("/v1/schedules", methods{
		http.MethodGet:  s.authed(s.listSchedules),
		http.MethodPost: s.authed(s.createSchedule),
	})
	mux.Handle("/v1/schedules/{name}", methods{
		http.MethodGet:    s.authed(s.getSchedule),
		http.MethodPut:    s.authed(s.updateSchedule),
		http.MethodDelete: s.authed(s.deleteSchedule),
	})
	mux.Handle("/v1/schedules/{name}/pause", methods{http.MethodPost: s.authed(s.pauseSchedule(true))})
	mux.Handle("/v1/schedules/{name}/resume", methods{http.MethodPost: s.authed(s.pauseSchedule(false))})
	mux.Handle("/v1/schedules/{name}/trigger", methods{http.MethodPost: s.authed(s.triggerSchedule)})
	mux.Handle("/healthz", methods{http.MethodGet: s.healthz})
	mux.Handle("/readyz", methods{http.MethodGet: s.readyz})
	mux.Handle("/openapi.yaml", methods{http.MethodGet: serveOpenAPI})
	mux.Handle("/ui/", methods{http.MethodGet: serveConsole, http.MethodHead: serveConsole})
	mux.Handle("/{$}", methods{http.MethodGet: toConsole, http.MethodHead: toConsole})
	mux.HandleFunc("/", notFound)
	return bodyDeadline(traced(s.measure(canonicalPath(mux)), cfg.TracerProvider), s.bodyTimeout), nil
}

// bodyDeadline gives a request body timeout to arrive, from its first
// read: a body trickled in byte by byte would otherwise hold its goroutine
// and connection for as long as the client likes. The server's ReadTimeout
// cannot do this, as it would also cut event streams and ?wait= requests,
// whose connections are read until they end. It sits outside every
// wrapper of the ResponseWriter, which could hide the connection.
func bodyDeadline(next http.Handler, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = &deadlineBody{ReadCloser: r.Body, rc: http.NewResponseController(w), timeout: timeout}
		}
		next.ServeHTTP(w, r)
	})
}

// deadlineBody sets the connection's read deadline at its first read and
// lifts it when the whole body has been read. After a timeout it stays:
// the server reads what is left of a body before it answers, and must
// not wait for a trickle then either.
type deadlineBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	timeout time.Duration
	started bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	if !b.started {
		b.started = true
		_ = b.rc.SetReadDeadline(time.Now().Add(b.timeout))
	}
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// methods serves one path: a handler per method, and 405 with Allow for
// every other method.
type methods map[string]http.HandlerFunc

func (m methods) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h, ok := m[r.Method]; ok {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			// A write is acknowledged only once LEASEHOLD_REDIS_MIN_REPLICAS
			// replicas have it (replicas.Require; a no-op without it).
			r = r.WithContext(replicas.Ack(r.Context()))
		}
		h(w, r)
		return
	}
	allowed := strings.Join(slices.Sorted(maps.Keys(m)), ", ")
	w.Header().Set("Allow", allowed)
	writeProblem(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s is not allowed here; allowed: %s", r.Method, allowed))
}

// canonicalPath answers 404 for a path that is not in canonical form (dot
// segments, double slashes), where ServeMux would redirect instead: no
// route of the API has such a path, and a redirect would turn an injected
// "../" into a request for another resource. The one exception is the
// console's root, /ui/ (ServeMux redirects /ui there).
func canonicalPath(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.EscapedPath()
		if p == "" || path.Clean(p) != p && p != "/ui/" {
			notFound(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func notFound(w http.ResponseWriter, _ *http.Request) {
	writeProblem(w, http.StatusNotFound, "no such resource")
}

// redisContext bounds a request's Redis work: RedisTimeout, plus block for
// a read that waits for events.
func (s *server) redisContext(ctx context.Context, block time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.redisTimeout+block)
}
