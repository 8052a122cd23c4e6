package httpapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/leasehold/leasehold/job"
)

const meterName = "github.com/leasehold/leasehold/internal/httpapi"

// Latency buckets, in seconds: fast reads up to the longest ?wait=.
var latencyBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// instruments are the API's metrics. In Prometheus form:
//
//	http_server_request_duration_seconds{http_route, http_request_method, http_response_status_code}  histogram
//	leasehold_api_requests_total{http_route, http_request_method, http_response_status_code}            counter
//	leasehold_jobs{queue, state}                                                                       gauge, read from Redis at each collection
//	leasehold_key_limit{key}, leasehold_key_in_use{key}, leasehold_key_waiting{key}                    gauges, each limited key's limit, live leases and ready jobs, read from Redis at each collection
//	leasehold_key_rejections_total{key}                                                                counter, on_busy reject submissions refused for a full key, by the limit that applies to it (scripts.Label)
//
// and the rate limit's, with Config.Rate: see rateInstruments.
type instruments struct {
	duration   metric.Float64Histogram
	requests   metric.Int64Counter
	rejections metric.Int64Counter
}

// newInstruments makes the instruments; counts is asked for the job counts
// and limits for the limited keys at each collection.
func newInstruments(mp metric.MeterProvider, counts func(ctx context.Context, observe func(queue, state string, n int64)) error,
	limits func(ctx context.Context) ([]job.Limit, error)) (*instruments, error) {
	m := mp.Meter(meterName)
	var in instruments
	var err error
	if in.duration, err = m.Float64Histogram("http.server.request.duration",
		metric.WithUnit("s"),
		metric.WithDescription("Time from a request's arrival to the end of its response, a ?wait= or an event stream included."),
		metric.WithExplicitBucketBoundaries(latencyBuckets...)); err != nil {
		return nil, err
	}
	if in.requests, err = m.Int64Counter("leasehold.api.requests",
		metric.WithUnit("{request}"),
		metric.WithDescription("HTTP requests answered, by route, method and status.")); err != nil {
		return nil, err
	}
	jobs, err := m.Int64ObservableGauge("leasehold.jobs",
		metric.WithUnit("{job}"),
		metric.WithDescription("Jobs per queue in the states that still move (queued, running, retrying, waiting)."))
	if err != nil {
		return nil, err
	}
	if _, err = m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		return counts(ctx, func(queue, state string, n int64) {
			o.ObserveInt64(jobs, n, metric.WithAttributes(attribute.String("queue", queue), attribute.String("state", state)))
		})
	}, jobs); err != nil {
		return nil, err
	}
	if in.rejections, err = m.Int64Counter("leasehold.key.rejections",
		metric.WithUnit("{job}"),
		metric.WithDescription("Submissions with on_busy reject refused because this key was full.")); err != nil {
		return nil, err
	}
	limit, err1 := m.Int64ObservableGauge("leasehold.key.limit", metric.WithUnit("{execution}"),
		metric.WithDescription("The key's concurrency limit (absent for a key with a budget alone)."))
	effective, err4 := m.Int64ObservableGauge("leasehold.key.effective_limit", metric.WithUnit("{execution}"),
		metric.WithDescription("An adaptive key's effective limit: its concurrency now, learned from the upstream's pushback."))
	requests, err5 := m.Int64ObservableGauge("leasehold.key.requests_last_minute", metric.WithUnit("{execution}"),
		metric.WithDescription("Executions started in the last minute under a key with an rpm budget or an adaptive one."))
	tokens, err6 := m.Int64ObservableGauge("leasehold.key.tokens_last_minute", metric.WithUnit("{token}"),
		metric.WithDescription("Tokens of the last minute under a key with a tpm budget: estimates, replaced by actual usage as executions end."))
	throttled, err7 := m.Int64ObservableGauge("leasehold.key.throttled", metric.WithUnit("1"),
		metric.WithDescription("1 while the upstream's Retry-After holds the key's claims."))
	inUse, err2 := m.Int64ObservableGauge("leasehold.key.in_use", metric.WithUnit("{execution}"),
		metric.WithDescription("Live leases on the key, over every queue: executions holding it now."))
	waiting, err3 := m.Int64ObservableGauge("leasehold.key.waiting", metric.WithUnit("{job}"),
		metric.WithDescription("Jobs naming the key that are ready to run but not started, over every queue."))
	if err := errors.Join(err1, err2, err3, err4, err5, err6, err7); err != nil {
		return nil, err
	}
	_, err = m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ls, err := limits(ctx)
		for _, l := range ls {
			key := metric.WithAttributes(attribute.String("key", l.Key))
			for _, g := range []struct {
				gauge metric.Int64ObservableGauge
				v     job.Optional
			}{{limit, l.Limit}, {effective, l.EffectiveLimit}, {requests, l.RequestsLastMinute}, {tokens, l.TokensLastMinute}} {
				if g.v.Set {
					o.ObserveInt64(g.gauge, g.v.Value, key)
				}
			}
			if l.RPM.Set || l.TPM.Set || l.Adaptive {
				var on int64
				if !l.ThrottledUntil.IsZero() {
					on = 1
				}
				o.ObserveInt64(throttled, on, key)
			}
			o.ObserveInt64(inUse, l.InUse, key)
			o.ObserveInt64(waiting, l.Waiting, key)
		}
		return err
	}, limit, inUse, waiting, effective, requests, tokens, throttled)
	return &in, err
}

// measure records every request's route, method, status and latency.
func (s *server) measure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &recorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		// r.Pattern is the route ServeMux matched; unmatched paths share
		// one value so that the label set stays small.
		route := r.Pattern
		if route == "" || route == "/" {
			route = "unmatched"
		}
		attrs := metric.WithAttributes(
			attribute.String("http.route", route),
			attribute.String("http.request.method", knownMethod(r.Method)),
			attribute.Int("http.response.status_code", statusOf(rec)),
		)
		ctx := context.WithoutCancel(r.Context())
		s.metrics.duration.Record(ctx, time.Since(start).Seconds(), attrs)
		s.metrics.requests.Add(ctx, 1, attrs)
	})
}

// statusOf is the status a request was answered with.
func statusOf(rec *recorder) int {
	if rec.status == 0 {
		return http.StatusOK // what net/http sends for a handler that wrote nothing
	}
	return rec.status
}

// knownMethod keeps the method label to the methods HTTP defines.
func knownMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return m
	}
	return "_OTHER"
}

// recorder remembers the status a handler answered with. Unwrap lets
// http.ResponseController reach the real writer to flush event streams.
type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
