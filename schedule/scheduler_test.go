package schedule_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/kinds"
	"github.com/leasehold/leasehold/schedule"
)

// overlap "skip" with jobs that outlast the interval, two schedulers and a
// real worker: at every fire, at most one of the schedule's jobs has not
// ended, and some due times are skipped for it.
func TestOverlapSkipNeverHasTwoJobsNotEnded(t *testing.T) {
	t.Parallel()
	r := testenv.Redis(t)
	fx := newFixture(t, r.Client(t))
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	w, err := execution.NewWorker(r.Client(t), execution.Config{Prefix: fx.prefix, Heartbeat: 500 * time.Millisecond, LeaseTTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	kinds.Register(w, kinds.SleepConfig{}, kinds.LLMConfig{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	wg.Go(func() { _ = w.Run(ctx) })

	spec := schedule.Spec{Name: "slow", Cron: "@every 1s", Overlap: schedule.OverlapSkip,
		Job: job.Submission{Kind: "sleep", Input: json.RawMessage(`{"duration": "1500ms", "tick": "500ms"}`)}}
	fx.create(t, "acme", spec)

	var mu sync.Mutex
	outcomes := map[schedule.Outcome]int{}
	check := func(res schedule.Result) {
		mu.Lock()
		defer mu.Unlock()
		outcomes[res.Outcome]++
		unended := 0
		for _, j := range fx.jobsOf(t, "acme") {
			if !j.State.Terminal() {
				unended++
			}
		}
		if unended > 1 {
			t.Errorf("after a fire (%s): %d of the schedule's jobs not ended", res.Outcome, unended)
		}
	}
	for range 2 {
		s := fx.scheduler(t, r.Client(t), schedule.SchedulerConfig{})
		s.OnFire(check)
		wg.Go(func() { _ = s.Run(ctx) })
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return outcomes[schedule.Fired] >= 3 && outcomes[schedule.Skipped] >= 2
	}, "fires and skips: %v", outcomes)
	stop()
}
