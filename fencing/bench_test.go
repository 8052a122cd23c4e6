package fencing_test

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
)

var benchValue = bytes.Repeat([]byte("v"), 64)

// BenchmarkFencedWrite is a fenced write that is always accepted (the token
// grows each time), one client, one goroutine: the latency of the script.
func BenchmarkFencedWrite(b *testing.B) {
	rdb, trips := countingClient(b)
	s := store.New(rdb, store.Config{Prefix: testenv.Prefix(b)}).Fence()
	ctx := b.Context()
	// The first call loads the script (EVALSHA, then EVAL): keep it untimed.
	if err := s.Write(ctx, "bench", 1, benchValue); err != nil {
		b.Fatal(err)
	}
	trips.Store(0)
	token := fencing.Token(1)
	for b.Loop() {
		token++
		if err := s.Write(ctx, "bench", token, benchValue); err != nil {
			b.Fatal(err)
		}
	}
	report(b, trips.Load())
}

// BenchmarkBaselineSet is a plain SET of the same value on the same kind of
// key: what a write costs without the fence.
func BenchmarkBaselineSet(b *testing.B) {
	rdb, trips := countingClient(b)
	key := keys.New(testenv.Prefix(b)).Fenced("bench")
	ctx := b.Context()
	if err := rdb.Ping(ctx).Err(); err != nil { // dial outside the timed loop
		b.Fatal(err)
	}
	trips.Store(0)
	for b.Loop() {
		if err := rdb.Set(ctx, key, benchValue, 0).Err(); err != nil {
			b.Fatal(err)
		}
	}
	report(b, trips.Load())
}

func report(b *testing.B, trips int64) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	b.ReportMetric(float64(trips)/float64(b.N), "roundtrips/op")
}

// countingClient is a client of the shared Redis that counts the commands it
// sends, each one a round trip, so a benchmark reports them measured.
func countingClient(b *testing.B) (*redis.Client, *atomic.Int64) {
	rdb := redis.NewClient(&redis.Options{Addr: testenv.Redis(b).Addr()})
	b.Cleanup(func() { rdb.Close() })
	trips := new(atomic.Int64)
	rdb.AddHook(counter{trips})
	return rdb, trips
}

type counter struct{ n *atomic.Int64 }

func (c counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmds)
	}
}
