package execution_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// TestWorkerMetricsSeeAWorkload runs a small real workload through one
// worker on a Redis and a NATS of the test's own — jobs that succeed, one
// retried, one timed out, one cancelled by NATS, one by the flag while
// NATS is down, one whose killed worker's lease is reaped, one whose worker
// was cut off from Redis and whose stale writes are refused, one handed
// off at shutdown — and checks that every worker metric saw it.
func TestWorkerMetricsSeeAWorkload(t *testing.T) {
	t.Parallel()
	rs := testenv.StartRedis(t)
	ns := testenv.StartNATS(t)
	f := newFixtureOn(t, rs.Client(t), ns.Conn(t))
	// Keys are labelled by their limits: model:m and model:h have one.
	for _, key := range []string{"model:m", "model:h"} {
		if err := f.store.SetLimit(t.Context(), key, 100); err != nil {
			t.Fatal(err)
		}
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })

	// A worker holding a job is killed: its lease expires for ours to reap.
	helper := testenv.StartHelper(t, "worker", envPrefix+"="+f.prefix, envSubject+"="+f.subject, envMode+"=block",
		envRedis+"="+rs.Addr(), envLeaseTTL+"=500ms", envHeartbeat+"=50ms")
	killed := f.submit(t, job.Submission{Kind: faultKind})
	helper.Line(t, "started "+killed.ID, 10*time.Second)
	helper.Kill(t)

	started := make(chan string, 16)
	lostOnce := make(chan struct{})   // the stubborn attempt has lost its lease
	writeStale := make(chan struct{}) // the stubborn attempt may write now
	staleDone := make(chan error, 1)  // its emit's error
	blockStarted := func(ctx context.Context, e *execution.Execution) (any, error) {
		started <- e.JobID
		<-ctx.Done()
		return nil, context.Cause(ctx)
	}
	_, stopWorker := f.startWorker(t, execution.Config{
		MeterProvider: mp,
		// Heartbeats far apart, so the NATS message wins the NATS cancel.
		Heartbeat: 200 * time.Millisecond,
		LeaseTTL:  time.Second,
	}, map[string]execution.Handler{
		faultKind: echo,
		"echo":    echo,
		"flaky": func(_ context.Context, e *execution.Execution) (any, error) {
			if e.Attempt() == 1 {
				return nil, errBoom
			}
			return "ok", nil
		},
		"block": blockStarted,
		"wait": func(context.Context, *execution.Execution) (any, error) {
			return nil, execution.Wait("approval", time.Hour)
		},
		// stubborn's first attempt outlives its lease and then writes.
		"stubborn": func(ctx context.Context, e *execution.Execution) (any, error) {
			if e.Attempt() > 1 {
				return "second", nil
			}
			started <- e.JobID
			<-ctx.Done()
			close(lostOnce)
			select {
			case <-writeStale:
			case <-t.Context().Done(): // the test failed: let the worker stop
				return nil, errBoom
			}
			staleDone <- e.Emit(context.Background(), execution.EventLog, "stale")
			return "first", nil
		},
	})
	wait := func(id string, states ...job.State) job.Job { return f.waitState(t, id, 20*time.Second, states...) }
	waitStarted := func(id string) {
		t.Helper()
		select {
		case got := <-started:
			if got != id {
				t.Fatalf("job %s started, want %s", got, id)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("job %s never started", id)
		}
	}

	if j := wait(killed.ID, job.StateSucceeded); j.Attempt != 2 {
		t.Fatalf("killed worker's job succeeded on attempt %d, want 2", j.Attempt)
	}
	for range 3 {
		wait(f.submit(t, job.Submission{Kind: "echo"}).ID, job.StateSucceeded)
	}
	wait(f.submit(t, job.Submission{Kind: "wait"}).ID, job.StateWaiting)
	if j := wait(f.submit(t, job.Submission{Kind: "flaky", MaxAttempts: 2}).ID, job.StateSucceeded); j.Attempt != 2 {
		t.Fatalf("flaky job succeeded on attempt %d, want 2", j.Attempt)
	}

	timedOut := f.submit(t, job.Submission{Kind: "block", MaxAttempts: 1, Timeout: job.Duration(100 * time.Millisecond)})
	waitStarted(timedOut.ID)
	wait(timedOut.ID, job.StateFailed)

	// Cancelled by NATS, while it holds a concurrency key. The job's state,
	// which heartbeats read, is written too (a flag alone cancels nothing);
	// on a loaded machine a heartbeat or the watcher's poll of the flag may
	// come first: cancel another job until NATS is the one that told.
	cancels := 0
	for cancelledBy(t, reader, "nats") == 0 {
		if cancels == 5 {
			t.Fatal("5 cancels, none told by NATS")
		}
		j := f.submit(t, job.Submission{Kind: "block", ConcurrencyKeys: []string{"model:m"}})
		waitStarted(j.ID)
		if cancels == 0 {
			// Running past a heartbeat, it has its lease renewed.
			testenv.Eventually(t, 10*time.Second, func() bool {
				_, ok := find(collect(t, reader), "leasehold.worker.heartbeat.lag").(metricdata.Histogram[float64])
				return ok
			}, "no heartbeat renewed a running job's lease")
			if n := gaugeValue(t, collect(t, reader), "leasehold.worker.executions.in_flight", attribute.String("key", "model:m")); n != 1 {
				t.Fatalf("in flight on model:m = %v, want 1", n)
			}
			// The one running execution of the default 32.
			if u := gaugeValue(t, collect(t, reader), "leasehold.worker.utilization"); u != 1.0/32 {
				t.Fatalf("utilization %v, want 1/32", u)
			}
		}
		f.cancelJob(t, j.ID)
		wait(j.ID, job.StateCancelled)
		cancels++
		testenv.Eventually(t, 10*time.Second, func() bool {
			return cancelledBy(t, reader, "nats")+cancelledBy(t, reader, "flag") == uint64(cancels)
		}, "cancel %d was never measured", cancels)
	}

	// Cancelled by the flag, NATS down.
	ns.Stop(t)
	viaFlag := f.submit(t, job.Submission{Kind: "block"})
	waitStarted(viaFlag.ID)
	f.cancelJob(t, viaFlag.ID)
	wait(viaFlag.ID, job.StateCancelled)
	ns.Start(t)

	// Cut off from Redis past its lease: after Redis is back the lease is
	// reaped, the job runs again, and the first attempt's writes are refused.
	stubborn := f.submit(t, job.Submission{Kind: "stubborn", MaxAttempts: 2})
	waitStarted(stubborn.ID)
	cutAt := time.Now()
	rs.Kill(t)
	select {
	case <-lostOnce:
	case <-time.After(20 * time.Second):
		t.Fatal("the stubborn execution never lost its lease")
	}
	// Every renewal ran before the kill, so the lease ends a TTL after it at
	// the latest: Redis stays down past that, or a heartbeat could renew the
	// lease when it is back.
	time.Sleep(time.Until(cutAt.Add(time.Second + 10*time.Millisecond)))
	rs.Restart(t)
	wait(stubborn.ID, job.StateSucceeded)
	close(writeStale)
	if err := <-staleDone; !errors.Is(err, execution.ErrNotOwner) {
		t.Fatalf("stale emit: %v, want ErrNotOwner", err)
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		return counterValue(collect(t, reader), "leasehold.worker.writes.refused", attribute.String("write", "finish")) == 1
	}, "the stale finish was never counted as refused")

	// Handed off at shutdown: it is ready again, at the head of the queue.
	handed := f.submit(t, job.Submission{Kind: "block", ConcurrencyKeys: []string{"model:h"}})
	waitStarted(handed.ID)
	stopWorker()
	if j := f.get(t, handed.ID); j.State != job.StateQueued || j.Attempt != 1 {
		t.Fatalf("handed-off job is %s on attempt %d, want queued on 1, unspent", j.State, j.Attempt)
	}

	end := collect(t, reader)
	queue := attribute.String("queue", job.DefaultQueue)
	for outcome, want := range map[string]int64{"succeeded": 6, "failed": 1, "timed_out": 1, "cancelled": int64(cancels) + 1} {
		if got := counterValue(end, "leasehold.worker.executions", queue, attribute.String("outcome", outcome)); got != want {
			t.Errorf("executions with outcome %s: %d, want %d", outcome, got, want)
		}
	}
	// A claim slower than the TTL (one sent as Redis came back) hands its
	// job back unrun, too.
	if got := counterValue(end, "leasehold.worker.executions", queue, attribute.String("outcome", "waiting")); got != 1 {
		t.Errorf("executions with outcome waiting: %d, want 1", got)
	}
	if got := counterValue(end, "leasehold.worker.executions", queue, attribute.String("outcome", "handed_off")); got < 1 {
		t.Errorf("executions with outcome handed_off: %d, want at least 1", got)
	}
	// The reaper and a claim racing for one expired lease may both count it.
	if n := counterValue(end, "leasehold.worker.leases.reaped", queue); n < 2 || n > 4 {
		t.Errorf("leases reaped: %d, want 2 (the killed worker's, the cut-off one's)", n)
	}
	if n := counterValue(end, "leasehold.worker.writes.refused", queue, attribute.String("write", "emit")); n != 1 {
		t.Errorf("refused emits: %d, want 1", n)
	}
	if n := gaugeValue(t, end, "leasehold.queue.depth", queue); n != 1 {
		t.Errorf("queue depth %v, want 1 (the handed-off job)", n)
	}
	if n := gaugeValue(t, end, "leasehold.queue.key.waiting", queue, attribute.String("key", "model:h")); n != 1 {
		t.Errorf("jobs waiting on model:h %v, want 1 (the handed-off job)", n)
	}
	// The handed-off job has waited since the hand-off: its age, read at
	// each collection, grows past 0 (Redis's clock is in ms).
	testenv.Eventually(t, 5*time.Second, func() bool {
		age := gaugeValue(t, collect(t, reader), "leasehold.queue.oldest.age", queue)
		return age > 0 && age < 60
	}, "the handed-off job's age never read between 0 and 60s")
	if h := histogram(t, end, "leasehold.worker.claim.duration", queue); h.Count < 8 || maxOf(h) > 5 {
		t.Errorf("claims: %d, the longest %vs; want at least one per job, none stuck", h.Count, maxOf(h))
	}
	// The heartbeat lag is about the heartbeat interval; the stubborn
	// execution's renewals stopped at the outage, so none reached the TTL.
	if h := histogram(t, end, "leasehold.worker.heartbeat.lag", queue); h.Count == 0 || maxOf(h) >= 1 {
		t.Errorf("heartbeat lag: %d samples, the longest %vs; want some, under the TTL", h.Count, maxOf(h))
	}
	// One by the flag (NATS down); the others by NATS but for any the
	// watcher's poll got to first.
	var observed, finished uint64
	for _, path := range []string{"nats", "flag"} {
		p := attribute.String("path", path)
		observe := histogram(t, end, "leasehold.worker.cancel.observe.duration", p)
		finish := histogram(t, end, "leasehold.worker.cancel.finish.duration", p)
		observed, finished = observed+observe.Count, finished+finish.Count
		// By NATS in milliseconds; by the flag within a heartbeat or a poll.
		mean, meanFinish := observe.Sum/float64(observe.Count), finish.Sum/float64(finish.Count)
		if observe.Count == 0 || mean < 0 || mean > 2 || meanFinish < mean || meanFinish > 5 {
			t.Errorf("cancels by %s: %d, observed after %vs on average, finished after %vs", path, observe.Count, mean, meanFinish)
		}
	}
	if want := uint64(cancels) + 1; observed != want || finished != want {
		t.Errorf("cancels measured: %d observed, %d finished, want %d", observed, finished, want)
	}
}

