package execution

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/store/scripts"
	"github.com/leasehold/leasehold/job"
)

const meterName = "github.com/leasehold/leasehold/execution"

// Buckets, in seconds. A claim is two or three Redis round trips; a
// heartbeat lag is about the heartbeat interval (default 2s) and the lease
// is lost at the TTL (default 10s); a cancel takes milliseconds by NATS and
// up to a heartbeat by the flag, plus the handler's time to stop.
var (
	claimBuckets  = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}
	lagBuckets    = []float64{0.05, 0.1, 0.25, 0.5, 1, 1.5, 2, 2.5, 3, 4, 5, 7.5, 10, 15, 30}
	cancelBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
)

// metrics are the worker's instruments. In Prometheus form:
//
//	leasehold_queue_depth{queue}                                gauge: ready jobs, read from Redis at each collection
//	leasehold_queue_oldest_age_seconds{queue}                   gauge: how long the job the next claim takes has been ready
//	leasehold_queue_key_waiting{queue, key}                     gauge: ready jobs of the queue naming concurrency key key
//	leasehold_worker_executions_in_flight{key}                  gauge: this worker's running executions holding concurrency key key
//	leasehold_worker_utilization_ratio                          gauge: this worker's running executions / its Concurrency
//	leasehold_worker_claim_duration_seconds{queue}              histogram: one claim (peek + claim scripts), empty ones included
//	leasehold_worker_heartbeat_lag_seconds{queue}               histogram: age of a lease when a renewal of it succeeds
//	leasehold_worker_cancel_observe_duration_seconds{path}      histogram: cancel request -> the handler's context cancelled
//	leasehold_worker_cancel_finish_duration_seconds{path}       histogram: cancel request -> the job recorded cancelled
//	leasehold_worker_leases_reaped_total{queue, by}             counter: expired leases finalised, by "reaper" or "claim"
//	leasehold_worker_writes_refused_total{queue, write}         counter: finish or emit refused, the token not current
//	leasehold_worker_executions_total{queue, outcome}           counter: executions recorded, by outcome (handed_off: hand-offs)
//	leasehold_worker_expired_total{queue, key}                  counter: jobs a claim expired at max_wait, per concurrency key they named
//	leasehold_worker_settlements_total{key, outcome}            counter: executions' ends settled in a budgeted key (ok, pushback, other, failed)
//	leasehold_worker_tokens_total{key, kind}                    counter: tokens settled in a key's tpm budget: reserved (estimates), spent (actual usage)
//
// key is not the concurrency key itself but the limit or budget that
// applies to it (scripts.Label): the key, the wildcard that matched it
// ("model:*"), or "other" for a key nothing configures, so that the keys
// a tenant makes up add no series; a job or execution counts once per
// label, and a share key's settlements are its key's.
//
// The queue gauges describe the queue, not the worker: every worker of a
// queue reports the same value (aggregate with max). path is "nats" (the
// message) or "flag" (the state in Redis: the watcher's poll of the flag or
// the heartbeat's read of the job). The heartbeat lag is measured from the
// send of the previous successful renewal (or the claim) to the reply of
// this one: the lease, and the owner's trust, end a TTL after that send, so
// the lag reads directly against the TTL, and a renewal that failed shows
// as a longer lag rather than as no sample at all.
type metrics struct {
	rdb    redis.UniversalClient
	data   *store.Store
	limits *limits // the worker's: what labels a key
	// byQueue holds each queue's attribute sets, built once: a set built
	// at each recording costs allocations, for every execution.
	byQueue map[string]queueAttrs

	claim         metric.Float64Histogram
	lag           metric.Float64Histogram
	cancelObserve metric.Float64Histogram
	cancelFinish  metric.Float64Histogram
	reaped        metric.Int64Counter
	refused       metric.Int64Counter
	executions    metric.Int64Counter
	expired       metric.Int64Counter
	settlements   metric.Int64Counter
	tokens        metric.Int64Counter
}

// outcomes are the states an outcome may have.
var outcomes = []State{StateSucceeded, StateFailed, StateTimedOut, StateCancelled, StateHandedOff, StatePushback, StateWaiting}

