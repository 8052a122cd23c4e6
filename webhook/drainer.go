package webhook

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/internal/store"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasehold/leasehold/internal/telemetry"
	"github.com/leasehold/leasehold/internal/testsignal"
	"github.com/leasehold/leasehold/job"
)

// Bounds of one try. A receiver's answer is read to at most maxAnswer
// bytes (only its status counts); a delivery keeps its last keptTries
// tries for the console.
const (
	maxAnswer = 64 << 10
	keptTries = 20
)

// Config configures a Drainer. Zero values mean the defaults given.
type Config struct {
	// Queues are the queues whose outboxes it drains. Required.
	Queues []string
	// Policy is checked before each try: a URL it refuses, or a tenant
	// with no secret, is not called, and the try counts as failed.
	Policy Policy
	// Timeout bounds one try, its answer included; default 10s.
	Timeout time.Duration
	// Backoff is the wait after a first failed try, doubling with each
	// one after it up to MaxBackoff, with jitter (half to all of it);
	// defaults 5s and 1h.
	Backoff    time.Duration
	MaxBackoff time.Duration
	// Window is how long a delivery is tried, from its first try, before
	// it is failed; default 24h.
	Window time.Duration
	// Concurrency bounds the tries in flight at once; default 16.
	// PerTenant bounds those of one tenant, so that one tenant's slow
	// receiver cannot hold every one; default 4.
	Concurrency int
	PerTenant   int
	// Poll is how often an idle drainer reads its outboxes; default 250ms.
	Poll time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
	// MeterProvider and TracerProvider; default the global ones.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
}

// Drainer delivers the ends of jobs to their webhooks: it takes due
// deliveries from its queues' outboxes, POSTs each, and records the try.
// Any number may run, in any processes: a delivery taken is held for a
// while (hold), so two drainers do not try it at once, and it is due
// again when a drainer dies with it.
type Drainer struct {
	db      *store.Store
	cfg     Config
	client  *http.Client
	log     *slog.Logger
	tracer  trace.Tracer
	metrics *metrics

	slots chan struct{} // one per try in flight
	freed chan struct{} // a try ended: the loop may take another
	mu    sync.Mutex
	busy  map[string]int // tenant → its tries in flight
	wg    sync.WaitGroup

	tried *testsignal.Signal // fired after each try is recorded (tests)
	names []byte             // the key of the opaque worker names (runOnce); set before the first try
}

// New returns a Drainer of cfg's queues in db.
func New(db *store.Store, cfg Config) (*Drainer, error) {
	if db == nil {
		return nil, errors.New("webhook: nil store")
	}
	if len(cfg.Queues) == 0 {
		return nil, errors.New("webhook: Config.Queues is empty")
	}
	if cfg.Timeout < 0 || cfg.Backoff < 0 || cfg.MaxBackoff < 0 || cfg.Window < 0 || cfg.Concurrency < 0 || cfg.PerTenant < 0 || cfg.Poll < 0 {
		return nil, errors.New("webhook: a negative Config value")
	}
	cfg.Timeout = cmp.Or(cfg.Timeout, 10*time.Second)
	cfg.Backoff = cmp.Or(cfg.Backoff, 5*time.Second)
	cfg.MaxBackoff = cmp.Or(cfg.MaxBackoff, time.Hour)
	cfg.Window = cmp.Or(cfg.Window, 24*time.Hour)
	cfg.Concurrency = cmp.Or(cfg.Concurrency, 16)
	cfg.PerTenant = cmp.Or(cfg.PerTenant, 4)
	cfg.Poll = cmp.Or(cfg.Poll, 250*time.Millisecond)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = otel.GetMeterProvider()
	}
	d := &Drainer{
		db: db, cfg: cfg, log: cfg.Logger, tracer: telemetry.Tracer(cfg.TracerProvider),
		// A redirect is an answer, not followed: it could lead a signed
		// delivery to a URL the allow-list never checked.
		client: &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		slots:  make(chan struct{}, cfg.Concurrency),
		freed:  make(chan struct{}, 1),
		busy:   map[string]int{},
	}
	var err error
	if d.metrics, err = newMetrics(cfg.MeterProvider, d); err != nil {
		return nil, err
	}
	return d, nil
}

// hold is how long a delivery taken to try stays out of the outbox: past
// the try's timeout, so that only a drainer that died (or stalled) lets
// another try it again.
func (d *Drainer) hold() time.Duration { return 2*d.cfg.Timeout + time.Second }

