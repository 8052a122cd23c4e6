package ratelimit_test

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/ratelimit"
)

// benchKeys are the key spreads measured: every request on one subject (one
// tenant's burst, one hot key), and round 10 000 subjects (a busy API's
// tenants, a working set larger than any cache near Redis's data).
var benchKeys = []int{1, 10_000}

// The baseline is the naive limiter every algorithm here replaces: one INCR
// per request, one round trip, over as many keys. Each algorithm is one
// round trip too (one EVALSHA), so the benchmarks show what its script costs
// on top. Limits are generous, so every request is admitted and does the
// full write. Each result carries ops/s, the Redis commands run per
// decision (INFO commandstats, those inside scripts included) and, as
// vs_incr, its ops/s over the INCR baseline's of the same run.
func BenchmarkAllow(b *testing.B) {
	benchAllow(b, func(b *testing.B, allow func(i int64) error) {
		var i int64
		for b.Loop() {
			if err := allow(i); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// BenchmarkAllowParallel is the same with 8 concurrent callers per CPU, as
// an API's handlers are.
func BenchmarkAllowParallel(b *testing.B) {
	benchAllow(b, func(b *testing.B, allow func(i int64) error) {
		var next atomic.Int64
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := allow(next.Add(1)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// benchAllow runs loop, which calls allow with a request number, for the
// INCR baseline and then each algorithm, at each key spread.
func benchAllow(b *testing.B, loop func(b *testing.B, allow func(i int64) error)) {
	rdb := testenv.Redis(b).Client(b)
	for _, n := range benchKeys {
		subjects := benchSubjects(n)
		var baseline float64 // the INCR baseline's ops/s at this spread
		b.Run(fmt.Sprintf("keys=%d/incr_baseline", n), func(b *testing.B) {
			prefix := testenv.Prefix(b)
			keys := make([]string, n)
			for i, s := range subjects {
				keys[i] = prefix + s
			}
			measure(b, rdb, 0, func() {
				loop(b, func(i int64) error { return rdb.Incr(b.Context(), keys[i%int64(n)]).Err() })
			}, &baseline)
		})
		for _, alg := range algorithms {
			b.Run(fmt.Sprintf("keys=%d/%s", n, alg.name), func(b *testing.B) {
				f := newFixture(b, rdb, alg, benchRate(alg))
				measure(b, rdb, baseline, func() {
					loop(b, func(i int64) error {
						_, err := f.l.Allow(b.Context(), subjects[i%int64(n)], 1)
						return err
					})
				}, nil)
			})
		}
	}
}

// measure runs run and reports ops/s, Redis commands per op and, when
// baseline is set, the ratio of ops/s to it; ops, when not nil, receives
// the ops/s.
func measure(b *testing.B, rdb redis.UniversalClient, baseline float64, run func(), ops *float64) {
	before := testenv.CommandsExecuted(b, rdb)
	run()
	after := testenv.CommandsExecuted(b, rdb)
	perSec := float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(perSec, "ops/s")
	b.ReportMetric(float64(after-before)/float64(b.N), "cmds/op")
	if baseline > 0 {
		b.ReportMetric(perSec/baseline, "vs_incr")
	}
	if ops != nil {
		*ops = perSec
	}
}

func benchRate(alg algorithm) ratelimit.Rate {
	r := ratelimit.Rate{Limit: 1_000_000, Period: time.Minute}
	if alg.name == "token_bucket" {
		r.Burst = 1_000_000
	}
	return r
}

func benchSubjects(n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = "tenant-" + strconv.Itoa(i)
	}
	return s
}
