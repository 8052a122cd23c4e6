package webhook_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/webhook"
)

// BenchmarkDeliveries delivers 2,000 ended jobs' webhooks to a local
// receiver that answers 204 at once, with 4, 16 or 64 tries in flight
// (over 16 tenants, each allowed a quarter of them): deliveries/s,
// each one a take, a signed POST and a record.
func BenchmarkDeliveries(b *testing.B) {
	const n, tenants = 2000, 16
	for _, concurrency := range []int{4, 16, 64} {
		b.Run(fmt.Sprintf("concurrency=%d", concurrency), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				fx := newFixture(b)
				var got atomic.Int64
				done := make(chan struct{})
				rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					w.WriteHeader(http.StatusNoContent)
					if got.Add(1) == n {
						close(done)
					}
				}))
				url := rc.URL
				ctx := context.Background()
				for i := range n {
					tenant := fmt.Sprintf("t%d", i%tenants)
					fx.cfg.Policy.Secrets[tenant] = [][]byte{[]byte("0123456789abcdef")}
					j, _, err := fx.jobs.Submit(ctx, tenant, job.Submission{Kind: "noop", Webhook: &job.WebhookTarget{URL: url}}, "")
					if err != nil {
						b.Fatal(err)
					}
					// Cancelled while queued: an end, and a delivery, without a worker.
					if _, err := fx.jobs.Cancel(ctx, tenant, j.ID, false); err != nil {
						b.Fatal(err)
					}
				}
				cfg := fx.cfg
				cfg.Concurrency, cfg.PerTenant = concurrency, max(1, concurrency/4)
				d, err := webhook.New(fx.db, cfg)
				if err != nil {
					b.Fatal(err)
				}
				runCtx, stop := context.WithCancel(ctx)
				stopped := make(chan struct{})
				start := time.Now()
				b.StartTimer()
				go func() { defer close(stopped); _ = d.Run(runCtx) }()
				select {
				case <-done:
				case <-time.After(2 * time.Minute):
					b.Fatalf("%d of %d delivered", got.Load(), n)
				}
				elapsed := time.Since(start)
				b.StopTimer()
				stop()
				<-stopped
				rc.Close()
				b.ReportMetric(n/elapsed.Seconds(), "deliveries/s")
			}
		})
	}
}
