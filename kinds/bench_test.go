package kinds

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/fakellm"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// utilSteps are the upstream's hidden capacities, one per phase of
// BenchmarkUtilisation, each a step from the last.
var utilSteps = []int{5, 20, 100, 20, 5}

// utilMode is one way to limit the model's key in BenchmarkUtilisation:
// adaptive, with a limit 4x the largest capacity, never told the capacity;
// or a fixed limit of factor times the capacity, reset at every step by
// an operator who knows it (the best a fixed limit can do, and one 4x too
// high).
type utilMode struct {
	name   string
	key    string // its name in LEASEHOLD_BENCH_MODES
	factor int    // 0: adaptive
}

func (m utilMode) limit(capacity int) job.KeyLimit {
	if m.factor == 0 {
		n := int64(4 * utilSteps[2])
		return job.KeyLimit{Limit: &n, Budget: job.Budget{Adaptive: true}}
	}
	n := int64(m.factor * capacity)
	return job.KeyLimit{Limit: &n}
}

// utilRun is one mode's upstream, store and workers.
type utilRun struct {
	mode      utilMode
	upstream  *fakellm.Server
	store     *store.Store
	stop      func()      // stops its workers
	submitted int         // jobs submitted so far
	eff       []effSample // the adaptive key's effective limit, sampled
	mu        sync.Mutex
}

type effSample struct {
	at  time.Time
	eff int64
	st  fakellm.Stats // the upstream's, at the same time
}

// BenchmarkUtilisation puts llm.chat before an upstream whose capacity is
// hidden and steps through utilSteps (LEASEHOLD_BENCH_PHASE each, default
// 2m: an upstream's capacity changes over minutes and hours, not seconds;
// 30s is the stress case, see docs/benchmarks.md), with a queue that never runs dry, three ways one after the other
// in the same run, each on an upstream, key prefix and two workers of its
// own: an adaptive limit, a fixed limit at the capacity and one at 4x it.
// (One after the other: the 4x mode's storm of refusals, run beside the
// others, took the two cores they needed at capacity 100.) Per phase it
// reports the share of the capacity used (the upstream's served call-time
// within its capacity over capacity x time), the share of calls refused
// with 429, and how long the adaptive key's effective limit took to come
// within 10 % (at least 1) of the new capacity. Calls take a second (10
// tokens, 100 ms apart), as a short LLM answer does.
//
// Run it with make bench/utilisation; it takes about half an hour. For
// quick iterations on the law, LEASEHOLD_BENCH_MODES=adaptive runs that
// mode alone (a comma-separated subset of adaptive, capacity and 4x),
// LEASEHOLD_BENCH_PHASE=30s shortens the phases, and LEASEHOLD_BENCH_TRACE=1
// prints the adaptive key's moves in each phase.
func BenchmarkUtilisation(b *testing.B) {
	phase := 2 * time.Minute
	if v := os.Getenv("LEASEHOLD_BENCH_PHASE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("LEASEHOLD_BENCH_PHASE: %v", err)
		}
		phase = d
	}
	modes := []utilMode{{"adaptive", "adaptive", 0}, {"fixed at capacity", "capacity", 1}, {"fixed at 4x", "4x", 4}}
	if v := os.Getenv("LEASEHOLD_BENCH_MODES"); v != "" {
		want := strings.Split(v, ",")
		modes = slices.DeleteFunc(modes, func(m utilMode) bool { return !slices.Contains(want, m.key) })
		if len(modes) == 0 {
			b.Fatalf("LEASEHOLD_BENCH_MODES %q: name adaptive, capacity or 4x", v)
		}
	}
	for range b.N {
		var out strings.Builder
		fmt.Fprintf(&out, "phases of %v, calls of ~1s; utilisation / 429s of calls (adaptive: / settled after)\n", phase)
		fmt.Fprintf(&out, "%-18s", "capacity")
		for _, c := range utilSteps {
			fmt.Fprintf(&out, " | %-22d", c)
		}
		fmt.Fprintf(&out, " | all\n")
		for _, m := range modes {
			r := startUtilRun(b, m, phase)
			fmt.Fprintf(&out, "%-18s", m.name)
			var busy, capacity time.Duration
			var calls, refused int
			var failed int64
			var counts strings.Builder // refused of calls, and jobs failed, per phase
			fmt.Fprintf(&counts, "%-18s", "  refused, failed")
			for _, c := range utilSteps {
				p := r.phase(b, c, phase)
				cell := fmt.Sprintf("%.0f %% / %.1f %%", 100*p.busy.Seconds()/p.capacity.Seconds(), 100*float64(p.refused)/float64(max(p.calls, 1)))
				if m.factor == 0 {
					cell += " / " + p.settle
				}
				fmt.Fprintf(&out, " | %-22s", cell)
				fmt.Fprintf(&counts, " | %-22s", fmt.Sprintf("%d of %d, %d", p.refused, p.calls, p.failed))
				busy, capacity, calls, refused, failed = busy+p.busy, capacity+p.capacity, calls+p.calls, refused+p.refused, failed+p.failed
			}
			r.stop()
			util, share := busy.Seconds()/capacity.Seconds(), float64(refused)/float64(max(calls, 1))
			fmt.Fprintf(&out, " | %.0f %% / %.1f %%\n", 100*util, 100*share)
			fmt.Fprintf(&out, "%s | %d of %d, %d\n", counts.String(), refused, calls, failed)
			unit := strings.ReplaceAll(m.name, " ", "_")
			b.ReportMetric(100*util, unit+"_util_%")
			b.ReportMetric(100*share, unit+"_429_%")
		}
		b.Log("\n" + out.String())
	}
}

