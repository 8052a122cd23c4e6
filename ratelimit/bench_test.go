package ratelimit_test

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/ratelimit"
)

// The baseline is the naive limiter every algorithm here replaces: one INCR
// per request, one round trip. Each algorithm is one round trip too (one
// EVALSHA), so the benchmarks show what its script costs on top. Limits are
// generous, so every request is admitted and does the full write; requests
// go round 1000 subjects, as a busy API's tenants do.
func BenchmarkAllow(b *testing.B) {
	rdb := testenv.Redis(b).Client(b)
	b.Run("incr_baseline", func(b *testing.B) {
		key := testenv.Prefix(b) + "counter"
		for b.Loop() {
			if err := rdb.Incr(b.Context(), key).Err(); err != nil {
				b.Fatal(err)
			}
		}
		reportOps(b)
	})
	for _, alg := range algorithms {
		b.Run(alg.name, func(b *testing.B) {
			f := newFixture(b, rdb, alg, benchRate(alg))
			subjects := benchSubjects()
			i := 0
			for b.Loop() {
				if _, err := f.l.Allow(b.Context(), subjects[i%len(subjects)], 1); err != nil {
					b.Fatal(err)
				}
				i++
			}
			reportOps(b)
		})
	}
}

// BenchmarkAllowParallel is the same with many concurrent callers, as
// several API handlers are.
func BenchmarkAllowParallel(b *testing.B) {
	rdb := testenv.Redis(b).Client(b)
	b.Run("incr_baseline", func(b *testing.B) {
		key := testenv.Prefix(b) + "counter"
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := rdb.Incr(b.Context(), key).Err(); err != nil {
					b.Error(err)
					return
				}
			}
		})
		reportOps(b)
	})
	for _, alg := range algorithms {
		b.Run(alg.name, func(b *testing.B) {
			f := newFixture(b, rdb, alg, benchRate(alg))
			subjects := benchSubjects()
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					s := subjects[next.Add(1)%int64(len(subjects))]
					if _, err := f.l.Allow(b.Context(), s, 1); err != nil {
						b.Error(err)
						return
					}
				}
			})
			reportOps(b)
		})
	}
}

func benchRate(alg algorithm) ratelimit.Rate {
	r := ratelimit.Rate{Limit: 1_000_000, Period: time.Minute}
	if alg.name == "token_bucket" {
		r.Burst = 1_000_000
	}
	return r
}

func benchSubjects() []string {
	s := make([]string, 1000)
	for i := range s {
		s[i] = "tenant-" + strconv.Itoa(i)
	}
	return s
}

func reportOps(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}
