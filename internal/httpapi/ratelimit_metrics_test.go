package httpapi_test

import (
	"regexp"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/httpapi"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/ratelimit"
)

// expectMetrics scrapes /metrics and checks that each pattern matches.
func (f *fixture) expectMetrics(patterns ...string) {
	f.t.Helper()
	body := f.scrape()
	for _, p := range patterns {
		if !regexp.MustCompile(p).MatchString(body) {
			f.t.Errorf("metrics lack %s", p)
		}
	}
}

// After a small burst, /metrics shows every kind of rate limit decision,
// by tenant and policy, and the limiter's latency: allowed and rejected
// when enforcing, shadowed in observe mode, fallback decisions and
// failures with the limiter's Redis down.
func TestRateLimitMetrics(t *testing.T) {
	t.Parallel()
	const policy = `policy="\\"default\\";q=1;w=3600;burst=2"`
	burst := func(f *fixture, n int) {
		for range n {
			f.postJob(acmeKey, `{"kind": "echo"}`, "")
		}
	}

	t.Run("enforce", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, withRate(t, "1/h:2"))
		burst(f, 3)
		f.expectMetrics(
			`leasehold_ratelimit_decisions_total\{decision="allowed",fallback="false",[^}]*`+policy+`,tenant="acme"[^}]*\} 2\n`,
			`leasehold_ratelimit_decisions_total\{decision="rejected",fallback="false",[^}]*`+policy+`,tenant="acme"[^}]*\} 1\n`,
			`leasehold_ratelimit_duration_seconds_count\{decision="allowed",fallback="false"[^}]*\} 2\n`,
			`leasehold_ratelimit_duration_seconds_bucket\{decision="rejected",fallback="false"[^}]*le="\+Inf"[^}]*\} 1\n`,
		)
	})
	t.Run("shadow", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, withRate(t, "1/h:2", func(l ratelimit.Limiter) ratelimit.Limiter {
			s, err := ratelimit.Shadow(l, ratelimit.ShadowConfig{})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}))
		burst(f, 3)
		f.expectMetrics(
			`leasehold_ratelimit_decisions_total\{decision="allowed",fallback="false",[^}]*`+policy+`,tenant="acme"[^}]*\} 2\n`,
			`leasehold_ratelimit_decisions_total\{decision="shadowed",fallback="false",[^}]*`+policy+`,tenant="acme"[^}]*\} 1\n`,
		)
	})
	t.Run("redis down", func(t *testing.T) {
		t.Parallel()
		srv := testenv.StartRedis(t)
		limiterRDB := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { limiterRDB.Close() })
		fallbackRate, err := ratelimit.ParseRate("1/h:2")
		if err != nil {
			t.Fatal(err)
		}
		withFallback := newFixture(t, func(c *httpapi.Config) {
			c.Rate = bucket(t, limiterRDB, c.Prefix, "1/h:100", func(l ratelimit.Limiter) ratelimit.Limiter {
				fb, err := ratelimit.Fallback(l, ratelimit.FallbackConfig{Rate: fallbackRate, Logger: c.Logger})
				if err != nil {
					t.Fatal(err)
				}
				return fb
			})
		})
		without := newFixture(t, func(c *httpapi.Config) { c.Rate = bucket(t, limiterRDB, c.Prefix, "1/h:100") })
		srv.Kill(t)
		burst(withFallback, 3)
		burst(without, 1)
		withFallback.expectMetrics(
			`leasehold_ratelimit_decisions_total\{decision="allowed",fallback="true",[^}]*`+policy+`,tenant="acme"[^}]*\} 2\n`,
			`leasehold_ratelimit_decisions_total\{decision="rejected",fallback="true",[^}]*`+policy+`,tenant="acme"[^}]*\} 1\n`,
		)
		without.expectMetrics(
			`leasehold_ratelimit_decisions_total\{decision="unavailable",fallback="false",[^}]*policy="",tenant="acme"[^}]*\} 1\n`,
			`leasehold_ratelimit_duration_seconds_count\{decision="unavailable",fallback="false"[^}]*\} 1\n`,
		)
	})
}
