package schedule_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/schedule"
)

const benchSchedules = 10_000

// createMany creates n @hourly schedules of tenant acme.
func createMany(b *testing.B, fx fixture, n int) {
	b.Helper()
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < n; i += 16 {
				if _, _, err := fx.store.Create(context.Background(), "acme", every(fmt.Sprintf("s-%05d", i), "1h")); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkFireLag10000 makes 10 000 schedules due at one instant and lets
// four schedulers (each on its own Redis connection pool, as four
// processes would be) fire them: the lag of each job, created_at minus its
// due time, p50 and p99. Run it with -benchtime=1x.
func BenchmarkFireLag10000(b *testing.B) {
	r := testenv.Redis(b)
	for b.Loop() {
		b.StopTimer()
		fx := newFixture(b, r.Client(b))
		createMany(b, fx, benchSchedules)
		ctx, stop := context.WithCancel(context.Background())
		due := redisNow(b, fx.rdb).Add(100 * time.Millisecond).Truncate(time.Millisecond)
		if _, err := fx.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range benchSchedules {
				name := fmt.Sprintf("s-%05d", i)
				p.HSet(ctx, fx.keys.Schedule("acme", name), "next", due.UnixMilli())
				p.ZAdd(ctx, fx.keys.ScheduleTenantDue("acme"), redis.Z{Score: float64(due.UnixMilli()), Member: name})
			}
			p.ZAdd(ctx, fx.keys.ScheduleTenants(), redis.Z{Score: float64(due.UnixMilli()), Member: "acme"})
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		var mu sync.Mutex
		var lags []time.Duration
		var wg sync.WaitGroup
		b.StartTimer()
		for range 4 {
			s := fx.scheduler(b, r.Client(b), schedule.SchedulerConfig{})
			s.OnFire(func(res schedule.Result) {
				if res.Outcome == schedule.Fired && res.Created {
					mu.Lock()
					lags = append(lags, res.Job.CreatedAt.Sub(res.Due))
					mu.Unlock()
				}
			})
			wg.Go(func() { _ = s.Run(ctx) })
		}
		testenv.Eventually(b, 5*time.Minute, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(lags) == benchSchedules
		}, "not every schedule fired")
		b.StopTimer()
		stop()
		wg.Wait()
		slices.Sort(lags)
		b.ReportMetric(float64(lags[len(lags)/2].Milliseconds()), "p50-lag-ms")
		b.ReportMetric(float64(lags[len(lags)*99/100].Milliseconds()), "p99-lag-ms")
		b.ReportMetric(float64(lags[len(lags)-1].Milliseconds()), "max-lag-ms")
		b.StartTimer()
	}
}

// BenchmarkDueScan is one read of the due index with 10 000 schedules of
// which none is due: what every scheduler of a fleet pays five times a
// second. It reports Redis commands and Redis CPU per read.
func BenchmarkDueScan(b *testing.B) {
	r := testenv.Redis(b)
	fx := newFixture(b, r.Client(b))
	createMany(b, fx, benchSchedules)
	s := fx.scheduler(b, nil, schedule.SchedulerConfig{})
	cmds, cpu := testenv.CommandsExecuted(b, fx.rdb), testenv.RedisCPU(b, fx.rdb)
	n := 0
	for b.Loop() {
		if taken, err := s.RunOnce(context.Background()); err != nil || taken != 0 {
			b.Fatalf("took %d, %v", taken, err)
		}
		n++
	}
	b.ReportMetric(float64(testenv.CommandsExecuted(b, fx.rdb)-cmds)/float64(n), "redis-cmds/op")
	b.ReportMetric(float64((testenv.RedisCPU(b, fx.rdb)-cpu).Microseconds())/float64(n), "redis-cpu-µs/op")
}
