package webhook_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/webhook"
)

// The drainer's metrics, in the Prometheus form the processes serve:
// tries by outcome, and the outbox's deliveries and the age of its oldest
// due one.
func TestMetricsCountOutcomesAndTheOutbox(t *testing.T) {
	t.Parallel()
	fx := newFixture(t)
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		t.Fatal(err)
	}
	scrape := func() string {
		rec := httptest.NewRecorder()
		promhttp.HandlerFor(registry, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		return rec.Body.String()
	}
	ok := newReceiver(t, status(http.StatusOK))
	down := newReceiver(t, status(http.StatusInternalServerError))
	fx.worker(t, execution.Config{})
	a := fx.submit(t, "acme", withWebhook("ok", ok.URL))
	b := fx.submit(t, "acme", withWebhook("ok", down.URL))
	for _, id := range []string{a.ID, b.ID} {
		testenv.Eventually(t, 10*time.Second, func() bool { return fx.get(t, id).State.Terminal() }, "job never ended")
	}
	cfg := fx.cfg
	cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	cfg.Backoff, cfg.MaxBackoff = time.Hour, time.Hour // the failing one stays in the outbox
	d, err := webhook.New(fx.db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Before it drains, both deliveries are due, and have been for a while.
	testenv.Eventually(t, 5*time.Second, func() bool {
		text := scrape()
		return strings.Contains(text, `queue="default"} 2`) && !strings.Contains(text, `leasehold_webhook_outbox_age_seconds{otel_scope_name="github.com/leasehold/leasehold/webhook",otel_scope_schema_url="",otel_scope_version="",queue="default"} 0`)
	}, "the outbox gauges never showed two due deliveries: %s", grep(scrape(), "leasehold_webhook"))
	ctx, stop := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = d.Run(ctx) }()
	defer func() { stop(); <-stopped }()
	fx.waitWebhook(t, a.ID, job.WebhookDelivered)
	testenv.Eventually(t, 10*time.Second, func() bool { return fx.get(t, b.ID).Webhook.Attempts == 1 }, "the failing one was never tried")
	// A try is counted just after its record is written, which the waits
	// above see: the counts may come a moment later.
	wants := []string{
		`leasehold_webhook_deliveries_total{otel_scope_name="github.com/leasehold/leasehold/webhook",otel_scope_schema_url="",otel_scope_version="",outcome="delivered"} 1`,
		`leasehold_webhook_deliveries_total{otel_scope_name="github.com/leasehold/leasehold/webhook",otel_scope_schema_url="",otel_scope_version="",outcome="retried"} 1`,
		`leasehold_webhook_outbox_deliveries{otel_scope_name="github.com/leasehold/leasehold/webhook",otel_scope_schema_url="",otel_scope_version="",queue="default"} 1`,
		`leasehold_webhook_outbox_age_seconds{otel_scope_name="github.com/leasehold/leasehold/webhook",otel_scope_schema_url="",otel_scope_version="",queue="default"} 0`,
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		text := scrape()
		for _, want := range wants {
			if !strings.Contains(text, want) {
				return false
			}
		}
		return true
	}, "the metrics never showed %q: %s", wants, lazyGrep(scrape))
}

// lazyGrep is the drainer's lines of scrape's text, scraped when printed.
type lazyGrep func() string

func (l lazyGrep) String() string { return grep(l(), "leasehold_webhook") }

func grep(text, s string) string {
	var out []string
	for line := range strings.Lines(text) {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "")
}