// queueAttrs are a queue's measurement options, as the variadic arguments
// the instruments take, so that recording allocates nothing.
type queueAttrs struct {
	queue    []metric.RecordOption        // queue
	outcomes map[State][]metric.AddOption // queue, outcome; by outcome
}

func newQueueAttrs(queue string) queueAttrs {
	q := attribute.String("queue", queue)
	a := queueAttrs{
		queue:    []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(q))},
		outcomes: map[State][]metric.AddOption{},
	}
	for _, o := range outcomes {
		a.outcomes[o] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(q, attribute.String("outcome", string(o))))}
	}
	return a
}

func newMetrics(mp metric.MeterProvider, w *Worker) (*metrics, error) {
	m := mp.Meter(meterName)
	in := &metrics{rdb: w.rdb, data: store.New(w.rdb, store.Config{Prefix: w.cfg.Prefix}), limits: w.limits, byQueue: map[string]queueAttrs{}}
	for _, q := range w.cfg.Queues {
		in.byQueue[q] = newQueueAttrs(q)
	}
	var errs [15]error
	in.claim, errs[0] = m.Float64Histogram("leasehold.worker.claim.duration", metric.WithUnit("s"),
		metric.WithDescription("Time one claim takes (its peek and claim scripts), whether it claims anything or not."),
		metric.WithExplicitBucketBoundaries(claimBuckets...))
	in.lag, errs[1] = m.Float64Histogram("leasehold.worker.heartbeat.lag", metric.WithUnit("s"),
		metric.WithDescription("Age of a lease when a renewal of it succeeds: from the send of the previous successful renewal (or the claim) to this one's reply. The lease is lost at the lease TTL."),
		metric.WithExplicitBucketBoundaries(lagBuckets...))
	in.cancelObserve, errs[2] = m.Float64Histogram("leasehold.worker.cancel.observe.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from a cancel request to its execution's context being cancelled, by the path that told the worker (nats, flag)."),
		metric.WithExplicitBucketBoundaries(cancelBuckets...))
	in.cancelFinish, errs[3] = m.Float64Histogram("leasehold.worker.cancel.finish.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from a cancel request to the job being recorded cancelled by its worker, by the path that told the worker (nats, flag)."),
		metric.WithExplicitBucketBoundaries(cancelBuckets...))
	in.reaped, errs[4] = m.Int64Counter("leasehold.worker.leases.reaped", metric.WithUnit("{lease}"),
		metric.WithDescription("Expired execution leases this worker found and finalised, by its reaper or its claims. Two workers racing for one lease may both count it."))
	in.refused, errs[5] = m.Int64Counter("leasehold.worker.writes.refused", metric.WithUnit("{write}"),
		metric.WithDescription("Finishes and emits refused because the execution's fencing token is no longer its job's."))
	in.executions, errs[6] = m.Int64Counter("leasehold.worker.executions", metric.WithUnit("{execution}"),
		metric.WithDescription("Executions whose end this worker recorded, by outcome; handed_off counts graceful-shutdown hand-offs."))
	in.expired, errs[10] = m.Int64Counter("leasehold.worker.expired", metric.WithUnit("{job}"),
		metric.WithDescription("Jobs this worker's claims expired because they waited longer than max_wait, per concurrency key they named: a key that stays full."))
	in.settlements, errs[11] = m.Int64Counter("leasehold.worker.settlements", metric.WithUnit("{execution}"),
		metric.WithDescription("Executions' ends settled in the budget of a key that has one, by outcome: ok (the upstream served it), pushback (it refused for capacity), other, failed (the settlement was not written)."))
	in.tokens, errs[12] = m.Int64Counter("leasehold.worker.tokens", metric.WithUnit("{token}"),
		metric.WithDescription("Tokens settled in a key's tpm budget: reserved (the executions' estimates) and spent (their actual usage, where reported)."))
	var depth, keyWaiting, inFlight metric.Int64ObservableGauge
	var age, utilization metric.Float64ObservableGauge
	depth, errs[7] = m.Int64ObservableGauge("leasehold.queue.depth", metric.WithUnit("{job}"),
		metric.WithDescription("Jobs ready to run in the queue, waiting for a worker or a concurrency key."))
	age, errs[8] = m.Float64ObservableGauge("leasehold.queue.oldest.age", metric.WithUnit("s"),
		metric.WithDescription("How long the job the next claim takes (the first of the lane whose turn comes first) has been ready."))
	keyWaiting, errs[13] = m.Int64ObservableGauge("leasehold.queue.key.waiting", metric.WithUnit("{job}"),
		metric.WithDescription("Jobs ready to run in the queue that name the concurrency key (every job names its tenant:<t> key), read from the same counts as the depth."))
	inFlight, errs[9] = m.Int64ObservableGauge("leasehold.worker.executions.in_flight", metric.WithUnit("{execution}"),
		metric.WithDescription("This worker's running executions, per concurrency key they hold (from the worker's own running set)."))
	utilization, errs[14] = m.Float64ObservableGauge("leasehold.worker.utilization", metric.WithUnit("1"),
		metric.WithDescription("This worker's running executions over its concurrency: the autoscaler's measure of busy workers, whose CPU stays idle while they wait on upstreams."))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	_, err := m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		w.observeKeys(func(key string, n int64) {
			o.ObserveInt64(inFlight, n, metric.WithAttributes(attribute.String("key", key)))
		})
		w.mu.Lock()
		busy := len(w.running)
		w.mu.Unlock()
		o.ObserveFloat64(utilization, float64(busy)/float64(w.cfg.Concurrency))
		var errs []error
		for _, q := range w.queues {
			ready, oldest, byLabel, err := q.depth(ctx, w.limits)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			attrs := metric.WithAttributes(attribute.String("queue", q.name))
			o.ObserveInt64(depth, ready, attrs)
			o.ObserveFloat64(age, oldest.Seconds(), attrs)
			for label, n := range byLabel {
				o.ObserveInt64(keyWaiting, n, metric.WithAttributes(attribute.String("queue", q.name), attribute.String("key", label)))
			}
		}
		return errors.Join(errs...)
	}, depth, age, keyWaiting, inFlight, utilization)
	return in, err
}