// Run drains until ctx is done, then waits for the tries in flight (each
// bounded by Timeout) and returns nil.
func (d *Drainer) Run(ctx context.Context) error {
	defer d.wg.Wait()
	idle := time.NewTimer(0)
	defer idle.Stop()
	for {
		n, err := d.runOnce(ctx)
		if err != nil && ctx.Err() == nil {
			d.log.WarnContext(ctx, "webhook: drain", "err", err)
		}
		if n > 0 {
			continue // there may be more due
		}
		idle.Reset(d.cfg.Poll)
		select {
		case <-ctx.Done():
			return nil
		case <-d.freed:
		case <-idle.C:
		}
	}
}

// runOnce takes as many due deliveries as it has room for and starts a
// try of each; it returns how many it started.
func (d *Drainer) runOnce(ctx context.Context) (int, error) {
	if d.names == nil {
		// The key of the opaque worker names that delivered job objects
		// carry: a tenant sees no host names in a webhook's body, as in
		// the API's answers. (Not the API's key, which is made of API keys
		// that workers do not have: a worker's name in a webhook body is
		// stable, but not the one the API shows.)
		names, err := d.db.WebhookNames(ctx)
		if err != nil {
			return 0, fmt.Errorf("webhook: %w", err)
		}
		d.names = names
	}
	started := 0
	var errs []error
	for _, q := range d.cfg.Queues {
		free := cap(d.slots) - len(d.slots) // only this loop takes slots
		if free == 0 {
			break
		}
		n, err := d.drainQueue(ctx, q, free)
		started += n
		errs = append(errs, err)
	}
	return started, errors.Join(errs...)
}

// deferFor is how long a delivery is put back when the due deliveries
// read at once are all of tenants with PerTenant tries in flight.
const deferFor = time.Second

// drainQueue starts up to free tries of queue q's due deliveries, from
// the first due, skipping those whose tenant has PerTenant tries in
// flight. When every delivery it read is skipped so, it defers them for a
// while (deferFor), untried, so that one tenant's backlog at the head of
// the outbox does not keep other tenants' deliveries behind it waiting.
func (d *Drainer) drainQueue(ctx context.Context, q string, free int) (int, error) {
	// The take checks due times again on the Redis clock.
	window := max(4*free, 64)
	members, err := d.db.DueWebhooks(ctx, q, window)
	if err != nil || len(members) == 0 {
		return 0, err
	}
	d.mu.Lock()
	chosen := map[string]int{}
	var tried, skipped []string
	for _, m := range members {
		if free == 0 {
			break
		}
		tenant, _, _ := strings.Cut(m, "/")
		if d.busy[tenant]+chosen[tenant] >= d.cfg.PerTenant {
			skipped = append(skipped, m)
			continue
		}
		chosen[tenant]++
		free--
		tried = append(tried, m)
	}
	d.mu.Unlock()
	if len(tried) > 0 || len(members) < window {
		skipped = nil // the head moves on by itself
	}
	taken, err := d.db.TakeWebhooks(ctx, store.TakeWebhooksParams{Queue: q, Try: tried, Defer: skipped,
		Hold: d.hold(), DeferFor: deferFor})
	if err != nil {
		return 0, fmt.Errorf("webhook: %w", err)
	}
	started := 0
	for _, t := range taken {
		j, err := store.ParseRecord(q, t.JobID, t.Record)
		if err != nil || j.Webhook == nil {
			d.log.ErrorContext(ctx, "webhook: a delivery's job record is unreadable", "queue", q, "member", t.Member, "err", err)
			continue
		}
		d.slots <- struct{}{}
		d.mu.Lock()
		d.busy[j.Tenant]++
		d.mu.Unlock()
		d.wg.Add(1)
		started++
		// A try runs to its end (Timeout bounds it) when Run stops: cut
		// short, it would count as failed what the receiver may have done.
		go d.try(context.WithoutCancel(ctx), q, t.Member, j)
	}
	return started, nil
}