// cancelledBy counts the cancels told by path, so far.
func cancelledBy(t *testing.T, r *sdkmetric.ManualReader, path string) uint64 {
	h, ok := find(collect(t, r), "leasehold.worker.cancel.observe.duration").(metricdata.Histogram[float64])
	if !ok {
		return 0
	}
	var n uint64
	for _, p := range h.DataPoints {
		if has(p.Attributes, []attribute.KeyValue{attribute.String("path", path)}) {
			n += p.Count
		}
	}
	return n
}

func maxOf(h metricdata.HistogramDataPoint[float64]) float64 {
	v, _ := h.Max.Value()
	return v
}

func collect(t *testing.T, r *sdkmetric.ManualReader) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	return rm
}

// find returns the data of the metric called name.
func find(rm metricdata.ResourceMetrics, name string) metricdata.Aggregation {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m.Data
			}
		}
	}
	return nil
}

// has says whether set holds every one of attrs.
func has(set attribute.Set, attrs []attribute.KeyValue) bool {
	for _, kv := range attrs {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// counterValue sums the points of counter name that carry attrs.
func counterValue(rm metricdata.ResourceMetrics, name string, attrs ...attribute.KeyValue) int64 {
	sum, _ := find(rm, name).(metricdata.Sum[int64])
	var n int64
	for _, p := range sum.DataPoints {
		if has(p.Attributes, attrs) {
			n += p.Value
		}
	}
	return n
}

// gaugeValue is the value of gauge name at the one point carrying attrs.
func gaugeValue(t *testing.T, rm metricdata.ResourceMetrics, name string, attrs ...attribute.KeyValue) float64 {
	t.Helper()
	switch g := find(rm, name).(type) {
	case metricdata.Gauge[int64]:
		for _, p := range g.DataPoints {
			if has(p.Attributes, attrs) {
				return float64(p.Value)
			}
		}
	case metricdata.Gauge[float64]:
		for _, p := range g.DataPoints {
			if has(p.Attributes, attrs) {
				return p.Value
			}
		}
	}
	t.Fatalf("no point of %s with %v", name, attrs)
	return 0
}

// histogram merges the points of histogram name that carry attrs.
func histogram(t *testing.T, rm metricdata.ResourceMetrics, name string, attrs ...attribute.KeyValue) metricdata.HistogramDataPoint[float64] {
	t.Helper()
	h, ok := find(rm, name).(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("no histogram %s", name)
	}
	var out metricdata.HistogramDataPoint[float64]
	for _, p := range h.DataPoints {
		if !has(p.Attributes, attrs) {
			continue
		}
		out.Count += p.Count
		out.Sum += p.Sum
		if v, ok := p.Max.Value(); ok {
			if m, had := out.Max.Value(); !had || v > m {
				out.Max = metricdata.NewExtrema(v)
			}
		}
	}
	return out
}

// failingMeter fails to create the instruments it names, as an SDK refusing
// an instrument would.
type failingMeter struct {
	noop.Meter
	names map[string]bool
}

var errInstrument = errors.New("instrument refused")

func (m failingMeter) Int64Counter(name string, opts ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	if m.names[name] {
		return nil, errInstrument
	}
	return m.Meter.Int64Counter(name, opts...)
}

type failingMeterProvider struct {
	noop.MeterProvider
	meter failingMeter
}

func (p failingMeterProvider) Meter(string, ...metric.MeterOption) metric.Meter { return p.meter }

// TestNewWorkerReportsEveryInstrumentError checks that a worker whose meter
// refuses any one of its counters is not built, whichever counter it is.
func TestNewWorkerReportsEveryInstrumentError(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t).Client(t)
	for _, name := range []string{"leasehold.worker.executions", "leasehold.worker.settlements", "leasehold.worker.tokens"} {
		mp := failingMeterProvider{meter: failingMeter{names: map[string]bool{name: true}}}
		_, err := execution.NewWorker(rdb, execution.Config{Prefix: testenv.Prefix(t), MeterProvider: mp})
		if !errors.Is(err, errInstrument) {
			t.Errorf("meter refusing %s: NewWorker error %v, want %v", name, err, errInstrument)
		}
	}
}