// depth reads how many jobs are ready (the sum of the lanes' counts),
// how many of them name a concurrency key of each label (l.label; a lane
// is one set of keys), and how long the job the next claim takes has been
// ready (store.Depth).
func (q *queue) depth(ctx context.Context, l *limits) (ready int64, oldest time.Duration, byLabel map[string]int64, err error) {
	ctx, stop := context.WithTimeout(ctx, 2*time.Second)
	defer stop()
	d, err := q.st.Depth(ctx, q.name)
	if err != nil {
		return 0, 0, nil, err
	}
	byLabel = map[string]int64{}
	for lane, n := range d.Lanes {
		ready += n
		for _, label := range l.labels(scripts.LaneKeys(lane)) {
			byLabel[label] += n
		}
	}
	return ready, d.Oldest, byLabel, nil
}

// observeKeys counts the running executions that hold a concurrency key
// of each label (limits.labels).
func (w *Worker) observeKeys(observe func(key string, n int64)) {
	counts := map[string]int64{}
	w.mu.Lock()
	for e := range w.running {
		for _, label := range w.limits.labels(e.keys) {
			counts[label]++
		}
	}
	w.mu.Unlock()
	for k, n := range counts {
		observe(k, n)
	}
}

func (m *metrics) claimed(ctx context.Context, queue string, took time.Duration) {
	m.claim.Record(ctx, took.Seconds(), m.byQueue[queue].queue...)
}

// reapedLeases counts the expired leases a claim (or the reaper's, want 0)
// handed to the claim script, which finalises each.
func (m *metrics) reapedLeases(ctx context.Context, queue string, byReaper bool, n int) {
	if n == 0 {
		return
	}
	by := "claim"
	if byReaper {
		by = "reaper"
	}
	m.reaped.Add(ctx, int64(n), metric.WithAttributes(attribute.String("queue", queue), attribute.String("by", by)))
}

