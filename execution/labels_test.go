package execution_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/job"
)

// A tenant's 1,000 keys of its own and 1,000 models add no series to the
// worker's key metrics: each key is labelled by the limit that applies to
// it ("model:*", "model:busy") or "other", and a job counts once per label.
//
// Fails when a metric is labelled by the concurrency key itself (a series
// per key a tenant makes up), or a job is counted once per key of a label.
func TestKeyLabelsAreTheConfiguredLimits(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	for key, n := range map[string]int64{"model:*": 0, "model:busy": 50} { // model:* runs nothing
		if err := f.store.SetLimit(ctx, key, n); err != nil {
			t.Fatal(err)
		}
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	const running, waiting = 20, 1000
	started := make(chan struct{}, running)
	f.startWorker(t, execution.Config{MeterProvider: mp, Concurrency: running}, map[string]execution.Handler{
		"block": func(ctx context.Context, _ *execution.Execution) (any, error) {
			started <- struct{}{}
			<-ctx.Done()
			return nil, context.Cause(ctx)
		},
	})
	for i := range running {
		f.submit(t, job.Submission{Kind: "block", ConcurrencyKeys: []string{fmt.Sprintf("tenant:acme:run%d", i), "model:busy"}})
	}
	for range running {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("the running jobs did not all start")
		}
	}
	items := make([]job.BatchItem, waiting)
	for i := range items {
		items[i].Submission = job.Submission{Kind: "block", ConcurrencyKeys: []string{fmt.Sprintf("tenant:acme:%d", i), fmt.Sprintf("model:m%d", i)}}
	}
	if _, err := f.store.SubmitBatch(ctx, "acme", items, job.Cap{}); err != nil {
		t.Fatal(err)
	}

	queue := attribute.String("queue", job.DefaultQueue)
	want := map[string]map[string]int64{
		"leasehold.worker.executions.in_flight": {"other": running, "model:busy": running},
		"leasehold.queue.key.waiting":           {"other": waiting, "model:*": waiting},
	}
	// The gauges are read at each collection: the first after every job
	// is in place reads them all.
	var got map[string]map[string]int64
	for deadline := time.Now().Add(10 * time.Second); fmt.Sprint(got) != fmt.Sprint(want); { // maps print sorted
		if time.Now().After(deadline) {
			t.Fatalf("series in flight %d, waiting %d; want %v", len(got["leasehold.worker.executions.in_flight"]),
				len(got["leasehold.queue.key.waiting"]), want)
		}
		got = keySeries(collect(t, reader), queue, want)
	}
}

// keySeries reads the value of each key label of the gauges in names, of
// queue when they have a queue label.
func keySeries[V any](rm metricdata.ResourceMetrics, queue attribute.KeyValue, names map[string]V) map[string]map[string]int64 {
	got := map[string]map[string]int64{}
	for name := range names {
		got[name] = map[string]int64{}
		g, _ := find(rm, name).(metricdata.Gauge[int64])
		for _, p := range g.DataPoints {
			if _, queued := p.Attributes.Value("queue"); queued && !has(p.Attributes, []attribute.KeyValue{queue}) {
				continue
			}
			key, _ := p.Attributes.Value("key")
			got[name][key.AsString()] = p.Value
		}
	}
	return got
}