// try makes one try of j's delivery and records it.
func (d *Drainer) try(ctx context.Context, q, member string, j job.Job) {
	defer func() {
		d.mu.Lock()
		if d.busy[j.Tenant]--; d.busy[j.Tenant] == 0 {
			delete(d.busy, j.Tenant)
		}
		d.mu.Unlock()
		<-d.slots
		select {
		case d.freed <- struct{}{}:
		default:
		}
		d.wg.Done()
	}()
	w := j.Webhook
	parent := trace.ContextWithRemoteSpanContext(ctx, j.Trace)
	ctx, span := d.tracer.Start(parent, "webhook "+q, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(telemetry.JobID.String(j.ID), telemetry.Queue.String(q), telemetry.Tenant.String(j.Tenant),
			telemetry.State.String(string(j.State)), telemetry.Attempt.Int(w.Attempts+1), WebhookID.String(w.ID),
			semconv.HTTPRequestMethodPost, semconv.URLFull(w.URL)))
	defer span.End()

	at := time.Now()
	status, err := d.call(ctx, j)
	t := job.WebhookTry{At: at, Status: status}
	state, backoff := job.WebhookDelivered, time.Duration(0)
	if status != 0 {
		span.SetAttributes(semconv.HTTPResponseStatusCode(status))
	}
	if err != nil {
		t.Error = err.Error()
		span.SetStatus(codes.Error, t.Error)
		state, backoff = d.next(j, at)
	}
	tryJSON, _ := json.Marshal(t) // a struct of a time, an int and a string always marshals
	// The try happened: it is recorded even when the drainer is stopping.
	rctx, stop := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer stop()
	attempts, rerr := d.db.RecordWebhookTry(rctx, store.WebhookTry{Queue: q, Member: member, JobID: j.ID, WebhookID: w.ID,
		State: string(state), Backoff: backoff, Try: tryJSON, Keep: keptTries})
	switch {
	case rerr != nil:
		// Not recorded: the delivery is tried again when its hold ends.
		d.log.WarnContext(ctx, "webhook: record a try", "job_id", j.ID, "webhook_id", w.ID, "err", rerr)
	case attempts > 0:
		d.metrics.outcome(ctx, state, err == nil)
		d.log.DebugContext(ctx, "webhook: tried", "job_id", j.ID, "webhook_id", w.ID, "attempts", attempts, "status", status, "state", state)
	}
	d.tried.Fire()
}

// next is the state of j's delivery after a failed try at at, and the
// wait before the next try: pending with a backoff, until Window has
// passed since its first try (one last try comes at its end), then failed.
func (d *Drainer) next(j job.Job, at time.Time) (job.WebhookState, time.Duration) {
	first := at
	if j.Webhook.FirstTry != nil {
		first = *j.Webhook.FirstTry
	}
	left := d.cfg.Window - at.Sub(first)
	if left <= 0 {
		return job.WebhookFailed, 0
	}
	wait := d.cfg.MaxBackoff
	if n := j.Webhook.Attempts; n < 40 {
		wait = min(d.cfg.Backoff<<n, d.cfg.MaxBackoff)
	}
	wait = wait/2 + rand.N(wait/2+1)
	return job.WebhookPending, min(wait, left)
}

// errConnection is a try's error when no HTTP answer came back.
var errConnection = errors.New("connection failed")

// call POSTs j, as the API shows it to its tenant, to its webhook, and
// returns the answer's status (0 for none) and nil for a 2xx, else why
// the try failed.
func (d *Drainer) call(ctx context.Context, j job.Job) (int, error) {
	if err := d.cfg.Policy.Check(j.Tenant, j.Webhook.URL); err != nil {
		return 0, err
	}
	body, err := json.Marshal(j.WithOpaqueWorker(d.names))
	if err != nil {
		return 0, err
	}
	ctx, stop := context.WithTimeout(ctx, d.cfg.Timeout)
	defer stop()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, j.Webhook.URL, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	now := time.Now()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "leasehold-webhook")
	req.Header.Set("webhook-id", j.Webhook.ID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	req.Header.Set("webhook-signature", Sign(d.cfg.Policy.Secrets[j.Tenant], j.Webhook.ID, now, body))
	resp, err := d.client.Do(req)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return 0, fmt.Errorf("no answer within %s", d.cfg.Timeout)
		}
		// The tenant reads a try's error: a transport error can quote
		// what the far end sent (a banner, an internal host's name), so
		// it goes to the log only.
		d.log.WarnContext(ctx, "webhook: try failed", "job_id", j.ID, "webhook_id", j.Webhook.ID, "err", err)
		return 0, errConnection
	}
	defer resp.Body.Close()
	// Read (a bounded part of) the answer, so the connection is reused.
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswer))
	switch {
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		// The code only: the reason phrase is the far end's text.
		return resp.StatusCode, fmt.Errorf("answered HTTP %d", resp.StatusCode)
	case err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return resp.StatusCode, fmt.Errorf("the answer did not end within %s", d.cfg.Timeout)
	}
	return resp.StatusCode, nil
}
