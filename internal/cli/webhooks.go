package cli

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"

	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/kinds"
	"github.com/leasehold/leasehold/webhook"
)

// WebhookFlags are the webhook settings every process takes: the API
// checks a submission's webhook against them, and every process drains
// the outboxes of its queues with them.
type WebhookFlags struct {
	allow, secrets *string
	timeout        *time.Duration
}

// Webhooks defines the webhook flags.
func (f *Flags) Webhooks() WebhookFlags {
	return WebhookFlags{
		allow: f.String("webhook-allow", "LEASEHOLD_WEBHOOK_ALLOW", "",
			"comma-separated URL prefixes a job's webhook.url may start with (same rule as --notify-allow); default none: every webhook is refused"),
		secrets: f.Secret("webhook-secrets", "LEASEHOLD_WEBHOOK_SECRETS",
			"comma-separated tenant:whsec_<base64> pairs that sign each tenant's webhooks; a tenant named twice signs with both (rotation); a tenant with none may have no webhook"),
		timeout: f.Duration("webhook-timeout", "LEASEHOLD_WEBHOOK_TIMEOUT", 10*time.Second,
			"how long one webhook try waits for its answer"),
	}
}

// Policy reads the flags' allow-list and secrets; loopback also allows
// every loopback URL (the dev mode's setting).
func (w WebhookFlags) Policy(loopback bool) (webhook.Policy, error) {
	allow, err := kinds.ParseNotifyAllow(*w.allow)
	if err != nil {
		return webhook.Policy{}, fmt.Errorf("LEASEHOLD_WEBHOOK_ALLOW (--webhook-allow): %w", err)
	}
	allow.Loopback = loopback
	secrets, err := webhook.ParseSecrets(*w.secrets)
	if err != nil {
		return webhook.Policy{}, fmt.Errorf("LEASEHOLD_WEBHOOK_SECRETS (--webhook-secrets): %w", err)
	}
	return webhook.Policy{Allow: allow, Secrets: secrets}, nil
}

// Drainer returns the run.Group actor that delivers the webhooks of
// queues' jobs (webhook.Drainer) until the group stops. Every API, worker
// and dev process runs one: any of them may die, and the others deliver.
// A process given no secrets delivers none: it could sign nothing, and
// would spend the deliveries' tries that the processes with them can make.
func (w WebhookFlags) Drainer(ctx context.Context, rdb redis.UniversalClient, prefix string, queues []string, policy webhook.Policy, meters metric.MeterProvider, log *slog.Logger) (func() error, func(error), error) {
	if len(policy.Secrets) == 0 {
		ctx, stop := context.WithCancel(ctx)
		return func() error { <-ctx.Done(); return nil }, func(error) { stop() }, nil
	}
	d, err := webhook.New(store.New(rdb, store.Config{Prefix: prefix}), webhook.Config{Queues: queues, Policy: policy, Timeout: *w.timeout, Logger: log, MeterProvider: meters})
	if err != nil {
		return nil, nil, err
	}
	ctx, stop := context.WithCancel(ctx)
	return func() error { return d.Run(ctx) }, func(error) { stop() }, nil
}