// expiredJobs counts the jobs a claim expired at max_wait, once for each
// label of their concurrency keys; lanes are the jobs' keys as stored.
func (m *metrics) expiredJobs(ctx context.Context, queue string, lanes []string) {
	for _, lane := range lanes {
		for _, label := range m.limits.labels(scripts.LaneKeys(lane)) {
			m.expired.Add(ctx, 1, metric.WithAttributes(attribute.String("queue", queue), attribute.String("key", label)))
		}
	}
}

func (m *metrics) refusedWrite(ctx context.Context, queue, write string) {
	m.refused.Add(ctx, 1, metric.WithAttributes(attribute.String("queue", queue), attribute.String("write", write)))
}

// renewed records r's heartbeat lag: its lease was last renewed by a send a
// TTL before its trust window ends.
func (m *metrics) renewed(ctx context.Context, queue string, r *running, ttl time.Duration) {
	r.mu.Lock()
	last := r.trustedUntil.Add(-ttl)
	r.mu.Unlock()
	m.lag.Record(ctx, time.Since(last).Seconds(), m.byQueue[queue].queue...)
}

// cancelSeen is when and by which path an execution first learnt that its
// cancel was requested.
type cancelSeen struct {
	mu  sync.Mutex
	via string
	at  time.Time
}

func (c *cancelSeen) note(via string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.via == "" {
		c.via, c.at = via, time.Now()
	}
}

func (c *cancelSeen) get() (via string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.via, c.at
}

// cancelFired is the watcher's Fired: it notes the path, for the metrics and
// the trace, on the executions of job id about to be cancelled.
func (w *Worker) cancelFired(id, via string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for e, r := range w.running {
		if e.JobID == id {
			r.cancelSeen.note(via)
			e.traceCancel(via)
		}
	}
}

// settled records a settlement of key, which has budget b: its outcomes and
// its tokens, under key's label (a share key's are its key's). (The keys'
// effective limits and windows are the API's gauges, read from Redis.)
func (m *metrics) settled(ctx context.Context, key string, b job.Budget, ss []store.LeaseSettlement, err error) {
	label, ok := m.limits.label(key)
	if !ok {
		return
	}
	k := attribute.String("key", label)
	if err != nil {
		m.settlements.Add(ctx, int64(len(ss)), metric.WithAttributes(k, attribute.String("outcome", "failed")))
		return
	}
	var reserved, spent int64
	for _, s := range ss {
		m.settlements.Add(ctx, 1, metric.WithAttributes(k, attribute.String("outcome", string(s.Outcome))))
		reserved += s.Estimate
		spent += max(s.Tokens, 0)
	}
	if b.TPM > 0 {
		m.tokens.Add(ctx, reserved, metric.WithAttributes(k, attribute.String("kind", "reserved")))
		m.tokens.Add(ctx, spent, metric.WithAttributes(k, attribute.String("kind", "spent")))
	}
}

// ended records how r's execution ended: its outcome once its finish was
// written, a refused finish, and, for a cancelled one, the cancel's
// latencies from the request time its flag holds.
func (m *metrics) ended(ctx context.Context, r *running, o outcome, state job.State, err error) {
	switch {
	case errors.Is(err, ErrNotOwner):
		m.refusedWrite(ctx, r.e.Queue, "finish")
		return
	case err != nil:
		return // the lease will expire: the reaper records it
	}
	m.executions.Add(ctx, 1, m.byQueue[r.e.Queue].outcomes[o.state]...)
	via, seen := r.cancelSeen.get()
	if o.state != StateCancelled || via == "" {
		return
	}
	finished := time.Now()
	rctx, stop := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer stop()
	requested, err := m.data.CancelRequestedAt(rctx, r.e.JobID)
	if err != nil || requested.IsZero() {
		return // no request time: nothing to measure from
	}
	path := metric.WithAttributes(attribute.String("path", via))
	m.cancelObserve.Record(ctx, max(seen.Sub(requested), 0).Seconds(), path)
	if state == job.StateCancelled {
		m.cancelFinish.Record(ctx, max(finished.Sub(requested), 0).Seconds(), path)
	}
}
