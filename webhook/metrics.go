package webhook

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/leasehold/leasehold/job"
)

// WebhookID is the span attribute of a try's delivery id (webhook-id).
const WebhookID = attribute.Key("leasehold.webhook.id")

const meterName = "github.com/leasehold/leasehold/webhook"

// metrics are the drainer's instruments. In Prometheus form:
//
//	leasehold_webhook_deliveries_total{outcome}      counter: tries recorded, by outcome: delivered (a 2xx), retried (tried again later), failed (given up: 24 h of failed tries)
//	leasehold_webhook_outbox_age_seconds{queue}      gauge: how long the oldest due delivery of the queue has been due (0: none is)
//	leasehold_webhook_outbox_deliveries{queue}       gauge: the queue's deliveries not yet delivered or failed
//
// The outbox gauges describe the queue, read from Redis at each
// collection: every drainer of a queue reports the same value (aggregate
// with max).
type metrics struct {
	deliveries metric.Int64Counter
	byOutcome  map[string][]metric.AddOption
}

func newMetrics(mp metric.MeterProvider, d *Drainer) (*metrics, error) {
	m := mp.Meter(meterName)
	in := &metrics{byOutcome: map[string][]metric.AddOption{}}
	for _, o := range []string{"delivered", "retried", "failed"} {
		in.byOutcome[o] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("outcome", o)))}
	}
	var err error
	if in.deliveries, err = m.Int64Counter("leasehold.webhook.deliveries", metric.WithUnit("{try}"),
		metric.WithDescription("Webhook tries recorded, by outcome: delivered (a 2xx answer), retried (to be tried again), failed (no 2xx for 24 h: given up).")); err != nil {
		return nil, err
	}
	age, err := m.Float64ObservableGauge("leasehold.webhook.outbox.age", metric.WithUnit("s"),
		metric.WithDescription("How long the oldest due delivery of the queue's webhook outbox has been due; 0 when none is."))
	if err != nil {
		return nil, err
	}
	pending, err := m.Int64ObservableGauge("leasehold.webhook.outbox.deliveries", metric.WithUnit("{delivery}"),
		metric.WithDescription("Deliveries in the queue's webhook outbox: not yet delivered or failed."))
	if err != nil {
		return nil, err
	}
	_, err = m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		outboxes, err := d.db.WebhookOutboxes(ctx, d.cfg.Queues)
		if err != nil {
			return err
		}
		now := time.Now()
		for i, q := range d.cfg.Queues {
			attrs := metric.WithAttributes(attribute.String("queue", q))
			oldest := 0.0
			if ob := outboxes[i]; !ob.Oldest.IsZero() {
				oldest = max(0, now.Sub(ob.Oldest).Seconds())
			}
			o.ObserveFloat64(age, oldest, attrs)
			o.ObserveInt64(pending, outboxes[i].Deliveries, attrs)
		}
		return nil
	}, age, pending)
	return in, err
}

// outcome counts a recorded try: delivered when ok, else retried or
// failed by the state it left its delivery in.
func (m *metrics) outcome(ctx context.Context, state job.WebhookState, ok bool) {
	o := "retried"
	switch {
	case ok:
		o = "delivered"
	case state == job.WebhookFailed:
		o = "failed"
	}
	m.deliveries.Add(ctx, 1, m.byOutcome[o]...)
}