// utilPhase is what one phase of a run measured.
type utilPhase struct {
	busy, capacity time.Duration // call-time served within the capacity, and the capacity's
	calls, refused int
	failed         int64  // jobs failed (upstream_limited: 50 pushbacks in a row)
	settle         string // the adaptive key's time to settle
}

// phase steps the upstream to capacity (and a fixed mode's limit with it),
// waits d and reports what the upstream saw meanwhile.
func (r *utilRun) phase(b *testing.B, capacity int, d time.Duration) utilPhase {
	b.Helper()
	r.fill(b, capacity, d)
	failed := r.failed(b)
	r.upstream.SetLimits(fakellm.Limits{Concurrency: capacity})
	if r.mode.factor > 0 {
		if err := r.store.SetKeyLimit(b.Context(), "model:fake-1", r.mode.limit(capacity)); err != nil {
			b.Fatal(err)
		}
	}
	start, t0 := r.upstream.Stats(), time.Now()
	time.Sleep(d)
	end, took := r.upstream.Stats(), time.Since(t0)
	p := utilPhase{
		busy: end.Busy - start.Busy, capacity: time.Duration(capacity) * took,
		calls: end.Calls - start.Calls, refused: end.Refused - start.Refused,
		failed: r.failed(b) - failed,
	}
	if r.mode.factor == 0 {
		p.settle = r.settled(t0, capacity)
		if os.Getenv("LEASEHOLD_BENCH_TRACE") != "" {
			fmt.Fprintf(os.Stderr, "capacity %d:%s\n", capacity, r.trace(t0))
		}
	}
	return p
}

