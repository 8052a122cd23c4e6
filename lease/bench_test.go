package lease_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testenv"
)

// The baseline is the naive design the lease replaces: INCR before, DECR
// after, one round trip each. A lease costs one round trip per acquire,
// renew and release too; the benchmarks show what the scripts add per trip.

func BenchmarkBaselineIncrDecr(b *testing.B) {
	rdb := testenv.Redis(b).Client(b)
	key := testenv.Prefix(b) + "counter"
	for b.Loop() {
		rdb.Incr(b.Context(), key)
		rdb.Decr(b.Context(), key)
	}
	report(b, 2)
}

func BenchmarkAcquireRelease(b *testing.B) {
	c, _ := newClient(b, testenv.Redis(b).Client(b))
	i := 0
	for b.Loop() {
		l, err := c.Acquire(b.Context(), "k", strconv.Itoa(i), 100, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Release(b.Context(), l); err != nil {
			b.Fatal(err)
		}
		i++
	}
	report(b, 2)
}

func BenchmarkRenew(b *testing.B) {
	c, _ := newClient(b, testenv.Redis(b).Client(b))
	l := mustAcquire(b, c, "k", "h", 1, time.Minute)
	for b.Loop() {
		var err error
		if l, err = c.Renew(b.Context(), l); err != nil {
			b.Fatal(err)
		}
	}
	report(b, 1)
}

// BenchmarkAcquireReleaseParallel runs many holders against one key with
// room for all of them, as a busy fleet does.
func BenchmarkAcquireReleaseParallel(b *testing.B) {
	c, _ := newClient(b, testenv.Redis(b).Client(b))
	b.RunParallel(func(pb *testing.PB) {
		holder := strconv.FormatInt(time.Now().UnixNano(), 36)
		for pb.Next() {
			l, err := c.Acquire(b.Context(), "k", holder, 1_000_000, time.Minute)
			if err != nil {
				b.Error(err)
				return
			}
			if err := c.Release(b.Context(), l); err != nil {
				b.Error(err)
				return
			}
		}
	})
	report(b, 2)
}

// report adds operations per second and Redis round trips per operation.
func report(b *testing.B, roundTrips int) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	b.ReportMetric(float64(roundTrips), "trips/op")
}
