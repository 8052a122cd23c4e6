package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"

	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/ratelimit"
)

// The fallback decides only while Redis does not answer: logged when it
// takes over and when it hands back, and every decision counted.
func TestFallbackOnlyWhileRedisIsDown(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv := testenv.StartRedis(t)
	// No retries: each call finds the outage at once.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	shared, err := ratelimit.NewFixedWindow(store.New(rdb, store.Config{Prefix: testenv.Prefix(t)}), ratelimit.Config{
		Rate: ratelimit.Rate{Limit: 100, Period: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	m, out := newMeter(t), &logs{}
	l, err := ratelimit.Fallback(shared, ratelimit.FallbackConfig{
		Rate: ratelimit.Rate{Limit: 2, Period: time.Hour}, Logger: out.logger(), MeterProvider: m})
	if err != nil {
		t.Fatal(err)
	}

	d, err := l.Allow(ctx, "a", 1)
	if err != nil || d.Fallback || !d.Allowed || d.Remaining != 99 {
		t.Fatalf("with Redis up: %+v, %v; want the shared limit's decision", d, err)
	}
	if n := m.count(t, "leasehold.ratelimit.fallback.decisions"); n != 0 || len(out.Lines()) != 0 {
		t.Fatalf("with Redis up: %d fallback decisions, logs %q", n, out.Lines())
	}

	srv.Kill(t)
	// Without the fallback, an outage is an error, never a refusal.
	if d, err := shared.Allow(ctx, "a", 1); err == nil || errors.Is(err, ratelimit.ErrInvalid) || d.Allowed {
		t.Fatalf("shared limit with Redis down: %+v, %v; want an outage error", d, err)
	}
	// With it, this process limits on its own: 2 per hour per subject.
	for i, want := range []bool{true, true, false} {
		d, err := l.Allow(ctx, "a", 1)
		if err != nil || !d.Fallback || d.Allowed != want {
			t.Fatalf("request %d with Redis down: %+v, %v; want a fallback decision, allowed %v", i, d, err, want)
		}
		if !want {
			// One token per 30 minutes.
			within(t, "retry after", d.RetryAfter, 29*time.Minute, 30*time.Minute+time.Second)
		}
	}
	if d, err := l.Allow(ctx, "b", 1); err != nil || !d.Fallback || !d.Allowed {
		t.Fatalf("another subject with Redis down: %+v, %v; want its own fallback bucket", d, err)
	}
	if got := len(out.Lines("level=WARN", "does not answer")); got != 1 {
		t.Fatalf("%d warnings about the outage, want 1:\n%s", got, out.String())
	}
	if a, r := m.count(t, "leasehold.ratelimit.fallback.decisions", attribute.Bool("allowed", true)),
		m.count(t, "leasehold.ratelimit.fallback.decisions", attribute.Bool("allowed", false)); a != 3 || r != 1 {
		t.Fatalf("fallback decisions: %d allowed, %d refused; want 3 and 1", a, r)
	}
	// A caller that gave up gets its error, and bad input is no outage.
	gone, stop := context.WithCancel(ctx)
	stop()
	if d, err := l.Allow(gone, "a", 1); err == nil || d.Fallback {
		t.Fatalf("cancelled call with Redis down: %+v, %v; want its error", d, err)
	}
	if _, err := l.Allow(ctx, "{a}", 1); !errors.Is(err, ratelimit.ErrInvalid) {
		t.Fatalf("bad subject with Redis down: %v, want ErrInvalid", err)
	}

	srv.Restart(t)
	testenv.Eventually(t, 10*time.Second, func() bool {
		d, err = l.Allow(ctx, "a", 1)
		return err == nil && !d.Fallback
	}, "the shared limit never decided again")
	if d.Remaining != 98 {
		t.Fatalf("remaining %d after Redis came back, want 98: the shared count goes on", d.Remaining)
	}
	if got := len(out.Lines("level=INFO", "answers again")); got != 1 {
		t.Fatalf("%d notes that Redis is back, want 1:\n%s", got, out.String())
	}
}