// fill tops the queue up to more jobs than a phase of d at capacity can
// run, so that it never runs dry, even when a fixed limit 4x too high
// fails jobs by the hundred (50 pushbacks in a row: upstream_limited).
func (r *utilRun) fill(b *testing.B, capacity int, d time.Duration) {
	b.Helper()
	var pending int64
	qs, err := r.store.Stats(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	for _, q := range qs {
		pending += q.Queued + q.Retrying
	}
	var items []job.BatchItem
	for range max(0, int64(capacity)*int64(math.Ceil(d.Seconds()))*12/10+100-pending) {
		items = append(items, job.BatchItem{Submission: chatJob(r.submitted, 0, 1)})
		r.submitted++
	}
	for chunk := range slices.Chunk(items, job.MaxBatch) {
		res, err := r.store.SubmitBatch(b.Context(), "acme", chunk, job.Cap{})
		if err != nil {
			b.Fatal(err)
		}
		for _, x := range res {
			if x.Err != nil {
				b.Fatal(x.Err)
			}
		}
	}
}

// failed counts the jobs that failed in the last hour.
func (r *utilRun) failed(b *testing.B) int64 {
	b.Helper()
	minutes, err := r.store.Finished(b.Context(), job.DefaultQueue)
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, m := range minutes {
		n += m.Failed
	}
	return n
}

// startUtilRun starts a mode's upstream and two workers, and queues more
// jobs than its phases can run; stop stops the workers.
func startUtilRun(b *testing.B, m utilMode, phase time.Duration) *utilRun {
	b.Helper()
	upstream := fakellm.New(fakellm.Config{Tokens: 10, Delay: 100 * time.Millisecond, Limits: fakellm.Limits{Concurrency: utilSteps[0]}})
	srv := httptest.NewServer(upstream)
	b.Cleanup(srv.Close)
	b.Cleanup(upstream.Close)
	// Keep-alive for every call in flight, so the 4x mode's refusals do not
	// open a connection each.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1000}}
	b.Cleanup(client.CloseIdleConnections)

	rdb := testenv.Redis(b).Client(b)
	nc := testenv.NATS(b).Conn(b)
	prefix := testenv.Prefix(b)
	subject := cancelSubject(prefix)
	store := store.New(rdb, store.Config{Prefix: prefix})
	if err := store.SetKeyLimit(b.Context(), "model:fake-1", m.limit(utilSteps[0])); err != nil {
		b.Fatal(err)
	}
	r := &utilRun{mode: m, upstream: upstream, store: store}
	r.fill(b, utilSteps[0], phase)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 2 {
		w, err := execution.NewWorker(rdb, execution.Config{
			Prefix: prefix, CancelSubject: subject, NATS: nc,
			Concurrency: 4*utilSteps[2]/2 + 50, // the 4x mode's limit over two workers, and some
			Poll:        50 * time.Millisecond,
			// Limits are read every heartbeat: the fixed modes' new limit
			// takes effect within 200 ms of the step, not 2 s.
			Heartbeat:     200 * time.Millisecond,
			ShutdownGrace: time.Second,
			Logger:        slog.New(slog.DiscardHandler),
		})
		if err != nil {
			b.Fatal(err)
		}
		Register(w, SleepConfig{}, LLMConfig{BaseURL: srv.URL + "/v1", Client: client})
		wg.Go(func() {
			if err := w.Run(ctx); err != nil {
				b.Errorf("worker: %v", err)
			}
		})
	}
	if m.factor == 0 {
		wg.Go(func() { r.sample(ctx) })
	}
	r.stop = func() { stop(); wg.Wait() }
	return r
}

// sample reads the adaptive key's effective limit every 100 ms until ctx
// is done.
func (r *utilRun) sample(ctx context.Context) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		ls, err := r.store.Limits(ctx)
		if err != nil {
			continue // the benchmark is ending
		}
		for _, l := range ls {
			if l.Key == "model:fake-1" && l.EffectiveLimit.Set {
				r.mu.Lock()
				r.eff = append(r.eff, effSample{at: time.Now(), eff: l.EffectiveLimit.Value, st: r.upstream.Stats()})
				r.mu.Unlock()
			}
		}
	}
}

// trace lists the adaptive key's samples since t0 where its effective
// limit or the upstream's refusals changed, as seconds:effective/serving
// (-refused since the last sample): the law's moves, for LEASEHOLD_BENCH_TRACE.
func (r *utilRun) trace(t0 time.Time) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var last effSample
	var out strings.Builder
	for _, s := range r.eff {
		if !s.at.Before(t0) && (s.eff != last.eff || s.st.Refused != last.st.Refused) {
			fmt.Fprintf(&out, " %.1f:%d/%d(-%d)", s.at.Sub(t0).Seconds(), s.eff, s.st.Serving, s.st.Refused-last.st.Refused)
		}
		last = s
	}
	return out.String()
}

// settled says how long after since the effective limit first came within
// 10 % (at least 1) of capacity, or "not settled".
func (r *utilRun) settled(since time.Time, capacity int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	within := math.Max(1, 0.1*float64(capacity))
	for _, s := range r.eff {
		if s.at.After(since) && math.Abs(float64(s.eff)-float64(capacity)) <= within {
			return fmt.Sprintf("%.1fs", s.at.Sub(since).Seconds())
		}
	}
	return "not settled"
}
